"""An editor's session with `loopcheck server`, over stdio: open, change, fix, hover, close."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from loopcheck import __version__
from loopcheck.catalog import page
from loopcheck.lint.fixing import fix_source

from .conftest import BUGGY, FIXED, apply_edits, document_edits, expected, found, opened, position_of, write
from .lsp import LspClient


def _actions(server, path: Path, rng: dict, only: list[str] | None = None) -> list[dict]:
    context: dict = {"diagnostics": []}
    if only is not None:
        context["only"] = only
    return server.request("textDocument/codeAction", {"textDocument": {"uri": path.as_uri()}, "range": rng, "context": context})


def _range_of(diagnostics: list[dict], code: str) -> dict:
    return next(d["range"] for d in diagnostics if d["code"] == code)


def test_initialize_announces_diagnostics_actions_and_hover(project):
    client = LspClient(project)
    try:
        result = client.initialize(project)
        caps = result["capabilities"]
        assert result["serverInfo"] == {"name": "loopcheck", "version": __version__}
        assert caps["positionEncoding"] == "utf-16"
        assert caps["textDocumentSync"]["openClose"] is True
        assert caps["textDocumentSync"]["change"] == 2  # incremental
        assert caps["textDocumentSync"]["save"]
        assert caps["codeActionProvider"]["codeActionKinds"] == ["quickfix", "source.fixAll.loopcheck"]
        assert caps["hoverProvider"] is True
        assert client.close() == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


def test_open_publishes_each_finding_at_its_range(server, path):
    diagnostics = opened(server, path, BUGGY)
    assert found(diagnostics) == expected(BUGGY)
    lc102 = next(d for d in diagnostics if d["code"] == "LC102")
    start = position_of(BUGGY, "optimizer.zero_grad()")
    assert lc102["range"] == {"start": start, "end": {"line": start["line"], "character": start["character"] + 21}}
    assert lc102["severity"] == 1 and lc102["source"] == "loopcheck"
    lc508 = next(d for d in diagnostics if d["code"] == "LC508")
    assert lc508["severity"] == 2
    assert lc508["range"]["start"] == position_of(BUGGY, "torch.load(resume_from)")


def test_a_change_that_fixes_the_loop_clears_the_diagnostics(server, path):
    assert opened(server, path, BUGGY)
    # the editor sends the edit as ranges: the reset moved above backward, weights_only added
    reset = position_of(BUGGY, "optimizer.zero_grad()")
    backward = position_of(BUGGY, "loss.backward()")
    load_end = position_of(BUGGY, "))  # expect: LC508")
    changes = [
        {"range": {"start": {"line": reset["line"], "character": 0}, "end": {"line": reset["line"] + 1, "character": 0}}, "text": ""},
        {"range": {"start": {"line": backward["line"], "character": 0}, "end": {"line": backward["line"], "character": 0}},
         "text": " " * backward["character"] + "optimizer.zero_grad()\n"},
        {"range": {"start": load_end, "end": {"line": load_end["line"], "character": load_end["character"] + 22}},
         "text": ", weights_only=True))"},
    ]
    server.change(path, 2, changes)
    assert server.diagnostics(path, version=2) == []
    # and bringing the bug back brings its finding back
    server.change(path, 3, [{"text": BUGGY}])
    assert found(server.diagnostics(path, version=3)) == expected(BUGGY)


def test_the_quick_fix_applies_cleanly_and_matches_lint_fix(server, path):
    diagnostics = opened(server, path, BUGGY)
    actions = _actions(server, path, _range_of(diagnostics, "LC102"), only=["quickfix"])
    fix = next(a for a in actions if a["title"].startswith("Fix LC102"))
    assert fix["kind"] == "quickfix" and fix["isPreferred"] is True
    assert [d["code"] for d in fix["diagnostics"]] == ["LC102"]
    new = apply_edits(BUGGY, document_edits(fix, path.as_uri(), 1))
    cst.parse_module(new)
    assert new == fix_source(BUGGY, str(path)).source  # what `loopcheck lint --fix` writes
    server.change(path, 2, [{"text": new}])
    assert found(server.diagnostics(path, version=2)) == [("LC508", position_of(BUGGY, "torch.load")["line"])]


def test_an_unsafe_fix_is_offered_but_never_preferred(server, path):
    diagnostics = opened(server, path, BUGGY)
    actions = _actions(server, path, _range_of(diagnostics, "LC508"), only=["quickfix"])
    fix = next(a for a in actions if a["title"].startswith("Fix LC508 (unsafe)"))
    assert fix["isPreferred"] is False
    new = apply_edits(BUGGY, document_edits(fix, path.as_uri(), 1))
    assert "torch.load(resume_from, weights_only=True)" in new
    server.change(path, 2, [{"text": new}])
    assert "LC508" not in [c for c, _ in found(server.diagnostics(path, version=2))]


def test_fix_all_applies_the_safe_fixes_unless_unsafe_fixes_are_turned_on(start, project):
    server = start({"unsafeFixes": False})
    path = write(project / "train.py", BUGGY)
    server.open(path, BUGGY)
    server.diagnostics(path, version=1)
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": len(BUGGY.splitlines()), "character": 0}}
    for version, unsafe, left in ((1, False, ["LC508"]), (2, True, [])):
        if unsafe:  # the editor's settings change while the document is open
            server.notify("workspace/didChangeConfiguration", {"settings": {"loopcheck": {"unsafeFixes": True, "debounce": 20}}})
            server.change(path, version, [{"text": BUGGY}])
            server.diagnostics(path, version=version)
        actions = _actions(server, path, whole, only=["source.fixAll"])
        assert [a["kind"] for a in actions] == ["source.fixAll.loopcheck"]
        new = apply_edits(BUGGY, document_edits(actions[0], path.as_uri(), version))
        assert new == fix_source(BUGGY, str(path), unsafe=unsafe).source
        server.change(path, version + 10, [{"text": new}])
        assert [c for c, _ in found(server.diagnostics(path, version=version + 10))] == left
    assert server.close() == 0


def test_the_noqa_action_silences_the_finding_on_its_line(server, path):
    diagnostics = opened(server, path, BUGGY)
    actions = _actions(server, path, _range_of(diagnostics, "LC102"))
    noqa = next(a for a in actions if "noqa" in a["title"])
    assert noqa["title"] == "Silence LC102 on this line (# noqa)"
    new = apply_edits(BUGGY, document_edits(noqa, path.as_uri(), 1))
    assert "optimizer.zero_grad()  # expect: LC102  # noqa: LC102\n" in new
    server.change(path, 2, [{"text": new}])
    assert [c for c, _ in found(server.diagnostics(path, version=2))] == ["LC508"]


def test_actions_for_a_range_without_findings_are_empty(server, path):
    assert opened(server, path, FIXED) == []
    assert _actions(server, path, {"start": {"line": 0, "character": 0}, "end": {"line": 20, "character": 0}}) == []


def test_hover_on_a_finding_shows_its_message_and_rule_page(server, path):
    diagnostics = opened(server, path, BUGGY)
    lc102 = next(d for d in diagnostics if d["code"] == "LC102")
    inside = dict(lc102["range"]["start"], character=lc102["range"]["start"]["character"] + 5)
    result = server.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()}, "position": inside})
    assert result["contents"]["kind"] == "markdown"
    text = result["contents"]["value"]
    assert text.startswith("**LC102** `zero-grad-between-backward-and-step` (error)")
    assert lc102["message"] in text
    assert page("LC102").section("What it finds") in text and page("LC102").example("Bad") in text
    assert result["range"] == lc102["range"]


def test_hover_on_a_code_in_a_noqa_comment_shows_its_page(server, path):
    source = FIXED.replace("optimizer.step()\n", "optimizer.step()  # noqa: LC201\n")
    opened(server, path, source)
    at = position_of(source, "LC201")
    result = server.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()}, "position": dict(at, character=at["character"] + 2)})
    assert result["contents"]["value"].startswith("**LC201** `scheduler-before-optimizer`")
    assert result["range"] == {"start": at, "end": dict(at, character=at["character"] + 5)}
    nothing = server.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()}, "position": {"line": 0, "character": 2}})
    assert nothing is None


def test_columns_are_counted_in_utf16_code_units(server, path):
    source = BUGGY.replace("            optimizer.zero_grad()  # expect: LC102\n",
                           '            tag = "🔥"; optimizer.zero_grad()  # expect: LC102\n')
    lc102 = next(d for d in opened(server, path, source) if d["code"] == "LC102")
    start = position_of(source, "optimizer.zero_grad()")
    assert start["character"] == len('            tag = "🔥"; ') + 1  # the emoji is two UTF-16 units
    assert lc102["range"]["start"] == start


def test_a_syntax_error_is_reported_on_its_line_and_cleared_when_fixed(server, path):
    broken = FIXED.replace("logits = model(images)", "logits = model(images")
    [error] = opened(server, path, broken)
    assert error["severity"] == 1 and "syntax error" in error["message"]
    assert error["range"]["start"]["line"] in range(position_of(broken, "logits =")["line"], position_of(broken, "loss =")["line"] + 1)
    server.change(path, 2, [{"text": FIXED}])
    assert server.diagnostics(path, version=2) == []


def test_closing_a_document_clears_its_diagnostics(server, path):
    assert opened(server, path, BUGGY)
    server.notify("textDocument/didClose", {"textDocument": {"uri": path.as_uri()}})
    assert server.diagnostics(path) == []


def test_a_document_closed_while_it_is_checked_stays_cleared(start, project):
    """The check running when the document closes publishes nothing after the clearing."""
    server = start({"debounce": 0})
    path, other = write(project / "train.py", FIXED), write(project / "other.py", FIXED)
    server.open(path, FIXED)
    assert server.diagnostics(path, version=1) == []
    server.change(path, 2, [{"text": BUGGY}])
    server.notify("textDocument/didClose", {"textDocument": {"uri": path.as_uri()}})
    server.open(other, FIXED)  # checked after train.py's check: the one worker takes them in turn
    assert server.diagnostics(other, version=1) == []
    published = [m["params"] for m in server.received
                 if m["method"] == "textDocument/publishDiagnostics" and m["params"]["uri"] == path.as_uri()]
    assert published[-1]["diagnostics"] == []
    assert server.close() == 0


def test_edits_inside_a_loop_give_the_diagnostics_of_each_text(start, project):
    """Typing inside the training loop, one edit at a time (each re-parsed from the previous
    parse): the diagnostics are those of the whole text, each time."""
    server = start({"debounce": 0})
    path = write(project / "train.py", FIXED)
    server.open(path, FIXED)
    assert server.diagnostics(path, version=1) == []
    text, version = FIXED, 1
    line = position_of(FIXED, "optimizer.step()")["line"]
    for typed in ("# optimizer.zero_grad()", "optimizer.zero_grad()"):  # a comment, then the bug
        version += 1
        edit = {"range": {"start": {"line": line, "character": 12}, "end": {"line": line, "character": 12}}, "text": typed + "\n            "}
        server.change(path, version, [edit])
        text = apply_edits(text, [{**edit, "newText": edit["text"]}])
        assert found(server.diagnostics(path, version=version)) == found_in(text)
    assert ("LC102", line) in found_in(text)  # the reset now sits between backward and step
    assert server.close() == 0


def found_in(text: str) -> list[tuple[str, int]]:
    """What `loopcheck lint` finds in a text, as (code, 0-based line)."""
    from loopcheck.lint.api import lint_source

    return sorted((f.code, f.line - 1) for f in lint_source(text, "train.py"))


def test_a_burst_of_changes_ends_with_the_diagnostics_of_the_last_text(start, project):
    server = start({"debounce": 200})
    path = write(project / "train.py", FIXED)
    server.open(path, FIXED)
    assert server.diagnostics(path, version=1) == []
    for version in range(2, 7):
        server.change(path, version, [{"text": BUGGY if version % 2 == 0 else FIXED}])
    server.change(path, 7, [{"text": BUGGY}])
    assert found(server.diagnostics(path, version=7)) == expected(BUGGY)
    assert server.close() == 0


def test_an_unsaved_buffer_is_checked_without_local_imports(server, path):
    uri = "untitled:Untitled-1"
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": BUGGY}})
    params = server.wait_for("textDocument/publishDiagnostics", lambda p: p["uri"] == uri)
    assert found(params["diagnostics"]) == expected(BUGGY)


def test_other_languages_are_left_alone(server, path):
    notes = path.with_suffix(".md")
    server.notify("textDocument/didOpen", {"textDocument": {"uri": notes.as_uri(), "languageId": "markdown", "version": 1, "text": "optimizer.zero_grad()\n"}})
    opened(server, path, BUGGY)  # the Python file is answered; nothing came for the other
    assert not any(m.get("params", {}).get("uri") == notes.as_uri() for m in server.received)


def test_a_path_with_spaces_and_non_ascii_letters(server, path):
    folder = path.parent / "runs 2024" / "vision – données"
    target = folder / "train.py"
    assert "%20" in target.as_uri()
    diagnostics = opened(server, target, BUGGY)
    assert found(diagnostics) == expected(BUGGY)
    actions = _actions(server, target, _range_of(diagnostics, "LC102"), only=["quickfix"])
    assert any(a["title"].startswith("Fix LC102") for a in actions)
    server.notify("textDocument/didSave", {"textDocument": {"uri": target.as_uri()}})
    assert found(server.diagnostics(target, version=1)) == expected(BUGGY)
