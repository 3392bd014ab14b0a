"""Fixes you can trust: applied to a fixpoint, refused with a reason, never inside a model's
methods, encodings kept, and "fixable" promising only what `--fix` applies."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from loopcheck.findings import Finding, Severity
from loopcheck.lint import fixing as fixes_mod
from loopcheck.lint.fixing import fix_source
from loopcheck.lint.fixes.files import SourceText, keep_applied
from loopcheck.lint.project import parse_path

OLD = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"


def amp_finding(path: str, content: str) -> Finding:
    fix = {"applicability": "safe", "message": "m", "edits": [
        {"line": 2, "column": 10, "end_line": 2, "end_column": 37, "content": content}]}
    return Finding("LC405", "deprecated-amp-api", Severity.INFO, f"fix to {content}", path=path, line=2,
                   column=10, end_line=2, end_column=37, fix=fix)


def test_an_overlapping_fix_is_tried_when_the_first_one_is_refused():
    first, second = "torch.amp.GradScaler(bad)", "torch.amp.GradScaler('cuda')"

    def linter(text, path):
        if text == OLD:
            return [amp_finding(path, first), amp_finding(path, second)]
        if first in text:  # this attempt would add a finding: refused
            return [Finding("LC102", "x", Severity.ERROR, "new", path=path, line=1, column=1)]
        return []

    result = fix_source(OLD, "t.py", linter=linter)
    assert result.source == OLD.replace("torch.cuda.amp.GradScaler()", second)
    assert [f.message for f in result.fixed] == [f"fix to {second}"]
    assert result.rejected == []  # the refused attempt's finding is gone: nothing left to explain


def test_a_refused_fix_says_why_and_its_attempt_leaves_no_finding():
    def linter(text, path):
        if text == OLD:
            return [amp_finding(path, "torch.amp.GradScaler('cuda')")]
        return [amp_finding(path, "x"), Finding("LC102", "x", Severity.ERROR, "from the attempt", path=path, line=1, column=1)]

    result = fix_source(OLD, "t.py", linter=linter)
    assert result.source == OLD and result.fixed == []
    assert [f.code for f in result.remaining] == ["LC405"]  # the findings of the source as written
    [(finding, why)] = result.rejected
    assert finding.code == "LC405" and why == "the fix would add a finding (LC102)"


def test_an_attempted_version_is_not_remembered_for_other_files(tmp_path: Path):
    engine = tmp_path / "engine.py"
    engine.write_text(OLD, encoding="utf-8")
    fixes_mod.default_linter(OLD.replace("cuda.amp", "amp"), str(engine))
    assert parse_path(engine).source == OLD


MODEL = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)

        def accuracy(self, loader):
            self.eval()
            correct = 0
            for x, y in loader:
                correct += (self(x).argmax(1) == y).sum().item()
            return correct


    class Wide(Net):
        def score(self, loader):
            self.eval()
            return [self(x) for x, _ in loader]


    def validate(model, loader):
        model.eval()
        correct = 0
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
        return correct
    """
)


def test_no_fix_touches_a_method_of_an_nn_module():
    result = fix_source(MODEL, "model.py", unsafe=True)
    fixed_lines = result.source.splitlines()
    assert fixed_lines[: MODEL.count("\n", 0, MODEL.index("def validate"))] == MODEL.splitlines()[
        : MODEL.count("\n", 0, MODEL.index("def validate"))]
    assert "with torch.no_grad():" in result.source.split("def validate", 1)[1]
    spans = fixes_mod.module_methods(MODEL).spans
    assert [name for *_, name in spans] == ["Net.__init__", "Net.forward", "Net.accuracy", "Wide.score"]


def test_a_latin1_file_round_trips():
    data = "# -*- coding: latin-1 -*-\n# réglages\nimport torch\n".encode("latin-1")
    source = SourceText.decode(data)
    assert source.encoding == "iso-8859-1" and "réglages" in source.text
    assert source.encode(source.text) == data
    with pytest.raises(ValueError, match="cannot encode"):
        source.encode(source.text + "# →\n")
    bom = SourceText.decode(b"\xef\xbb\xbfimport torch\r\n")
    assert bom.encode(bom.text) == b"\xef\xbb\xbfimport torch\r\n"


def test_fixable_means_applied(monkeypatch):
    good = amp_finding("t.py", "torch.amp.GradScaler('cuda')")
    refused = amp_finding("t.py", "torch.amp.GradScaler(oops)")

    def linter(text, path):
        if text == OLD:
            return [refused]
        return [Finding("LC102", "x", Severity.ERROR, "new", path=path, line=1, column=1)]

    monkeypatch.setattr(fixes_mod, "default_linter", linter)
    monkeypatch.setattr(fixes_mod, "neutral", lambda code: False)  # this made-up fix adds a finding
    assert keep_applied([refused], OLD, "t.py", lambda code: True)[0].fix is None

    monkeypatch.setattr(fixes_mod, "default_linter", lambda text, path: [good] if text == OLD else [])
    assert keep_applied([good], OLD, "t.py", lambda code: True)[0].fix == good.fix


FIXABLE = """\
import torch
from torch import nn

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
state = torch.load("ckpt.pt")
"""


def test_the_workers_fix_runs_are_what_the_command_would_run(tmp_path: Path):
    """`check_files(promise_fixes=True)` works out in the analysing process what `--fix` fixes;
    it is the same as the fix runs done afterwards from the file's text, in one process or many."""
    from loopcheck.lint.engine import check_files
    from loopcheck.lint.fixes.files import fixes_applied
    from loopcheck.lint.output.report import fix_kind

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    files = []
    for i in range(8):
        f = tmp_path / f"train_{i}.py"
        f.write_text(FIXABLE, encoding="utf-8")
        files.append(f)
    for jobs in (1, 2):
        results = check_files(files, jobs=jobs, promise_fixes=True)
        for f, result in zip(files, results):
            kinds = {fix_kind(x) for x in result.findings} - {None}
            assert kinds, "the script has fixable findings"
            assert result.fixes_applied is not None
            assert result.fixes_applied == fixes_applied(kinds, FIXABLE, str(f), lambda code: True)
            assert any(result.fixes_applied.values())
    assert all(r.fixes_applied is None for r in check_files(files, jobs=1))


def test_working_out_the_fixes_reuses_the_files_loop_model(tmp_path: Path, monkeypatch):
    """The fix runs lint the unchanged file first: in the run that has just analysed it, with
    other rules enabled, its loop model is the one already built (a model is most of a lint)."""
    from loopcheck.lint import loopmodel
    from loopcheck.lint.engine import check_files

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    script = tmp_path / "train.py"
    script.write_text(FIXABLE, encoding="utf-8")
    built: list[str] = []
    original = loopmodel.build_model

    def counted(path, module, project=None):
        built.append(path)
        return original(path, module, project)

    monkeypatch.setattr(loopmodel, "build_model", counted)
    [result] = check_files([script], jobs=1, enabled=lambda code: code != "LC101", promise_fixes=True)
    assert result.fixes_applied and any(result.fixes_applied.values())
    assert built.count(str(script)) == 1, built
    built.clear()
    check_files([script], jobs=1, promise_fixes=True)  # a new run builds it afresh
    assert built.count(str(script)) == 1, built
