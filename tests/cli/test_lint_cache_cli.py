"""`loopcheck lint` through the cache: warm runs, invalidation across files, --no-cache, corruption."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import loopcheck.lint.engine as engine
from tests.projects import MODEL, STEP_MODULE, TRAIN

from .conftest import DRIVER, UNSAFE_LOAD, write



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
    def poison(doc):
        for f in doc["findings"]:
            f["message"] = "from the cache"
        return doc

    rewrite_entries(packs_of(two_files, "results"), poison)
    assert {f["message"] for f in report(lint)["findings"]} == {"from the cache"}
    assert "from the cache" not in {f["message"] for f in report(lint, "--no-cache")["findings"]}


def test_corrupt_analyses_are_analysed_again(lint, two_files, checked):
    cold = report(lint)
    shutil.rmtree(packs_of(two_files, "results"))
    corrupt_entries(packs_of(two_files, "analyses"))
    checked.clear()
    assert report(lint) == cold
    assert sorted(checked) == ["ckpt.py", "model.py", "train.py"]


def test_corrupt_cache_entries_are_ignored(lint, two_files, checked):
    cold = report(lint)
    assert corrupt_entries(packs_of(two_files, "results")) == 3
    checked.clear()
    result = lint(".", "-f", "json", "--jobs", "1")
    assert result.exit_code == 1 and result.stderr == ""
    assert json.loads(result.stdout) == cold
    assert checked == []  # each file's result is assembled again from the analyses kept beside it


def packs_of(project: Path, kind: str) -> Path:
    """The folder of the packs holding one kind of cache entry ("results", "analyses")."""
    (folder,) = (project / ".loopcheck_cache").glob(f"*/{kind}")
    return folder


def rewrite_entries(packs: Path, change) -> int:
    """Pass each entry kept in the packs under `packs` through `change`; return how many there were."""
    count = 0
    for pack in sorted(packs.glob("*.json")):
        doc = json.loads(pack.read_text())
        doc["entries"] = {name: change(entry) for name, entry in doc["entries"].items()}
        count += len(doc["entries"])
        pack.write_text(json.dumps(doc))
    return count


def corrupt_entries(packs: Path) -> int:
    """Spoil every entry under `packs` in each way a cache can be spoilt: the first pack unreadable
    as a whole, each entry of the others garbage or written by another schema."""
    spoilt = iter(["garbage", {"schema": 1, "sha": None}, None] * 100)
    count = rewrite_entries(packs, lambda entry: next(spoilt))
    first = sorted(packs.glob("*.json"))[0]
    first.write_bytes(b"\x00\xff garbage")
    return count


def test_a_load_is_rechecked_when_another_module_changes_what_it_saves(lint, project, checked):
    write(project / "ckpt.py", "import torch\n\n\ndef read(folder):\n    return torch.load(folder / \"weights-best.pth\")\n")
    write(project / "export.py", "import torch\n\n\ndef export(model, folder):\n    torch.save(model.state_dict(), folder / \"weights-best.pth\")\n")
    assert [f["path"] for f in report(lint)["findings"]] == []  # the project writes that file itself
    write(project / "export.py", "import torch\n\n\ndef export(model, folder):\n    torch.save(model, folder / \"weights-best.pth\")\n")
    checked.clear()
    found = {(f["path"], f["code"]) for f in report(lint)["findings"]}
    assert ("ckpt.py", "LC508") in found  # a pickled module now: the load is reported again
    assert "ckpt.py" in checked


SEED_AND_STEP = """\
SEED = 1234


def warmup(step, base):
    return base * min(1.0, step / 100)
