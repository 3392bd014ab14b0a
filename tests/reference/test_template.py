"""`loopcheck init`: the template is the reference loop, standalone, and it runs as written."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loopcheck.cli import app
from loopcheck.reference.template import SOURCE

STANDALONE_MODULES = {"torch", "numpy", "rich"} | set(sys.stdlib_module_names)


def imported_top_level_modules(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_init_writes_the_reference_loop(tmp_path):
    target = tmp_path / "train.py"
    result = CliRunner().invoke(app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    assert target.read_text(encoding="utf-8") == SOURCE.read_text(encoding="utf-8")
    text = target.read_text(encoding="utf-8")
    assert "REPLACE: your dataset" in text and "REPLACE: your model" in text


def test_template_is_standalone():
    modules = imported_top_level_modules(SOURCE)
    assert "loopcheck" not in modules
    assert modules <= STANDALONE_MODULES, modules - STANDALONE_MODULES


def test_init_into_a_directory(tmp_path):
    result = CliRunner().invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "train.py").is_file()


def test_init_refuses_to_overwrite_without_force(tmp_path):
    target = tmp_path / "train.py"
    target.write_text("my own loop\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["init", str(target)])
    assert result.exit_code == 1
    assert "already exists" in result.output and "--force" in result.output
    assert target.read_text(encoding="utf-8") == "my own loop\n"

    result = CliRunner().invoke(app, ["init", str(target), "--force"])
    assert result.exit_code == 0, result.output
    assert target.read_text(encoding="utf-8") == SOURCE.read_text(encoding="utf-8")


def test_init_into_an_unwritable_place_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    result = CliRunner().invoke(app, ["init", str(blocker / "sub" / "train.py")])
    assert result.exit_code == 2
    assert "cannot write" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_written_template_trains_one_epoch_without_loopcheck(tmp_path):
    target = tmp_path / "train.py"
    assert CliRunner().invoke(app, ["init", str(target)]).exit_code == 0
    # Run it with loopcheck made unimportable: the file must stand on its own.
    runner = (
        "import runpy, sys; sys.modules['loopcheck'] = None; "
        "sys.argv = ['train.py', '--epochs', '1', '--ckpt-dir', 'ckpt', '--log-every', '20']; "
        "runpy.run_path('train.py', run_name='__main__')"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", runner], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "epoch 1/1" in proc.stdout
    assert (tmp_path / "ckpt" / "last.pt").is_file() and (tmp_path / "ckpt" / "best.pt").is_file()
