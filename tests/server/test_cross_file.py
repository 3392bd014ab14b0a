"""Findings that need the project: the open file's loop calls into a module next to it."""

from __future__ import annotations

import shutil
from pathlib import Path

from .conftest import expected, found


def test_evidence_from_an_imported_module_and_a_save_of_it(start, project, fixtures_dir: Path):
    shutil.copytree(fixtures_dir / "sched_project", project / "keypoints")
    train, engine = project / "keypoints" / "train.py", project / "keypoints" / "engine.py"
    source = train.read_text(encoding="utf-8")
    server = start()
    server.open(train, source)
    # the scheduler steps before `train_one_epoch`, which steps the optimizer in engine.py
    assert found(server.diagnostics(train, version=1)) == expected(source)
    assert expected(source) == [("LC201", 34)]

    # the step moves out of engine.py (into a hand-written loop elsewhere): once engine.py is
    # saved, the open train.py is checked again and has nothing left to report
    helper = engine.read_text(encoding="utf-8")
    edited = helper.replace("        optimizer.step()\n", "")
    assert edited != helper
    server.open(engine, helper)
    server.diagnostics(engine, version=1)
    engine.write_text(edited, encoding="utf-8")
    server.change(engine, 2, [{"text": edited}])
    server.notify("textDocument/didSave", {"textDocument": {"uri": engine.as_uri()}})
    assert server.diagnostics(train, version=1) == []
    assert server.close() == 0


def test_an_open_module_is_seen_as_edited_and_as_saved_once_closed_unsaved(start, project, fixtures_dir: Path):
    shutil.copytree(fixtures_dir / "sched_project", project / "keypoints")
    train, engine = project / "keypoints" / "train.py", project / "keypoints" / "engine.py"
    source, helper = train.read_text(encoding="utf-8"), engine.read_text(encoding="utf-8")
    server = start()
    server.open(train, source)
    assert found(server.diagnostics(train, version=1)) == [("LC201", 34)]
    # engine.py is edited in the editor and not saved: train.py, checked again, sees the edit
    server.open(engine, helper)
    server.diagnostics(engine, version=1)
    server.change(engine, 2, [{"text": helper.replace("        optimizer.step()\n", "")}])
    server.diagnostics(engine, version=2)
    server.change(train, 2, [{"text": source}])
    assert server.diagnostics(train, version=2) == []
    # closed without saving: the file on disk counts again, and the open train.py is told so
    server.notify("textDocument/didClose", {"textDocument": {"uri": engine.as_uri()}})
    assert found(server.diagnostics(train, version=2)) == [("LC201", 34)]
    assert server.close() == 0
