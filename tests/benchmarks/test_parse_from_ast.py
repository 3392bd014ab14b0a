"""The script comparing trees built from `ast` with libcst's parse prints its lines (its times are
never judged here); the comparison itself is tested in tests/lint/test_tree_from_ast.py."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("parse_from_ast", REPO / "benchmarks" / "parse_from_ast.py")
parse_from_ast = importlib.util.module_from_spec(_SPEC)
sys.modules["parse_from_ast"] = parse_from_ast
_SPEC.loader.exec_module(parse_from_ast)


def test_the_script_prints_fidelity_times_and_the_lint_comparison(tmp_path, capsys):
    (tmp_path / "train.py").write_text(
        "import torch\n\ndef train(model, opt, loader):\n    for x, y in loader:\n        loss = model(x)\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n", encoding="utf-8")
    (tmp_path / "broken.py").write_text("def broken(:\n", encoding="utf-8")
    assert parse_from_ast.main(["--tree", str(tmp_path), "--repeat", "1", "--lint", str(tmp_path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 files; 1 built equal to libcst's parse, 0 different, 0 parsed by libcst instead" in out
    assert "x faster" in out
    assert "check_paths, 1 worker(s)" in out


def test_a_tree_that_is_not_a_directory_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as raised:
        parse_from_ast.main(["--tree", str(tmp_path / "missing")])
    assert raised.value.code == 2


@pytest.mark.parametrize("name", ["amp_clip_before_unscale.py", "lc1_zero_grad_after_backward.py"])
def test_findings_and_their_fixes_are_counted_the_same_both_ways(tmp_path, name):
    shutil.copy(REPO / "fixtures" / name, tmp_path / name)
    _, _, same = parse_from_ast.lint_times(tmp_path, jobs=1, repeat=1)
    assert same["findings"] > 0
    assert same["located"] == same["fixed"] == same["findings"]
