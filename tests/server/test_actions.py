"""Code action plumbing: which kinds are asked for, and edits for clients with and without
versioned document changes."""

from __future__ import annotations

from lsprotocol import types

from loopcheck.server.actions import FIX_ALL, wanted, workspace_edit


def test_kinds_match_themselves_and_their_parents_only():
    assert wanted("quickfix", None) and wanted(FIX_ALL, [])
    assert wanted(FIX_ALL, ["source"]) and wanted(FIX_ALL, ["source.fixAll"]) and wanted(FIX_ALL, [FIX_ALL])
    assert not wanted(FIX_ALL, ["quickfix"]) and not wanted("quickfix", ["source"])
    assert not wanted("source.fixAllX", ["source.fixAll"])


def test_edits_are_tied_to_the_version_when_the_client_can_check_it():
    edit = types.TextEdit(range=types.Range(types.Position(0, 0), types.Position(0, 1)), new_text="x")
    versioned = workspace_edit("file:///t.py", 7, [edit], versioned=True)
    [change] = versioned.document_changes
    assert change.text_document.version == 7 and change.edits == [edit] and versioned.changes is None
    plain = workspace_edit("file:///t.py", 7, [edit], versioned=False)
    assert plain.changes == {"file:///t.py": [edit]} and plain.document_changes is None
