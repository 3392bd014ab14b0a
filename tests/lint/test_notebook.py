"""Notebooks: code cells joined in order, IPython syntax set aside, findings placed in cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcheck.lint import notebook
from loopcheck.lint.api import CodeFilter
from loopcheck.lint.engine import check_source
from loopcheck.lint.project import ProjectIndex


def make_notebook(*cells: tuple[str, str]) -> bytes:
    """nbformat 4 JSON with these (cell_type, source) cells, sources stored as lists of lines."""
    doc = {
        "cells": [
            {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True),
             **({"execution_count": None, "outputs": []} if kind == "code" else {})}
            for kind, text in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(doc, indent=1).encode()


SETUP = """\
%matplotlib inline
!pip install -q torchvision
import torch
from torch import nn
"""
MODEL = """\
model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
"""
LOOP = """\
%%time
for epoch in range(5):
    for images, labels in train_loader:
        loss = criterion(model(images.flatten(1)), labels)
        loss.backward()
        optimizer.step()  # expect: LC101
    print(epoch, loss.item())
"""
TRAINING = make_notebook(("markdown", "# MNIST, quickly\n"), ("code", SETUP), ("code", MODEL), ("code", LOOP))


def test_code_cells_are_joined_and_ipython_lines_become_pass() -> None:
    book = notebook.parse(TRAINING, "mnist.ipynb")
    lines = book.source.splitlines()
    assert lines[:4] == ["pass", "pass", "import torch", "from torch import nn"]
    assert "%%time" not in book.source and lines[7] == ""  # the cell magic's line is blanked
    assert book.position(9) == (4, 2)  # `for epoch ...` is line 2 of the fourth cell (the markdown is cell 1)
    assert book.cells[4] == LOOP.splitlines()


@pytest.mark.parametrize(
    "line",
    ["%time x = f()", "!ls data", "files = !ls", "out = %sx ls", "model?", "torch.optim.SGD??", "    %debug"],
)
def test_ipython_syntax_is_set_aside(line: str) -> None:
    assert notebook._python_lines([line])[0].strip() == "pass"


def test_a_shell_cell_is_blanked_whole() -> None:
    assert notebook._python_lines(["%%bash", "for f in *.py; do echo $f; done"]) == ["", ""]


def test_findings_are_placed_in_their_cell() -> None:
    result = notebook.check("mnist.ipynb", TRAINING, enabled=CodeFilter(), project=ProjectIndex())
    assert [(f.code, f.extra["cell"], f.line) for f in result.findings] == [("LC101", 4, 6)]
    assert all(f.fix is None for f in result.findings)


def test_a_syntax_error_names_its_cell() -> None:
    broken = make_notebook(("code", "import torch\n"), ("code", "def train(model:\n    pass\n"))
    result = notebook.check("broken.ipynb", broken, enabled=CodeFilter(), project=None)
    (error,) = result.errors
    assert (error.cell, error.line) == (2, 1)


def test_not_a_notebook_is_an_error_not_a_crash() -> None:
    result = notebook.check("x.ipynb", b"not json", enabled=CodeFilter(), project=None)
    assert result.errors and "not a notebook" in result.errors[0].message
    result = notebook.check("x.ipynb", b"[1, 2]", enabled=CodeFilter(), project=None)
    assert "no `cells` list" in result.errors[0].message


def test_a_jupytext_percent_script_is_linted_as_any_script(tmp_path: Path) -> None:
    script = "# %% [markdown]\n# Training\n\n# %%\n" + SETUP.split("import", 1)[1].join(["import", ""]) + "\n# %%\n" + MODEL
    script += "\n# %%\n" + LOOP.replace("%%time\n", "")
    result = check_source(script, str(tmp_path / "train.py"), enabled=CodeFilter())
    assert [f.code for f in result.findings] == ["LC101"]


def test_a_notebook_among_many_files_is_checked_in_the_pool_and_placed_in_its_cell(tmp_path: Path) -> None:
    from loopcheck.lint.engine import check_files

    helpers = [tmp_path / f"helper_{i}.py" for i in range(12)]  # enough files for worker processes
    for i, path in enumerate(helpers):
        path.write_text(f"import torch\n\n\ndef scale_{i}(x):\n    return torch.relu(x) * {i}\n")
    book = tmp_path / "mnist.ipynb"
    book.write_bytes(TRAINING)
    files = [*helpers[:6], book, *helpers[6:]]
    for jobs in (1, 2):
        results = check_files(files, jobs=jobs)
        assert [r.path for r in results] == [str(f) for f in files]
        placed = results[6].findings
        assert [(f.code, f.extra["cell"], f.line) for f in placed] == [("LC101", 4, 6)], jobs
        assert not any(r.findings for r in results[:6] + results[7:])
