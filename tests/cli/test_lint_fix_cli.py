"""`loopcheck lint --fix / --diff`: rewrites through the fix engine, reports what is left."""

from __future__ import annotations

import json

import pytest

from .conftest import OLD_AMP, UNSAFE_LOAD, write

pytest.importorskip("loopcheck.lint.fixes")
from loopcheck.lint.fixes import applicability  # noqa: E402

AMP = OLD_AMP + "\n\ndef autocast_context():\n    return torch.cuda.amp.autocast()\n"


def test_diff_shows_the_fix_and_writes_nothing(lint, project):
    path = write(project / "amp_setup.py", AMP)
    result = lint("amp_setup.py", "--diff")
    assert result.exit_code == 1
    assert result.stderr == "1 file would be changed by `loopcheck lint --fix`\n"
    assert result.stdout.startswith("--- a/amp_setup.py\n+++ b/amp_setup.py\n")
    assert "-scaler = torch.cuda.amp.GradScaler()\n" in result.stdout
    assert "+scaler = torch.amp.GradScaler(" in result.stdout
    assert path.read_text() == AMP
    assert not (project / ".loopcheck_cache").exists()


def test_diff_of_a_file_without_fixes_is_empty_and_exits_0(lint, project):
    write(project / "ckpt.py", UNSAFE_LOAD.replace('map_location="cpu"', 'map_location="cpu", weights_only=True'))
    result = lint("ckpt.py", "--diff")
    assert result.exit_code == 0 and result.stdout == ""


def test_unsafe_fixes_need_the_explicit_flag(lint, project):
    assert applicability("LC508") == "unsafe"
    path = write(project / "ckpt.py", UNSAFE_LOAD)
    assert lint("ckpt.py", "--diff").stdout == ""
    assert "1 fixable with `loopcheck lint --fix --unsafe-fixes`" in lint("ckpt.py").stdout
    shown = lint("ckpt.py", "--diff", "--unsafe-fixes")
    assert shown.exit_code == 1 and "weights_only=True" in shown.stdout
    assert "`loopcheck lint --fix --unsafe-fixes`" in shown.stderr
    assert lint("ckpt.py", "--fix", "--unsafe-fixes").exit_code == 0
    assert "weights_only=True" in path.read_text()


def test_fix_rewrites_in_place_and_reports_the_rest(lint, project):
    path = write(project / "amp_setup.py", AMP)
    write(project / "ckpt.py", UNSAFE_LOAD)
    result = lint(".", "--fix", "-f", "json")
    doc = json.loads(result.stdout)
    assert [f["code"] for f in doc["findings"]] == ["LC508"]  # LC405 fixed (safe), LC508 left (unsafe)
    assert doc["summary"]["fixed"] == 2
    assert result.exit_code == 1
    fixed = path.read_text()
    assert "torch.cuda.amp" not in fixed and "torch.amp.GradScaler(" in fixed
    again = lint("amp_setup.py", "--fix")
    assert again.exit_code == 0 and "No findings" in again.stdout


def test_fix_respects_the_selection(lint, project):
    path = write(project / "amp_setup.py", AMP)
    lint("amp_setup.py", "--fix", "--ignore", "LC405")
    assert path.read_text() == AMP


def test_fix_keeps_crlf_line_endings(lint, project):
    path = project / "amp_setup.py"
    path.write_bytes(AMP.replace("\n", "\r\n").encode())
    lint("amp_setup.py", "--fix")
    data = path.read_bytes()
    assert b"torch.amp.GradScaler(" in data and data.count(b"\r\n") == AMP.count("\n")


def test_fix_respects_per_file_ignores(lint, project):
    write(project / "pyproject.toml", '[tool.loopcheck.per-file-ignores]\n"legacy/*" = ["LC4"]\n')
    kept = write(project / "legacy" / "amp_setup.py", AMP)
    changed = write(project / "amp_setup.py", AMP)
    lint(".", "--fix")
    assert kept.read_text() == AMP
    assert "torch.cuda.amp" not in changed.read_text()


TANGLED = """\
import torch


def train(model, loader, optimizer, scheduler):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        scheduler.step()
        optimizer.zero_grad()
        optimizer.step()
"""


def test_overlapping_fixes_are_all_applied_in_one_run(lint, project):
    path = write(project / "train.py", TANGLED)
    before = lint("train.py")
    assert "[*] 2 fixable with `loopcheck lint --fix`." in before.stdout
    result = lint("--fix", "train.py")
    assert result.exit_code == 0, result.stdout
    assert "No findings (1 file checked)." in result.stdout and "fixable" not in result.stdout
    assert path.read_text().endswith("optimizer.step()\n        optimizer.zero_grad()\n        scheduler.step()\n")


def test_fix_keeps_a_latin1_file_latin1(lint, project):
    data = ("# -*- coding: latin-1 -*-\n# Réglages de l'entraînement\n" + OLD_AMP).encode("latin-1")
    path = project / "amp_setup.py"
    path.write_bytes(data)
    result = lint("--fix", "amp_setup.py")
    assert result.exit_code == 0
    assert "Fixed 1 finding." in result.stdout
    assert path.read_bytes() == data.replace(b"torch.cuda.amp.GradScaler()", b'torch.amp.GradScaler("cuda")')