"""


@pytest.fixture
def driver_project(project: Path) -> Path:
    write(project / "settings.py", SEED_AND_STEP)
    write(project / "steps.py", STEP_MODULE)
    write(project / "driver.py", DRIVER)
    return project


def _unread_edit_then_fix(lint, checked, step_file: str, unread: tuple[Path, str], fixed: tuple[Path, str]) -> None:
    """driver.py's model finds LC102 in `step_file`. `unread` (path, text) is an edit no other
    file's analysis read: only the edited file is analysed again, and nothing changes. `fixed`
    is the fix: driver.py is analysed again too, and the finding goes, as a run without the
    cache says."""
    cold = report(lint)
    assert (step_file, "LC102") in {(f["path"], f["code"]) for f in cold["findings"]}
    write(*unread)
    checked.clear()
    assert report(lint) == cold
    assert checked == [unread[0].name]
    write(*fixed)
    checked.clear()
    after = report(lint)
    assert sorted(checked) == ["driver.py", step_file]
    assert (step_file, "LC102") not in {(f["path"], f["code"]) for f in after["findings"]}
    assert after == report(lint, "--no-cache")


def test_an_edit_reanalyses_only_the_files_whose_analyses_read_it(lint, driver_project, checked):
    # settings.py is imported by driver.py, but nothing its model follows reads it; steps.py
    # holds the step driver.py's model follows
    _unread_edit_then_fix(
        lint, checked, "steps.py",
        unread=(driver_project / "settings.py", SEED_AND_STEP.replace("100", "200")),
        fixed=(driver_project / "steps.py", STEP_MODULE.replace(
            "    optimizer.step()\n    loss.backward()\n", "    loss.backward()\n    optimizer.step()\n")))


def test_an_answer_about_reach_is_asked_again_only_when_imports_or_words_change(lint, project, checked):
    # stats.py names nothing of PyTorch itself: it is analysed because what it imports does
    write(project / "backend.py", "import torch\n\n\ndef mean(xs):\n    return torch.stack(xs).mean()\n")
    write(project / "stats.py", "import backend\n\n\ndef count(xs):\n    return len(xs)\n")
    cold = report(lint)
    write(project / "backend.py", "import torch\n\n\ndef mean(xs):\n    return torch.stack(list(xs)).mean()\n")
    checked.clear()
    assert report(lint) == cold
    assert checked == ["backend.py"]  # stats.py's analysis read only "backend reaches torch": unchanged
    write(project / "backend.py", "def mean(xs):\n    return sum(xs) / len(xs)\n")
    checked.clear()
    report(lint)
    assert sorted(checked) == ["backend.py", "stats.py"]


def test_what_the_project_saves_is_read_as_a_whole_not_file_by_file(lint, project, checked):
    """A load's analysis depends on what the project saves (LC508), not on the text of every
    file that mentions saving: an edit that saves the same is not a reason to analyse it again."""
    write(project / "ckpt.py", "import torch\n\n\ndef read(folder):\n    return torch.load(folder / \"weights-best.pth\")\n")
    export = "import torch\n\n\ndef export(model, folder):\n    torch.save(model.state_dict(), folder / \"weights-best.pth\")\n"
    write(project / "export.py", export)
    report(lint)
    write(project / "export.py", export + "\n\ndef describe(model):\n    return sum(p.numel() for p in model.parameters())\n")
    checked.clear()
    assert report(lint)["findings"] == []
    assert checked == ["export.py"]


def test_what_each_file_saves_is_kept_by_its_content(lint, project, monkeypatch):
    """A new run after an edit works out again only what the edited file saves, and reads what
    the others save from the cache; `--no-cache` keeps nothing."""
    import hashlib

    from loopcheck.lint import cache as cache_mod

    write(project / "ckpt.py", "import torch\n\n\ndef read(folder):\n    return torch.load(folder / \"weights-best.pth\")\n")
    write(project / "export.py", "import torch\n\n\ndef export(model, folder):\n    torch.save(model.state_dict(), folder / \"weights-best.pth\")\n")
    train = "import torch\nfrom export import export\n\n\ndef end(model):\n    export(model, \"out\")\n    torch.save(model.state_dict(), \"last.pt\")\n"
    write(project / "train.py", train)
    made: list[str] = []
    real = cache_mod.DerivedParts.put
    # (each file's resolved imports are kept as parts too: `Project._imports_kept`)
    monkeypatch.setattr(cache_mod.DerivedParts, "put", lambda self, key, part: (
        key.startswith("imports:") or made.append(key)) or real(self, key, part))
    cold = report(lint)
    assert len(made) == 4  # what export.py and train.py save, their calls of `export`
    edited = train.replace("last.pt", "final.pt")
    write(project / "train.py", edited)
    made.clear()
    assert report(lint) == report(lint, "--no-cache") == cold
    digest = hashlib.sha256(edited.encode()).hexdigest()[:32]
    assert sorted(k.split(":")[0] for k in made) == ["save-calls", "saves"]
    assert all(k.split(":")[1] == digest for k in made)  # the edited file's parts, nothing else


LOADER = "import torch\n\n\ndef load_checkpoint(path):\n    return torch.load(path)\n"
RESUME = """\
from loader import load_checkpoint


