"""Both checkers pass the reference loop clean: the linter on its source (and on what `init`
writes), the probe on a run of it. The examples the demo lints carry `# expect:` marks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lint._support import expected

from .conftest import assert_runs_identical, run, tiny_config

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "loopcheck" / "reference"
EXAMPLES = ROOT / "examples"


def lint_paths(paths):
    api = pytest.importorskip("loopcheck.lint.api")
    report = api.lint_paths(paths)
    assert not report.errors, report.errors
    return report.findings


def describe(findings):
    return [f"{Path(f.path).name}:{f.line} {f.code} {f.severity} {f.message}" for f in findings]


def test_linter_reports_nothing_on_the_reference():
    assert describe(lint_paths([REFERENCE])) == []


def test_linter_reports_nothing_on_the_init_template(tmp_path):
    from rich.console import Console

    from loopcheck.reference.template import write_template

    target = tmp_path / "train.py"
    assert write_template(target, force=False, console=Console(quiet=True)) == 0
    assert describe(lint_paths([target])) == []


@pytest.mark.parametrize("name", ["buggy_train.py", "fixed_train.py"])
def test_examples_give_exactly_their_marked_findings(name):
    path = EXAMPLES / name
    findings = lint_paths([path])
    found = {(f.line, f.code) for f in findings if f.severity.value in ("error", "warning")}
    assert found == expected(path.read_text(encoding="utf-8"))
    if name == "buggy_train.py":
        families = {code[:3] for _, code in found}
        assert {"LC2", "LC3", "LC4", "LC5", "LC6"} <= families


def probe_factory():
    import loopcheck

    probe = getattr(loopcheck, "probe", None)
    if not callable(probe):
        pytest.skip("loopcheck.probe is not available yet")
    return probe


@pytest.mark.parametrize("settings", [dict(), dict(accum=2, amp=True, scheduler="plateau", patience=3)])
def test_probe_reports_nothing_on_a_reference_run(tmp_path, baseline, settings):
    probe = probe_factory()
    probes = []

    def wrap(model, optimizer, scheduler, scaler):
        p = probe(model, optimizer, scheduler=scheduler, scaler=scaler, on_finding="ignore")
        probes.append(p)
        return p

    assert run(tiny_config(tmp_path, **settings), wrap=wrap)["status"] == "finished"
    assert [str(f) for f in probes[0].findings] == []
    # The probe watches without changing anything: same bits as the unprobed run.
    assert_runs_identical(baseline(**settings), tmp_path)
