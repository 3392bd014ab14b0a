"""Nothing a file contains makes the linter crash: bad files become errors, the rest is checked."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from loopcheck.lint import engine
from loopcheck.lint.engine import check_file, check_paths, check_source
from loopcheck.lint.rules import zero_grad

BUGGY = textwrap.dedent("""
    import torch
    def train(model, loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()
            optimizer.zero_grad()
            optimizer.step()
""")


def test_syntax_error_is_an_error_with_its_line_and_other_files_still_run(tmp_path: Path) -> None:
    (tmp_path / "a_broken.py").write_text("import torch\n\ndef train(:\n    pass\n")
    (tmp_path / "b_train.py").write_text(BUGGY)
    report = check_paths([tmp_path], jobs=1)
    assert [(Path(e.path).name, e.line) for e in report.errors] == [("a_broken.py", 3)]
    assert report.errors[0].message.startswith("syntax error")
    assert [(Path(f.path).name, f.code) for f in report.findings] == [("b_train.py", "LC102")]


def test_python2_file_is_one_clear_error_naming_the_construct(tmp_path: Path) -> None:
    (tmp_path / "old_train.py").write_text(
        "import torch\n\ndef train(model, loader):\n    for x in loader:\n        print 'loss', model(x).sum()\n"
    )
    (tmp_path / "new_train.py").write_text(BUGGY)
    report = check_paths([tmp_path], jobs=1)
    assert [(Path(e.path).name, e.line, e.message) for e in report.errors] == [
        ("old_train.py", 5, "Python 2 syntax: `print` statement at line 5; loopcheck reads Python 3")
    ]
    assert [(Path(f.path).name, f.code) for f in report.findings] == [("new_train.py", "LC102")]


def test_undecodable_bytes_are_an_error_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes(b"import torch\n# caf\xe9\nx = 1\n")
    result = check_file(path)
    assert result.findings == []
    assert [(e.line, e.message.split(":")[0]) for e in result.errors] == [(2, "cannot decode as utf-8")]


def test_a_coding_cookie_is_honoured(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + BUGGY.encode())
    result = check_file(path)
    assert result.errors == [] and [f.code for f in result.findings] == ["LC102"]


def test_an_unknown_coding_cookie_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "odd.py"
    path.write_bytes(b"# coding: klingon\nimport torch\n")
    result = check_file(path)
    assert len(result.errors) == 1 and result.errors[0].line == 1


def test_nul_bytes_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.py"
    path.write_bytes(b"import torch\nx = 1\n\x00\x01\x02")
    result = check_file(path)
    assert [(e.line, "NUL" in e.message) for e in result.errors] == [(3, True)]
    assert check_source("import torch\n\0", "s.py").errors[0].line == 2


@pytest.mark.parametrize("text", ["", "\n\n", "   \n# only a comment about torch\n"])
def test_empty_files_give_nothing(text: str) -> None:
    result = check_source(text, "empty.py")
    assert result.findings == [] and result.errors == []


def test_deeply_nested_parentheses_do_not_crash() -> None:
    source = "import torch\nx = " + "(" * 200 + "1" + ")" * 200 + "\n" + BUGGY
    result = check_source(source, "deep.py")
    assert result.errors or [f.code for f in result.findings] == ["LC102"]


def test_deeply_nested_blocks_do_not_crash() -> None:
    lines = ["import torch", "def f(model, loader, optimizer):"]
    indent = "    "
    for depth in range(200):
        lines.append(indent * (depth + 1) + f"if x{depth}:")
    lines.append(indent * 201 + "model(x).backward()")
    result = check_source("\n".join(lines) + "\n", "deep_if.py")
    for error in result.errors:
        assert error.path == "deep_if.py" and error.message


def test_a_very_large_file_is_checked_quickly() -> None:
    clean = BUGGY.replace("def train(", "def train_{i}(").replace(
        "        model(x).sum().backward()\n        optimizer.zero_grad()\n",
        "        optimizer.zero_grad()\n        model(x).sum().backward()\n")
    missing_reset = BUGGY.replace("        optimizer.zero_grad()\n", "")
    source = "".join(clean.replace("{i}", str(i)) for i in range(2600)) + missing_reset  # ~20k lines
    assert source.count("\n") > 20_000
    # one rule: this checks the engine and the loop model on a large file, not every rule's speed
    result = check_source(source, "big.py", enabled=lambda code: code == "LC101")
    assert result.errors == []
    assert [(f.code, f.line) for f in result.findings] == [("LC101", source.count("\n"))]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can read a chmod 000 file")
def test_an_unreadable_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "secret.py"
    path.write_text(BUGGY)
    path.chmod(0)
    try:
        result = check_file(path)
    finally:
        path.chmod(0o644)
    assert result.findings == [] and "cannot read" in result.errors[0].message


def test_a_folder_without_python_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("nothing here")
    report = check_paths([tmp_path], jobs=1)
    assert report.findings == [] and [e.message for e in report.errors] == ["no Python files found"]


def test_a_failing_rule_is_reported_with_its_code_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(self, ctx):
        raise KeyError("boom")
        yield  # pragma: no cover

    monkeypatch.setattr(zero_grad.ZeroGradMissing, "check", explode)
    result = check_source(BUGGY, "t.py")
    assert [(e.code, e.path) for e in result.errors] == [("LC101", "t.py")]
    assert "KeyError" in result.errors[0].message and "\n" not in result.errors[0].message
    assert [f.code for f in result.findings] == ["LC102"]


def test_a_failing_model_build_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(path, module, project=None):
        raise RuntimeError("model exploded")

    monkeypatch.setattr("loopcheck.lint.loopmodel.build_model", explode)
    result = check_source(BUGGY, "t.py")
    assert result.findings == [] and len(result.errors) == 1 and "model exploded" in result.errors[0].message


def test_recursion_limit_is_restored() -> None:
    before = __import__("sys").getrecursionlimit()
    check_source(BUGGY, "t.py")
    assert __import__("sys").getrecursionlimit() == before
    assert engine  # the module under test


def test_helpers_calling_helpers_many_times_stay_bounded() -> None:
    lines = ["import torch"]
    for level in range(8):
        lines.append(f"def h{level}(model, x):")
        lines += [f"    h{level + 1}(model, x)"] * 12
    lines += ["def h8(model, x):", "    model(x).sum().backward()",
              "def train(model, loader, opt):", "    for x in loader:", "        opt.zero_grad()",
              "        h0(model, x)", "        opt.step()"]
    result = check_source("\n".join(lines) + "\n", "fanout.py", enabled=lambda code: code.startswith("LC1"))
    assert result.errors == [] and result.findings == []


def test_a_source_transforming_codec_is_read_as_utf8(tmp_path: Path) -> None:
    from loopcheck.lint.engine import check_file

    path = tmp_path / "train.py"
    path.write_text(
        "# -*- coding: future_fstrings -*-\n"
        "import torch\n\n"
        "def train(model, loader, optimizer):\n"
        "    for x, y in loader:\n"
        "        loss = model(x, y)\n"
        "        loss.backward()\n"
        "        optimizer.zero_grad()\n"
        "        optimizer.step()\n",
        encoding="utf-8",
    )
    result = check_file(path)
    assert result.errors == []
    assert [(f.line, f.code) for f in result.findings] == [(8, "LC102")]


def test_missing_rule_pages_stop_the_command_instead_of_checking_nothing(tmp_path: Path, monkeypatch) -> None:
    # an install whose rule pages went missing would otherwise run no rule and report a clean tree
    from typer.testing import CliRunner

    from loopcheck import catalog as pages
    from loopcheck.cli import app

    script = tmp_path / "train.py"
    script.write_text(BUGGY, encoding="utf-8")
    monkeypatch.setattr(pages, "pages_dir", lambda: tmp_path / "nowhere")
    pages.catalog.cache_clear()
    try:
        result = CliRunner().invoke(app, ["lint", "--isolated", "--no-cache", str(script)])
    finally:
        monkeypatch.undo()
        pages.catalog.cache_clear()
    assert result.exit_code == 2
    assert "rule pages are missing" in result.stderr and "reinstall loopcheck" in result.stderr
