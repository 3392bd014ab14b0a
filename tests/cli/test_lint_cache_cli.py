"""`loopcheck lint` through the cache: warm runs, invalidation across files, --no-cache, corruption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopcheck.lint.engine as engine
from tests.projects import MODEL, TRAIN

from .conftest import UNSAFE_LOAD, write



@pytest.fixture
def checked(monkeypatch) -> list[str]:
    """The files the engine is asked to check (cache misses)."""
    calls: list[str] = []
    real = engine._analyse_one

    def spy(args):
        calls.append(Path(args[0]).name)
        return real(args)

    monkeypatch.setattr(engine, "_analyse_one", spy)
    return calls


@pytest.fixture
def two_files(project: Path) -> Path:
    write(project / "model.py", MODEL)
    write(project / "train.py", TRAIN)
    write(project / "ckpt.py", UNSAFE_LOAD)
    return project


def report(lint, *args: str) -> dict:
    result = lint(".", "-f", "json", "--jobs", "1", *args)
    return json.loads(result.stdout)


def test_a_warm_run_reuses_every_result(lint, two_files, checked):
    cold = report(lint)
    assert {(f["path"], f["code"]) for f in cold["findings"]} == {("train.py", "LC602"), ("ckpt.py", "LC508")}
    assert sorted(checked) == ["ckpt.py", "model.py", "train.py"]
    assert (two_files / ".loopcheck_cache" / "CACHEDIR.TAG").is_file()
    checked.clear()
    warm = report(lint)
    assert checked == []
    assert warm == cold
    # a different selection is a different configuration: checked afresh
    report(lint, "--ignore", "LC5")
    assert sorted(checked) == ["ckpt.py", "model.py", "train.py"]


def test_editing_an_imported_module_rechecks_its_importers(lint, two_files, checked):
    report(lint)
    checked.clear()
    write(two_files / "model.py", MODEL.replace("return F.softmax(self.head(x), dim=1)", "return self.head(x)"))
    after = report(lint)
    assert sorted(checked) == ["model.py", "train.py"]  # ckpt.py imports neither
    assert [(f["path"], f["code"]) for f in after["findings"]] == [("ckpt.py", "LC508")]


def test_no_cache_neither_reads_nor_writes(lint, two_files, checked):
    report(lint, "--no-cache")
    assert not (two_files / ".loopcheck_cache").exists()
    report(lint)
    # poison the stored result of ckpt.py: a run that reads the cache shows the poison
    for entry in results_in(two_files / ".loopcheck_cache"):
        doc = json.loads(entry.read_text())
        for f in doc["findings"]:
            f["message"] = "from the cache"
        entry.write_text(json.dumps(doc))
    assert {f["message"] for f in report(lint)["findings"]} == {"from the cache"}
    assert "from the cache" not in {f["message"] for f in report(lint, "--no-cache")["findings"]}


def test_corrupt_cache_entries_are_ignored(lint, two_files, checked):
    cold = report(lint)
    entries = results_in(two_files / ".loopcheck_cache")
    assert len(entries) == 3
    for i, entry in enumerate(entries):
        entry.write_bytes([b"", b"\x00\xff garbage", b'{"schema": 1, "sha": null}'][i])
    checked.clear()
    result = lint(".", "-f", "json", "--jobs", "1")
    assert result.exit_code == 1 and result.stderr == ""
    assert json.loads(result.stdout) == cold
    assert len(checked) == 3


def results_in(cache: Path) -> list[Path]:
    """The stored lint results (module summaries kept beside them left out)."""
    return [p for p in cache.rglob("*.json") if "summaries" not in p.parts]


def test_a_load_is_rechecked_when_another_module_changes_what_it_saves(lint, project, checked):
    write(project / "ckpt.py", "import torch\n\n\ndef read(folder):\n    return torch.load(folder / \"weights-best.pth\")\n")
    write(project / "export.py", "import torch\n\n\ndef export(model, folder):\n    torch.save(model.state_dict(), folder / \"weights-best.pth\")\n")
    assert [f["path"] for f in report(lint)["findings"]] == []  # the project writes that file itself
    write(project / "export.py", "import torch\n\n\ndef export(model, folder):\n    torch.save(model, folder / \"weights-best.pth\")\n")
    checked.clear()
    found = {(f["path"], f["code"]) for f in report(lint)["findings"]}
    assert ("ckpt.py", "LC508") in found  # a pickled module now: the load is reported again
    assert "ckpt.py" in checked
