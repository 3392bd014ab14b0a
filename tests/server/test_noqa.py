"""Where the `# noqa` action writes its comment."""

from __future__ import annotations

import textwrap

from loopcheck.lint.fixes.edits import Edit, apply_edits
from loopcheck.lint.suppress import apply_suppressions
from loopcheck.findings import Finding, Severity
from loopcheck.server.actions import noqa_edit


def _silence(source: str, line: int, code: str) -> str:
    edit = noqa_edit(source, line, code)
    assert edit is not None
    new = apply_edits(source, [Edit(**edit)])
    # the engine's own suppression reading agrees that the finding is now silenced
    finding = Finding(code, "name", Severity.ERROR, "message", path="t.py", line=line, column=1)
    kept, _ = apply_suppressions([finding], new.splitlines())
    assert kept == []
    compile(new, "t.py", "exec")
    return new


def test_a_new_comment_goes_at_the_end_of_the_line():
    source = "for x in loader:\n    opt.zero_grad()   \n    opt.step()\n"
    assert _silence(source, 2, "LC102") == "for x in loader:\n    opt.zero_grad()  # noqa: LC102\n    opt.step()\n"


def test_a_statement_over_several_lines_gets_it_on_its_last_line():
    source = textwrap.dedent(
        """\
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer,
            max_lr=0.1,
        )
        x = 1
        """
    )
    new = _silence(source, 1, "LC202")
    assert new.splitlines()[3] == ")  # noqa: LC202"


def test_a_backslash_continuation_is_not_broken():
    source = "loss = criterion(out, y) + \\\n    0.1 * reg\nloss.backward()\n"
    new = _silence(source, 1, "LC601")
    assert new.splitlines()[1] == "    0.1 * reg  # noqa: LC601"


def test_an_existing_noqa_gets_the_code_added():
    source = "opt.zero_grad()  # noqa: LC101  (reset by the hook)\n"
    assert _silence(source, 1, "LC102") == "opt.zero_grad()  # noqa: LC101, LC102  (reset by the hook)\n"


def test_an_existing_loopcheck_ignore_gets_the_code_inside_its_brackets():
    source = "opt.zero_grad()  # loopcheck: ignore[LC101]\n"
    assert _silence(source, 1, "LC102") == "opt.zero_grad()  # loopcheck: ignore[LC101, LC102]\n"


def test_a_plain_comment_is_kept():
    source = "opt.zero_grad()  # see the paper\n"
    assert _silence(source, 1, "LC102") == "opt.zero_grad()  # see the paper  # noqa: LC102\n"


def test_a_bare_noqa_already_silences_everything():
    assert noqa_edit("opt.zero_grad()  # noqa\n", 1, "LC102") is None
