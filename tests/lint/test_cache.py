"""The lint cache: valid entries are reused, any change in the file or its local imports invalidates."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from loopcheck.findings import Finding, Severity
from loopcheck.lint import cache as cache_mod
from loopcheck.lint.cache import Cache, local_imports, project_root
from loopcheck.lint.output import FileError

FINDING = Finding(
    code="LC102", name="zero-grad-between-backward-and-step", severity=Severity.ERROR, message="m",
    path="/p/train.py", line=5, column=9, end_line=5, end_column=30,
    fix={"applicability": "safe", "message": "x", "edits": []},
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "pyproject.toml", "[project]\nname = 'demo'\n")
    write(tmp_path / "train.py", "import torch\nimport model\nfrom utils.ckpt import save\nmodel.run()\n")
    write(tmp_path / "model.py", "from layers import Block\nimport numpy\n")
    write(tmp_path / "layers.py", "class Block: pass\n")
    write(tmp_path / "utils" / "__init__.py", "")
    write(tmp_path / "utils" / "ckpt.py", "from . import io\n")
    write(tmp_path / "utils" / "io.py", "")
    write(tmp_path / "unrelated.py", "")
    return tmp_path


def store(cache: Cache, path: Path, key: str = "k") -> None:
    cache.put(path, path.read_bytes(), key, [FINDING], [FileError(str(path), 3, "boom", "LC000")])
    cache.close()  # what a run keeps is written at its end


def lookup(path: Path, key: str = "k"):
    return Cache(path.parent).get(path, path.read_bytes(), key)


def result_packs(project: Path) -> list[Path]:
    """The files the kept results live in (not the module summaries, the analyses, nor the
    tables of what they depend on)."""
    return list((project / ".loopcheck_cache").rglob("results/*.json"))


def test_project_root_is_the_nearest_folder_with_pyproject_or_git(tmp_path):
    write(tmp_path / "a" / "pyproject.toml", "")
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    assert project_root(tmp_path / "a" / "b" / "c") == (tmp_path / "a").resolve()
    (tmp_path / "a" / "b" / ".git").mkdir()
    assert project_root(tmp_path / "a" / "b" / "c") == (tmp_path / "a" / "b").resolve()


def test_local_imports_resolve_like_the_project_index(project):
    train = project / "train.py"
    found = {p.relative_to(project.resolve()).as_posix() for p in local_imports(train, train.read_bytes())}
    assert found == {"model.py", "utils/ckpt.py"}
    ckpt = project / "utils" / "ckpt.py"
    assert {p.name for p in local_imports(ckpt, ckpt.read_bytes())} == {"__init__.py", "io.py"}
    assert local_imports(train, b"def broken(:\n") == []


def test_a_stored_entry_comes_back_with_its_findings_and_errors(project):
    train = project / "train.py"
    cache = Cache(project)
    store(cache, train)
    entry = lookup(train)
    assert entry is not None
    assert entry.findings == [FINDING] and entry.findings[0].fix == FINDING.fix
    assert entry.errors == [FileError(str(train), 3, "boom", "LC000")]
    assert (project / ".loopcheck_cache" / "CACHEDIR.TAG").is_file()
    assert (project / ".loopcheck_cache" / ".gitignore").read_text().strip().endswith("*")


def test_the_file_its_key_and_its_imports_invalidate(project):
    train = project / "train.py"
    store(Cache(project), train)
    assert lookup(train, key="other-config") is None
    # a module it imports directly, then one reached through model.py, then one it does not import
    for dep, stays_valid in (("model.py", False), ("layers.py", False), ("utils/io.py", False), ("unrelated.py", True)):
        store(Cache(project), train)
        write(project / dep, (project / dep).read_text() + "# edited\n")
        assert (lookup(train) is not None) is stays_valid, dep
    store(Cache(project), train)
    (project / "layers.py").unlink()
    assert lookup(train) is None
    store(Cache(project), train)
    write(train, train.read_text() + "\n")
    assert lookup(train) is None


def test_the_entries_of_a_run_name_what_they_depend_on_in_one_shared_table(project):
    cache = Cache(project)
    for name in ("train.py", "model.py"):
        store(cache, project / name)
    (table,) = (project / ".loopcheck_cache").rglob("tables/*.json")
    assert "layers.py" in table.read_text()  # both depend on it: one row
    for pack in result_packs(project):
        assert "layers.py" not in pack.read_text()
    assert lookup(project / "train.py") is not None and lookup(project / "model.py") is not None


@pytest.mark.parametrize("garbage", ["", "{not json", "[]", '{"schema": 1}', '{"schema": 1, "sha": 3, "deps": 4}'])
def test_corrupt_entries_are_misses_and_are_overwritten(project, garbage):
    train = project / "train.py"
    cache = Cache(project)
    store(cache, train)
    (pack,) = result_packs(project)
    pack.write_text(garbage)
    fresh = Cache(project)
    assert fresh.get(train, train.read_bytes(), "k") is None and fresh.misses == 1
    store(fresh, train)
    assert lookup(train) is not None


def test_a_finding_with_a_wrong_shape_is_a_miss(project):
    train = project / "train.py"
    store(Cache(project), train)
    (pack,) = result_packs(project)
    doc = json.loads(pack.read_text())
    (entry,) = doc["entries"].values()
    entry["findings"][0]["severity"] = "catastrophic"
    pack.write_text(json.dumps(doc))
    assert lookup(train) is None


@pytest.mark.parametrize("garbage", [None, [], {"schema": 1}, {"schema": 1, "sha": 3, "deps": 4}])
def test_a_corrupt_entry_in_a_pack_is_a_miss_and_leaves_the_others(project, garbage):
    train, model = project / "train.py", project / "model.py"
    cache = Cache(project)
    for path in (train, model):
        cache.put(path, path.read_bytes(), "k", [FINDING], [])
    cache.close()
    packs = {name: pack for pack in result_packs(project) for name in json.loads(pack.read_text())["entries"]}
    assert len(packs) == 2
    name = cache._entry_name(train, "k")
    pack = packs[name]
    doc = json.loads(pack.read_text())
    doc["entries"][name] = garbage
    pack.write_text(json.dumps(doc))
    assert lookup(train) is None and lookup(model) is not None
    store(Cache(project), train)
    assert lookup(train) is not None and lookup(model) is not None


def test_a_run_writes_the_entries_it_changed_over_what_another_run_wrote_meanwhile(project):
    train, model = project / "train.py", project / "model.py"
    first, second = Cache(project), Cache(project)
    assert first.get(train, train.read_bytes(), "k") is None and second.get(model, model.read_bytes(), "k") is None
    first.put(train, train.read_bytes(), "k", [FINDING], [])
    second.put(model, model.read_bytes(), "k", [], [])
    first.close()
    second.close()
    assert lookup(train).findings == [FINDING] and lookup(model).findings == []


@pytest.mark.skipif(cache_mod.fcntl is None, reason="no flock on this platform")
def test_a_run_writes_its_packs_only_while_no_other_run_is_writing_its_own(project):
    """Two runs ending together: each pack is read, merged and written under the cache's lock,
    so neither drops the entries the other adds to the same pack."""
    train, model = project / "train.py", project / "model.py"
    first, second = Cache(project), Cache(project)
    first.get(train, train.read_bytes(), "k")
    first.put(train, train.read_bytes(), "k", [FINDING], [])
    second.put(model, model.read_bytes(), "k", [], [])
    second.close()  # makes the folder and its lock file
    with open(first.dir / ".lock", "a") as held:
        cache_mod.fcntl.flock(held, cache_mod.fcntl.LOCK_EX)  # another run writing
        closing = threading.Thread(target=first.close)
        closing.start()
        closing.join(0.5)
        waiting = closing.is_alive()
    closing.join()
    assert waiting  # it waited for the lock rather than merging with a pack being written
    assert lookup(train).findings == [FINDING] and lookup(model).findings == []


def test_entries_of_a_deleted_file_leave_each_pack_written_after_it_is_gone(project):
    gone, train = write(project / "gone.py", "import torch\n"), project / "train.py"
    keys = [f"k{i}" for i in range(64)]  # entries spread over every pack
    cache = Cache(project)
    for key in keys:
        cache.put(gone, gone.read_bytes(), key, [], [])
    cache.close()
    gone.unlink()
    cache = Cache(project)
    for key in keys:
        cache.put(train, train.read_bytes(), key, [], [])
    cache.close()
    packs = [json.loads(p.read_text())["entries"] for p in result_packs(project)]
    paths = [{doc["path"] for doc in pack.values()} for pack in packs]
    assert all(str(gone.resolve()) not in held for held in paths if str(train.resolve()) in held)
    assert sum(str(gone.resolve()) in held for held in paths) < len(packs)


def test_an_unwritable_cache_is_skipped_silently(project):
    (project / ".loopcheck_cache").write_text("a file where the folder should be")
    cache = Cache(project)
    store(cache, project / "train.py")
    store(cache, project / "model.py")
    assert lookup(project / "train.py") is None


def test_an_upgrade_starts_a_fresh_cache_and_removes_the_old_one(project, monkeypatch):
    train = project / "train.py"
    store(Cache(project), train)
    old = Cache(project).dir
    monkeypatch.setattr(cache_mod, "_salt", lambda: "another-version")
    assert lookup(train) is None
    store(Cache(project), train)
    assert not old.exists() and lookup(train) is not None


def test_summaries_are_kept_by_content_in_the_cache(tmp_path: Path) -> None:
    """A summary stored once is read back for the same bytes under any path; JSON only."""
    import json

    from loopcheck.lint.summary import SummaryStore, summarize

    source = b"import torch\nfrom . import engine\n\ndef fit(model):\n    return model\n\nclass T:\n    def step(self): pass\n"
    store = SummaryStore(tmp_path / "summaries")
    first = store.summary(source, "/p/a.py")
    assert first == summarize(source, "/p/a.py")
    [entry] = (tmp_path / "summaries").rglob("*.json")
    json.loads(entry.read_text())  # plain data, never pickle
    again = store.summary(source, "/p/b.py")
    assert again == summarize(source, "/p/b.py") and again.path == "/p/b.py"
    assert store.summary(b"def broken(:\n", "/p/c.py") is None
    assert store.summary(b"def broken(:\n", "/p/c.py") is None  # read back as "cannot be summarised"


def test_a_kept_result_has_its_dependencies_resolved_only_when_something_reports_into_it(tmp_path):
    """A warm run checks whether a file it analysed reports into a file whose kept result it used
    (a new importer). Only such a file's dependencies are resolved: a kept result lists hundreds,
    and resolving them all for every file was most of a warm run on an unchanged tree."""
    import os

    from loopcheck.lint import command
    from loopcheck.lint.real_paths import RealPaths

    here, kept_dep, new_importer = (write(tmp_path / name, "") for name in ("a.py", "b.py", "c.py"))
    real, paths = os.path.realpath, RealPaths()
    resolved: list[str] = []

    def resolving(p):
        resolved.append(str(p))
        return paths(p)

    listed: list[int] = []
    entry = cache_mod.Entry([], [], listed=lambda: listed.append(1) or [str(kept_dep)])

    assert not command._reported_beyond({}, here, entry, resolving)
    assert resolved == [str(here)] and not listed  # nor even listed (they are named by rows of a table)
    assert not command._reported_beyond({real(here): {real(kept_dep)}}, here, entry, resolving)
    assert command._reported_beyond({real(here): {real(new_importer)}}, here, entry, resolving)


def test_the_derived_parts_a_run_used_are_read_back_together_by_the_next(project):
    cache = Cache(project)
    cache.derived.put("imports:a", {"found": ["x.py"]})
    cache.derived.put("imports:b", {"found": []})
    assert Cache(project).derived.get("imports:a") == {"found": ["x.py"]}  # one file each until a run closes
    cache.close()
    for part in (cache.derived.folder).rglob("*.json"):
        if part.name != "together.json":
            part.unlink()
    later = Cache(project)
    assert later.derived.get("imports:a") == {"found": ["x.py"]} and later.derived.get("imports:b") == {"found": []}
    assert later.derived.get("imports:c") is None
    (cache.derived.folder / "together.json").write_text("{broken")
    assert Cache(project).derived.get("imports:a") is None


@pytest.mark.parametrize("linked", ["layers.py", "utils"])
def test_a_dependency_reached_through_a_link_counts_as_what_it_links_to(project, linked):
    target = project / f"real_{linked}"
    (project / linked).rename(target)
    (project / linked).symlink_to(target)
    train = project / "train.py"
    store(Cache(project), train)
    assert lookup(train) is not None
    edited = target if linked == "layers.py" else target / "io.py"
    write(edited, edited.read_text() + "x = 1\n")
    assert lookup(train) is None