def resume(model, optimizer, path):
    state = load_checkpoint(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"]
"""
SAVER = """\
import torch


def save(model, optimizer, epoch, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
"""


def test_an_edit_to_a_caller_reanalyses_the_loading_module_only_when_the_keys_read_change(lint, project, checked):
    """loader.py's load is judged by the keys its callers read back (resume.py, found by the
    word `load_checkpoint`): its analysis depends on those keys, not on comments added to
    resume.py or on its other functions; an edit to the keys it reads is a reason to analyse
    loader.py again."""
    write(project / "loader.py", LOADER)
    write(project / "resume.py", RESUME)
    write(project / "saver.py", SAVER)
    cold = report(lint)
    assert ("loader.py", "LC508") not in {(f["path"], f["code"]) for f in cold["findings"]}
    for edited in (RESUME + "\n# resumes the run where it stopped\n",
                   RESUME + "\n\ndef describe(model):\n    return sum(p.numel() for p in model.parameters())\n"):
        write(project / "resume.py", edited)
        checked.clear()
        assert report(lint) == cold
        assert checked == ["resume.py"]
    write(project / "resume.py", RESUME.replace('state["epoch"]', 'state.get("step", 0)'))
    checked.clear()
    again = report(lint)
    assert sorted(checked) == ["loader.py", "resume.py"]
    assert again == report(lint, "--no-cache")


STEPPER = """\
import torch


class Stepper:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def step(self, batch, criterion):
        self.optimizer.zero_grad()
        loss = criterion(self.model(batch[0]), batch[1])
        self.optimizer.step()
        loss.backward()
        return loss

    def describe(self):
        return f"stepper of {type(self.model).__name__}"
"""
STEPPER_DRIVER = """\
import torch
from torch import nn

from stepper import Stepper


def main(loader):
    model = nn.Linear(8, 2)
    stepper = Stepper(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for epoch in range(3):
        for batch in loader:
            stepper.step(batch, nn.CrossEntropyLoss())
"""


def test_an_edit_to_a_method_no_analysis_read_reanalyses_only_its_file(lint, project, checked):
    """driver.py's model follows `Stepper.__init__` and `Stepper.step` of stepper.py: it depends
    on those methods (and the class's own lines), not on `describe`."""
    write(project / "stepper.py", STEPPER)
    write(project / "driver.py", STEPPER_DRIVER)
    _unread_edit_then_fix(
        lint, checked, "stepper.py",
        unread=(project / "stepper.py", STEPPER.replace("stepper of", "stepper for")),
        fixed=(project / "stepper.py", STEPPER.replace(
            "        self.optimizer.step()\n        loss.backward()\n", "        loss.backward()\n        self.optimizer.step()\n")))



def _lines_above(text: str, n: int = 2) -> str:
    return "".join(f"# note {i}\n" for i in range(n)) + text


def test_a_part_moved_by_lines_above_it_leaves_the_analyses_that_read_it(lint, project, checked):
    """driver.py's model follows `Stepper.step`; no finding of it is in stepper.py. Lines added
    above the class move the methods without changing them: only stepper.py is analysed again."""
    fixed = STEPPER.replace("        self.optimizer.step()\n        loss.backward()\n",
                            "        loss.backward()\n        self.optimizer.step()\n")
    write(project / "stepper.py", fixed)
    write(project / "driver.py", STEPPER_DRIVER)
    cold = report(lint)
    write(project / "stepper.py", _lines_above(fixed))
    checked.clear()
    assert report(lint) == cold
    assert checked == ["stepper.py"]


def test_findings_in_a_moved_part_follow_it(lint, project, checked):
    """driver.py's model finds LC102 located in stepper.py: its analysis depends on where the step
    is, so lines added above it analyse driver.py again and the finding moves with its line (an
    edit below it does not)."""
    write(project / "stepper.py", STEPPER)
    write(project / "driver.py", STEPPER_DRIVER)
    line = {f["code"]: f["line"] for f in report(lint)["findings"] if f["path"] == "stepper.py"}["LC102"]
    write(project / "stepper.py", _lines_above(STEPPER))
    checked.clear()
    after = report(lint)
    assert sorted(checked) == ["driver.py", "stepper.py"]
    assert {f["code"]: f["line"] for f in after["findings"] if f["path"] == "stepper.py"}["LC102"] == line + 2
    assert after == report(lint, "--no-cache")
    write(project / "stepper.py", _lines_above(STEPPER) + "\n\ndef unused():\n    return None\n")
    checked.clear()
    assert report(lint) == after
    assert checked == ["stepper.py"]


CITED_STEP = """\
def train_step(model, batch, optimizer):
    optimizer.zero_grad()
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
    return loss
"""
CITING_DRIVER = """\
import torch
from torch import nn

from steps import train_step


def main(loader):
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=1000)
    for epoch in range(3):
        for batch in loader:
            scheduler.step()
            train_step(model, batch, optimizer)
"""


def test_a_message_citing_a_moved_line_follows_it(lint, project, checked):
    """driver.py's LC201 is located in driver.py and cites `optimizer.step()` in steps.py: lines
    added above the step analyse driver.py again, and the citation names the new line."""
    write(project / "steps.py", CITED_STEP)
    write(project / "driver.py", CITING_DRIVER)
    cold = report(lint)
    assert [(f["path"], f["code"]) for f in cold["findings"]] == [("driver.py", "LC201")]
    assert "(steps.py:5)" in cold["findings"][0]["message"]
    write(project / "steps.py", _lines_above(CITED_STEP))
    checked.clear()
    after = report(lint)
    assert sorted(checked) == ["driver.py", "steps.py"]
    assert "(steps.py:7)" in after["findings"][0]["message"]
    assert after == report(lint, "--no-cache")


def test_a_search_of_a_module_s_call_sites_depends_on_the_parts_holding_them(lint, project, checked):
    """train.py's analysis looks for the calls of setup.py's builders inside setup.py (what their
    parameters are given there): it depends on which parts of setup.py hold such a call, not on
    all of setup.py. A function added to setup.py that calls no builder analyses setup.py alone;
    one that calls a builder analyses train.py again."""
    factory = Path(__file__).resolve().parents[2] / "fixtures" / "data_loader_factory_project"
    for name in ("data.py", "setup.py", "train.py"):
        write(project / name, (factory / name).read_text())
    setup = (factory / "setup.py").read_text()
    cold = report(lint)
    write(project / "setup.py", setup + "\n\ndef describe(model):\n    return sum(p.numel() for p in model.parameters())\n")
    checked.clear()
    assert report(lint) == cold
    assert checked == ["setup.py"]
    write(project / "setup.py", setup + "\n\ndef small_run(model, train_set, val_set):\n"
                                        "    return build_run(model, train_set, val_set, batch_size=2)\n")
    checked.clear()
    after = report(lint)
    assert sorted(checked) == ["setup.py", "train.py"]
    assert after == report(lint, "--no-cache")
