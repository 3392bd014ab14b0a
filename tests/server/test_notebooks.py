"""Notebooks: the code cells are checked as one module; each cell gets its own diagnostics."""

from __future__ import annotations

import textwrap

from loopcheck.server.notebooks import module_source

from .conftest import apply_edits, document_edits, position_of

SETUP = textwrap.dedent(
    """\
    %matplotlib inline
    import torch
    from torch import nn

    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss()"""
)
LOOP = textwrap.dedent(
    """\
    !nvidia-smi
    for epoch in range(5):
        for images, labels in train_loader:
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
    """
)
TIMING = "%%time\nfor x in range(3):\n    print(x\n"


def _open(server, notebook, cells):
    server.notify("notebookDocument/didOpen", {
        "notebookDocument": {
            "uri": notebook, "notebookType": "jupyter-notebook", "version": 1,
            "cells": [{"kind": kind, "document": uri} for uri, kind, _ in cells],
        },
        "cellTextDocuments": [
            {"uri": uri, "languageId": "python" if kind == 2 else "markdown", "version": 1, "text": text}
            for uri, kind, text in cells
        ],
    })


def _published(server, uri, version=None):
    return server.wait_for(
        "textDocument/publishDiagnostics", lambda p: p["uri"] == uri and (version is None or p.get("version") == version)
    )["diagnostics"]


def test_a_loop_spread_over_cells_is_reported_in_its_cell_and_fixed_there(server, path):
    notebook = path.with_suffix(".ipynb").as_uri()
    uris = [f"vscode-notebook-cell:{path.with_suffix('.ipynb')}#cell{i}" for i in range(4)]
    cells = [(uris[0], 1, "# Training\n"), (uris[1], 2, SETUP), (uris[2], 2, LOOP), (uris[3], 2, TIMING)]
    _open(server, notebook, cells)
    loop = _published(server, uris[2], 1)
    assert [(d["code"], d["range"]["start"]) for d in loop] == [("LC102", position_of(LOOP, "optimizer.zero_grad()"))]
    assert _published(server, uris[1], 1) == []
    assert _published(server, uris[3], 1) == []  # a %%cell magic is not Python, and not an error

    actions = server.request("textDocument/codeAction", {
        "textDocument": {"uri": uris[2]}, "range": loop[0]["range"], "context": {"diagnostics": loop},
    })
    fix = next(a for a in actions if a["title"].startswith("Fix LC102"))
    fixed = apply_edits(LOOP, document_edits(fix, uris[2], 1))
    assert fixed.index("optimizer.zero_grad()") > fixed.index("optimizer.step()")
    hover = server.request("textDocument/hover", {"textDocument": {"uri": uris[2]}, "position": loop[0]["range"]["start"]})
    assert hover["contents"]["value"].startswith("**LC102**")

    server.notify("notebookDocument/didChange", {
        "notebookDocument": {"uri": notebook, "version": 2},
        "change": {"cells": {"textContent": [{"document": {"uri": uris[2], "version": 2}, "changes": [{"text": fixed}]}]}},
    })
    assert _published(server, uris[2], 2) == []

    server.notify("notebookDocument/didClose", {"notebookDocument": {"uri": notebook}, "cellTextDocuments": [{"uri": u} for u in uris]})
    assert _published(server, uris[2]) == []


def test_cells_are_joined_line_for_line_and_magics_become_pass():
    source, cells = module_source([("a", 1, "%time x = 1\n  !ls"), ("b", 1, "%%bash\necho hi\n"), ("c", 1, "")])
    assert source == "pass\n  pass\n" + "\n\n" + "\n"
    assert [(c.uri, c.start, c.lines) for c in cells] == [("a", 1, 2), ("b", 3, 2), ("c", 5, 1)]


def test_findings_and_fixes_are_moved_into_their_cells_or_lose_a_fix_that_leaves_the_cell():
    from loopcheck.findings import Finding, Severity
    from loopcheck.lint.output import FileError
    from loopcheck.server.notebooks import split

    _, cells = module_source([("a", 1, "x = 1\ny = 2\n"), ("b", 1, "for b in loader:\n    step(b)\n")])

    def edit(line, end_line, end_column=1):
        return {"line": line, "column": 1, "end_line": end_line, "end_column": end_column, "content": ""}

    inside = Finding("LC102", "n", Severity.ERROR, "m", line=4, column=5, end_line=4, end_column=9,
                     fix={"applicability": "safe", "message": "f", "edits": [edit(4, 5)]})
    leaving = Finding("LC405", "n", Severity.INFO, "m", line=2, column=1,
                      fix={"applicability": "safe", "message": "f", "edits": [edit(2, 4)]})
    parts = split(cells, [inside, leaving], [FileError("p", 3, "syntax error")])
    [moved] = parts["b"][0]
    assert (moved.line, moved.column, moved.end_line, moved.end_column) == (2, 5, 2, 9)
    assert moved.fix["edits"] == [edit(2, 3)]  # up to the end of the cell
    [kept] = parts["a"][0]
    assert kept.line == 2 and kept.fix is None
    assert parts["b"][1] == [FileError("p", 1, "syntax error")]
