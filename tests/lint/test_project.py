"""The project of a run: each module parsed once, summaries, and the same findings for a file
whether it is linted alone or with its whole project."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from loopcheck.lint import engine, memo
from loopcheck.lint import project as project_module
from loopcheck.lint.project import Project, project_root
from loopcheck.lint.summary import summarize, summarize_parsed
from tests.projects import STEP_MODULE

REPO = Path(__file__).resolve().parents[2]
FIXTURE_PROJECTS = sorted(p for p in (REPO / "fixtures").iterdir() if p.is_dir())


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def calls_to(monkeypatch, owner: object, name: str) -> list[str]:
    """Patch `owner.name` to note the path each call is given (its last argument)."""
    seen: list[str] = []
    original = getattr(owner, name)

    def noted(*args):
        seen.append(str(args[-1]))
        return original(*args)
    monkeypatch.setattr(owner, name, noted)
    return seen


@pytest.fixture(autouse=True)
def fresh_projects():
    engine._PROJECTS.clear()
    yield
    engine._PROJECTS.clear()


COMMON = """
    import torch


    def make_optimizer(model, lr):
        return torch.optim.AdamW(model.parameters(), lr=lr)


    def train_step(model, batch, optimizer, criterion):
        optimizer.zero_grad()
        loss = criterion(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        return loss.item()
"""

USER = """
    import torch
    from helpers.common import make_optimizer, train_step


    def run_{n}(model, loader, epochs):
        optimizer = make_optimizer(model, 1e-3)
        criterion = torch.nn.CrossEntropyLoss()
        for epoch in range(epochs):
            for batch in loader:
                train_step(model, batch, optimizer, criterion)
"""


@pytest.fixture
def many_importers(tmp_path: Path) -> Path:
    write(tmp_path / "pyproject.toml", "[project]\nname = 'demo'\n")
    write(tmp_path / "helpers" / "__init__.py", "")
    write(tmp_path / "helpers" / "common.py", COMMON)
    for n in range(12):
        write(tmp_path / "scripts" / f"train_{n}.py", USER.format(n=n))
    return tmp_path


def test_a_module_imported_by_every_file_is_parsed_once_per_run(many_importers: Path) -> None:
    files = sorted(many_importers.rglob("*.py"))
    results = engine.check_files(files, jobs=1)
    assert not [e for r in results for e in r.errors]
    project = engine.project_for(files[0])
    common = os.path.abspath(many_importers / "helpers" / "common.py")
    assert project.parses[common] == 1
    assert project.parses and max(project.parses.values()) == 1, project.parses


def test_linting_one_file_parses_each_module_it_needs_once(many_importers: Path) -> None:
    target = many_importers / "helpers" / "common.py"
    project = Project.for_path(target)
    engine.check_file(target, project=project)
    assert project.parses, "the importers of common.py were analysed"
    assert max(project.parses.values()) == 1, project.parses


def test_each_text_is_read_by_the_standard_parser_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary, the parts of a followed module, what a project saves and where statements
    start all read one `ast` tree per text."""
    import ast
    import hashlib

    from loopcheck.lint import summary

    summary._TREES.clear()
    parse, parsed = ast.parse, []

    def counting(source, filename="<unknown>", mode="exec", **kwargs):  # type: ignore[no-untyped-def]
        if mode == "exec":  # `literal_eval` reads expressions through it too
            text = source.encode("utf-8") if isinstance(source, str) else source
            parsed.append(hashlib.sha256(text).hexdigest())
        return parse(source, filename, mode, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    for unit in FIXTURE_PROJECTS:
        engine._PROJECTS.clear()
        engine.check_files(sorted(unit.rglob("*.py")), jobs=1)
    assert parsed
    assert len(parsed) == len(set(parsed))


def test_a_declared_encoding_keeps_its_own_tree() -> None:
    """Bytes declaring Latin-1 read as another text than the same bytes read as UTF-8."""
    from loopcheck.lint.summary import ast_tree

    text = 'name = "caf\u00e9"\n'
    declared = ("# -*- coding: latin-1 -*-\n" + text).encode("utf-8")
    as_utf8 = ast_tree(declared.decode("utf-8"))
    as_latin1 = ast_tree(declared)
    assert as_utf8 is not None and as_latin1 is not None
    assert as_utf8.body[0].value.value == "caf\u00e9"  # type: ignore[attr-defined]
    assert as_latin1.body[0].value.value == "caf\u00c3\u00a9"  # type: ignore[attr-defined]
    assert ast_tree(text) is ast_tree(text.encode("utf-8"))


@pytest.mark.parametrize("unit", FIXTURE_PROJECTS, ids=lambda p: p.name)
def test_a_file_gets_the_same_findings_alone_or_with_its_project(unit: Path) -> None:
    files = sorted(unit.rglob("*.py"))
    together = dict(zip(files, engine.check_files(files, jobs=1)))
    for f in files:
        engine._PROJECTS.clear()
        alone = engine.check_file(f)
        key = lambda r: sorted((x.code, x.line, x.column, x.message) for x in r.findings)  # noqa: E731
        assert key(alone) == key(together[f]), f
        assert all(os.path.abspath(x.path) == os.path.abspath(f) for x in alone.findings)


FIT_STEPPING_THE_SCHEDULER_PER_EPOCH = """
    def fit(model, loader, optimizer, scheduler, criterion, epochs):
        for epoch in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            scheduler.step()
"""


def test_a_finding_that_needs_the_callers_facts_is_found_in_the_callee_linted_alone(tmp_path: Path) -> None:
    write(tmp_path / "setup.py", "")
    engine_py = write(tmp_path / "engine.py", FIT_STEPPING_THE_SCHEDULER_PER_EPOCH)
    write(tmp_path / "train.py", """
        import torch
        from engine import fit

        def main(model, loader, epochs=10):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=epochs * len(loader))
            fit(model, loader, optimizer, scheduler, torch.nn.CrossEntropyLoss(), epochs)
    """)
    alone = engine.check_file(engine_py)
    assert [(f.code, f.line) for f in alone.findings if f.code == "LC202"] == [("LC202", 9)]
    assert all(f.path == str(engine_py) for f in alone.findings)
    engine._PROJECTS.clear()
    caller = engine.check_file(tmp_path / "train.py")
    assert not [f for f in caller.findings if f.code == "LC202"], "reported in the file where the defect is"


def test_a_test_module_reports_nothing_into_the_code_it_tests(tmp_path: Path) -> None:
    # the test trains with the project's loop on a toy schedule; what the loop does with it is the
    # test's choice, not a defect of `engine.py` (a real caller would still report into it)
    write(tmp_path / "setup.py", "")
    engine_py = write(tmp_path / "engine.py", FIT_STEPPING_THE_SCHEDULER_PER_EPOCH)
    test_py = write(tmp_path / "tests" / "test_engine.py", """
        import torch
        from engine import fit

        def test_fit_runs(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=2 * len(loader))
            fit(model, loader, optimizer, scheduler, torch.nn.CrossEntropyLoss(), 2)
    """)
    assert not [f for f in engine.check_file(engine_py).findings if f.code == "LC202"]
    engine._PROJECTS.clear()
    together = engine.check_files([engine_py, test_py], jobs=1)
    assert not [f for r in together for f in r.findings if f.code == "LC202"]
    assert engine.reports_into(str(test_py), str(tmp_path / "tests" / "helpers.py"))


def test_the_root_is_the_nearest_folder_with_a_project_marker(tmp_path: Path) -> None:
    write(tmp_path / "setup.cfg", "")
    nested = write(tmp_path / "src" / "pkg" / "train.py", "")
    assert project_root(nested) == tmp_path.resolve()
    write(tmp_path / "src" / "pkg" / "pyproject.toml", "")
    assert project_root(nested) == (tmp_path / "src" / "pkg").resolve()


def test_the_project_walk_never_enters_a_virtualenv_or_installed_packages(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "")
    write(tmp_path / "train.py", "")
    write(tmp_path / "env" / "pyvenv.cfg", "")
    write(tmp_path / "env" / "lib" / "x.py", "")
    write(tmp_path / "myenv" / "pyvenv.cfg", "")
    write(tmp_path / "myenv" / "y.py", "")
    write(tmp_path / "lib" / "site-packages" / "z.py", "")
    write(tmp_path / "pkg" / "model.py", "")
    names = {p.relative_to(tmp_path).as_posix() for p in Project([tmp_path]).files()}
    assert names == {"train.py", "pkg/model.py"}


def test_dependents_follow_imports_backwards_through_packages(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "")
    write(tmp_path / "pkg" / "__init__.py", "from .engine import fit\n")
    engine_py = write(tmp_path / "pkg" / "engine.py", "def fit(): pass\n")
    write(tmp_path / "train.py", "from pkg import fit\n")
    write(tmp_path / "other.py", "import json\n")
    project = Project([tmp_path])
    found = {Path(p).relative_to(tmp_path.resolve()).as_posix() for p in project.dependents(engine_py)}
    assert found == {"pkg/__init__.py", "train.py"}


@pytest.mark.parametrize("linted", [
    ["pkg/engine.py"],  # most files left out
    ["pkg/engine.py", "pkg/data.py", "pkg/losses.py", "other.py", "tools/report.py"],  # few left out
])
def test_the_files_outside_a_lint_that_import_it_are_analysed_too(tmp_path: Path, linted: list[str]) -> None:
    write(tmp_path / "pyproject.toml", "")
    write(tmp_path / "pkg" / "__init__.py", "from .engine import fit\n")
    write(tmp_path / "pkg" / "engine.py", "def fit(): pass\n")
    write(tmp_path / "pkg" / "data.py", "def load(): pass\n")
    write(tmp_path / "pkg" / "losses.py", "from .data import load\n")
    write(tmp_path / "train.py", "from pkg import fit\n")
    write(tmp_path / "tools" / "run.py", "import train\n")
    write(tmp_path / "tools" / "report.py", "import json\n")
    write(tmp_path / "other.py", "import json\n")
    root = tmp_path.resolve()
    found = {Path(p).relative_to(root).as_posix() for p in engine._unlinted_dependents([str(root / n) for n in linted])}
    assert found == {"pkg/__init__.py", "train.py", "tools/run.py"}


def test_a_summary_holds_imports_exports_definitions_and_mentions() -> None:
    summary = summarize(textwrap.dedent("""
        import torch.nn as nn
        from . import engine
        from .losses import *
        __all__ = ["Net", "fit"]

        class Net(nn.Module):
            def forward(self, x):
                return x.log_softmax(-1)

        def fit():
            pass
    """).encode(), "m.py")
    assert summary is not None
    assert ("torch.nn", 0, ()) in summary.imports
    assert ("", 1, ("engine",)) in summary.imports
    assert ("losses", 1, ("*",)) in summary.imports
    assert summary.exports == ("Net", "fit")
    assert summary.functions == ("fit",)
    assert summary.classes == (("Net", ("nn.Module",), ("forward",)),)
    assert summary.mentions_any(("softmax",)) and not summary.mentions_any(("sigmoid",))
    assert ("engine", 1) in summary.import_targets()
    assert summarize(b"def broken(:\n", "b.py") is None


TANGLED_IMPORTS = """\
import os, sys as system
from .. import engine
try:
    import apex
except ImportError:
    from torch.cuda import amp as apex
else:
    import apex.amp
finally:
    import gc
if system.version_info >= (3, 10):
    import tomllib
elif os.name == "nt":
    import ntpath
else: import posixpath
with open(os.devnull) as fh: import json
match os.name:
    case "posix":
        import fcntl
__all__ = ["Trainer", "train" "_step", f"skip{1}"]


class Trainer(Base[int], *mixins, metaclass=Meta):
    async def fit(self):
        import asyncio

    @staticmethod
    def build(): pass


async def train_step(model):
    from .losses import *
"""


@pytest.mark.parametrize("source", [TANGLED_IMPORTS, COMMON] + [
    p for p in sorted((REPO / "fixtures").rglob("*.py"))[:40]
], ids=lambda s: s.name if isinstance(s, Path) else "inline")
def test_a_summary_read_from_the_libcst_tree_is_the_one_ast_makes(source) -> None:
    """A module the engine parsed is summarised from its tree (`summarize_parsed`), with the
    same imports in the same order, exports, definitions and words as `summarize`."""
    text = source.read_text(encoding="utf-8") if isinstance(source, Path) else textwrap.dedent(source)
    expected = summarize(text.encode(), "m.py")
    assert expected is not None
    assert summarize_parsed(cst.parse_module(text), text, "m.py") == expected


def test_facts_live_as_long_as_the_project_holds_the_module(tmp_path: Path) -> None:
    from loopcheck.lint.syntax import module_walk

    path = write(tmp_path / "m.py", "x = 1\n")
    project = Project([tmp_path])
    parsed = project.parse(path)
    assert parsed is not None and project.parse(path) is parsed
    walk = module_walk(parsed.module)
    for n in range(40):  # many unpinned modules come and go
        import libcst as cst

        module_walk(cst.parse_module(f"y = {n}\n"))
    assert module_walk(parsed.module) is walk
    project.close()
    assert memo.known(parsed.module, "walk") is None


def test_evidence_from_another_file_is_cited_with_its_file(tmp_path: Path) -> None:
    write(tmp_path / "setup.py", "")
    steps = write(tmp_path / "steps.py", """
        def train_step(model, optimizer, x, y):
            loss = model(x, y)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
    """)
    write(tmp_path / "train.py", """
        import torch
        from steps import train_step

        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                train_step(model, optimizer, x, y)
    """)
    found = [f for f in engine.check_file(steps).findings if f.code == "LC102"]
    assert len(found) == 1
    assert "(line 5)" in found[0].message and "\x1f" not in found[0].message


def test_a_citation_names_the_file_when_it_is_another_one() -> None:
    from loopcheck.lint.rules._display import at, cite

    class Place:
        def __init__(self, path: str, line: int) -> None:
            self.path, self.line = path, line

    message = f"`scheduler.step()` ({at(Place('/p/train.py', 34))}) runs before `optimizer.step()` ({at(Place('/p/engine.py', 12))})"
    assert cite(message, "/p/train.py") == "`scheduler.step()` (line 34) runs before `optimizer.step()` (engine.py:12)"
    assert cite(message, "/p/engine.py") == "`scheduler.step()` (train.py:34) runs before `optimizer.step()` (line 12)"


def test_what_a_module_reaches_through_import_cycles(tmp_path: Path) -> None:
    """`reach_mentions` settles a whole import cycle at once: every module of the cycle and every
    importer of it reaches the one that mentions the word; a module beside it does not."""
    from loopcheck.lint.project import Project

    files = {
        "a.py": "import b\n", "b.py": "import c\n", "c.py": "import a\nx = 'softmax'\n",
        "d.py": "import a\n", "e.py": "import f\n", "f.py": "import e\n", "g.py": "y = 1\n",
        "h.py": "import g\nimport d\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    project = Project([tmp_path])
    reaches = {n: project.reach_mentions(tmp_path / n, ("softmax",)) for n in sorted(files)}
    assert reaches == {"a.py": True, "b.py": True, "c.py": True, "d.py": True, "e.py": False, "f.py": False,
                       "g.py": False, "h.py": True}
    again = Project([tmp_path])  # asked in another order, the same answers
    assert {n: again.reach_mentions(tmp_path / n, ("softmax",)) for n in reversed(sorted(files))} == reaches


def test_an_edited_buffer_settles_reach_again_only_when_its_imports_or_words_change(tmp_path: Path, monkeypatch) -> None:
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    train = write(tmp_path / "train.py", "from helpers import fit\n\nfit()\n")
    helpers = write(tmp_path / "helpers.py", "def fit():\n    return 1\n")
    project = Project([tmp_path])
    settled: list[str] = []
    original = Project._settle
    monkeypatch.setattr(Project, "_settle", lambda self, start, *a: (settled.append(start), original(self, start, *a))[1])
    assert project.reach_mentions(train, ("torch",)) is False
    project.overlay(helpers, "def fit():\n    return 2  # a body edit\n")
    assert project.reach_mentions(train, ("torch",)) is False
    assert len(settled) == 1  # the answer was kept
    project.overlay(helpers, "import torch\n\ndef fit():\n    return torch.zeros(1)\n")
    assert project.reach_mentions(train, ("torch",)) is True
    assert len(settled) == 2
    project.overlay(helpers, None)  # back to the file on disk
    assert project.reach_mentions(train, ("torch",)) is False


def test_a_kept_analysis_stays_while_nothing_it_read_changes(tmp_path: Path, monkeypatch) -> None:
    """An editor buffer changes one module: the analyses of the files importing it are kept
    unless they read it (the step their loop calls lives there)."""
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    steps = write(tmp_path / "steps.py", STEP_MODULE)
    settings = write(tmp_path / "settings.py", "EPOCHS = 3\n")
    write(tmp_path / "driver.py", """\
        import torch
        from torch import nn

        from settings import EPOCHS
        from steps import train_step


        def main(loader):
            model = nn.Linear(8, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(EPOCHS):
                for batch in loader:
                    train_step(model, batch, optimizer, nn.CrossEntropyLoss())
        """)
    project = Project([tmp_path])
    analysed: list[str] = []
    original = engine._analyse
    monkeypatch.setattr(engine, "_analyse", lambda text, path, *a, **k: (analysed.append(Path(path).name), original(text, path, *a, **k))[1])

    def codes_in_steps() -> list[str]:  # as the language server checks a buffer
        text = project.read(steps).decode()
        return [f.code for f in engine.check_source(text, str(steps), project=project, on_disk=True).findings]

    assert "LC102" in codes_in_steps()  # made by driver.py's model, located in steps.py
    assert sorted(analysed) == ["driver.py", "steps.py"]
    analysed.clear()
    project.overlay(settings, "EPOCHS = 5\n")
    assert "LC102" in codes_in_steps()
    assert analysed == []  # neither analysis read settings.py
    project.overlay(steps, steps.read_text().replace(
        "    optimizer.step()\n    loss.backward()\n", "    loss.backward()\n    optimizer.step()\n"))
    assert "LC102" not in codes_in_steps()  # driver.py's kept analysis read steps.py: made again
    assert sorted(analysed) == ["driver.py", "steps.py"]


def test_a_run_reads_each_files_stamp_once_and_the_next_run_afresh(tmp_path: Path) -> None:
    from loopcheck.lint.project import steady_files

    path = write(tmp_path / "m.py", "x = 1\n")
    project = Project([tmp_path])
    with steady_files():
        first = project.stamp(path)
        path.write_text("x = 22\n", encoding="utf-8")
        with steady_files():  # part of the same run
            assert project.stamp(str(path)) == project.stamp(path) == first
    assert project.stamp(path) != first
    with steady_files():
        assert project.stamp(path) == (len("x = 22\n"), os.stat(path).st_mtime_ns)


def test_a_run_lists_each_folder_once_to_resolve_imports_and_the_next_run_afresh(tmp_path: Path, monkeypatch) -> None:
    """Within a run the candidate files of an import are looked up in their folder's listing,
    read once; a module created after the run is found by the next one, an import of a folder
    that is not there is witnessed by that folder."""
    from loopcheck.lint import project as project_mod
    from loopcheck.lint.project import steady_files

    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    train = write(tmp_path / "train.py", "import helpers\nimport configs.base\nfrom pkg import mod\n")
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "mod.py", "X = 1\n")
    listed = calls_to(monkeypatch, project_mod, "_listing")
    project = Project([tmp_path])
    with steady_files():
        assert sorted(p.name for p in project.imports_of(train)) == ["__init__.py", "mod.py"]
        assert project.resolve(str(train), "helpers") is None
        absent = project._absent_imports(train)
    assert len(listed) == len(set(listed))
    assert str(tmp_path / "helpers.py") in absent
    assert str(tmp_path / "configs") in absent  # the first folder missing on the way
    write(tmp_path / "helpers.py", "def fit():\n    return 1\n")
    project.refresh()
    with steady_files():
        assert project.resolve(str(train), "helpers") == tmp_path.resolve() / "helpers.py"


def test_a_reach_question_asked_again_or_outside_an_analysis_resolves_nothing_more(tmp_path: Path, monkeypatch) -> None:
    """The files a reach answer rests on are worked out for the analysis that records them, once:
    checking a kept analysis (`answer`) or asking again leaves the reached modules' imports alone."""
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    train = write(tmp_path / "train.py", "from helpers import fit\n\nfit()\n")
    write(tmp_path / "helpers.py", "from losses import ce\n\ndef fit():\n    return ce()\n")
    write(tmp_path / "losses.py", "import torch\n\ndef ce():\n    return torch.softmax\n")
    project = Project([tmp_path])
    asked = calls_to(monkeypatch, Project, "_absent_imports")
    with project.consulting() as reads:
        assert project.reach_mentions(train, ("softmax",)) is True
        assert sorted(Path(p).name for p in asked) == ["helpers.py", "losses.py", "train.py"]
        assert project.reach_mentions(train, ("softmax",)) is True
    assert len(asked) == 3
    assert {Path(p).name for p in reads.sources} >= {"train.py", "helpers.py", "losses.py"}
    question = next(q for q in reads.facts if q[0] == "reach")
    assert project.answer(*question) is True
    assert len(asked) == 3


def test_files_mentioning_a_word_split_into_parts_only_for_an_analysis_that_records_them(tmp_path: Path, monkeypatch) -> None:
    """What the project saves is derived from every file mentioning `save`; checking a kept
    analysis asks for it again (`answer`), which must not work out every part of those files
    for reads nobody keeps. An analysis asking itself depends on every part of each."""
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    write(tmp_path / "ckpt.py", "import torch\n\ndef keep(state, path):\n    torch.save(state, path)\n")
    write(tmp_path / "train.py", "from ckpt import keep\n\nkeep({'w': 1}, 'last.pt')  # save\n")
    project = Project([tmp_path])
    split = calls_to(monkeypatch, Project, "_parts_of")
    digest = project.answer("derived", str(tmp_path.resolve()), "saved_files")
    assert digest is not None and split == []
    with project.consulting() as reads:
        assert sorted(Path(f).name for f in project.files_mentioning("save")) == ["ckpt.py", "train.py"]
    assert sorted({Path(p).name for p in split}) == ["ckpt.py", "train.py"]
    assert {Path(q[1]).name for q in reads.facts if q[0] == "parts"} == {"ckpt.py", "train.py"}


def test_a_project_kept_across_checks_sees_a_module_saved_in_between(tmp_path: Path) -> None:
    """As the language server and `--watch` keep it: a file saved on disk between two checks is
    read again in the second."""
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    steps = write(tmp_path / "steps.py", STEP_MODULE)
    write(tmp_path / "driver.py", """\
        import torch
        from torch import nn

        from steps import train_step


        def main(loader):
            model = nn.Linear(8, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for batch in loader:
                    train_step(model, batch, optimizer, nn.CrossEntropyLoss())
        """)
    project = Project([tmp_path])

    def codes_in_steps() -> list[str]:
        return [f.code for f in engine.check_file(steps, project=project).findings]

    assert "LC102" in codes_in_steps()  # made by driver.py's model, located in steps.py
    steps.write_text(steps.read_text().replace(
        "    optimizer.step()\n    loss.backward()\n", "    # the step uses this batch's gradients\n"
        "    loss.backward()\n    optimizer.step()\n"), encoding="utf-8")
    assert "LC102" not in codes_in_steps()


@pytest.mark.parametrize("rebound", [False, True])
def test_a_flag_of_a_followed_module_is_folded_unless_a_function_declares_it_global(tmp_path: Path, rebound: bool) -> None:
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    enable = "\n\ndef enable():\n    global ZERO_EACH_MICRO_BATCH\n    ZERO_EACH_MICRO_BATCH = True\n" if rebound else ""
    write(tmp_path / "steps.py", "ZERO_EACH_MICRO_BATCH = False\n" + enable + textwrap.dedent("""


        def step(model, x, optimizer):
            model(x).sum().backward()
            if ZERO_EACH_MICRO_BATCH:
                optimizer.zero_grad()
            optimizer.step()
            optimizer.zero_grad()
        """))
    driver = write(tmp_path / "driver.py", """\
        import torch

        from steps import step


        def main(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                step(model, x, optimizer)
        """)
    project = Project([tmp_path])
    assert driver in [Path(p) for p in project.dependents(tmp_path / "steps.py")]
    codes = {f.code for f in engine.check_file(tmp_path / "steps.py", project=project).findings}
    assert ("LC102" in codes) is rebound  # folded away, here and in driver.py's loop, while nothing can turn it on


def test_a_module_read_as_a_whole_depends_on_its_parts_not_on_comments_after_them(tmp_path: Path) -> None:
    """An analysis that reads every part of a followed module (a search of all its call sites)
    records one question, the digest of all parts: a comment appended leaves the answer as it
    was, an edit to a function's body or a new function changes it."""
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    helpers = write(tmp_path / "helpers.py", """\
        def scale(lr, factor):
            return lr * factor


        def warmup(step):
            return scale(0.1, min(1.0, step / 100))
        """)
    original = helpers.read_text()
    project = Project([tmp_path])
    parsed = project.parse(helpers, whole=False)
    with project.consulting() as reads:
        project.part_reader(parsed)("*")
    assert reads.files == {}  # not the whole text
    assert list(reads.facts) == [("parts", os.path.abspath(helpers), None)]
    sources = {p: project.stamp(Path(p)) for p in reads.sources}

    def still() -> bool:
        return project.still({}, reads.facts, sources)

    helpers.write_text(original + "\n# kept for the old configs\n")
    os.utime(helpers, ns=(1, 1))  # a new stamp even within the file system's time resolution
    assert still()
    helpers.write_text(original.replace("min(1.0, step / 100)", "min(1.0, step / 200)"))
    os.utime(helpers, ns=(2, 2))
    assert not still()
    helpers.write_text(original + "\n\ndef cooldown(step):\n    return 0.0\n")
    os.utime(helpers, ns=(3, 3))
    assert not still()


def test_each_method_of_a_class_is_a_part_and_the_class_keeps_its_own_lines() -> None:
    """`module_parts`: a class's part is its own lines (methods replaced by their name); each
    method is `Class.method`. An edit inside one method changes that method's part only, not
    those it moves down (a part is its text, wherever it sits); a class attribute edit changes
    the class's part."""
    from loopcheck.lint.summary import module_parts

    source = textwrap.dedent('''\
        class Recorder:
            """Keeps the recent losses."""
            window = 10

            def add(self, loss):
                self.losses.append(loss)

            @property
            def mean(self):
                return sum(self.losses) / len(self.losses)


        def train(recorder):
            recorder.add(1.0)
        ''')
    parts = module_parts(source)
    assert parts is not None and {"Recorder", "Recorder.add", "Recorder.mean", "train"} <= set(parts)

    def changed(edited: str) -> list[str]:
        after = module_parts(edited)
        assert after is not None
        return sorted(k for k in set(parts) | set(after) if parts.get(k) != after.get(k))

    assert changed(source.replace("/ len(self.losses)", "/ max(1, len(self.losses))")) == ["Recorder.mean"]
    assert changed(source.replace("self.losses.append(loss)", "self.losses.append(float(loss))")) == ["Recorder.add"]
    assert changed(source.replace("self.losses.append(loss)\n", "self.losses.append(loss)\n        del self.losses[:-10]\n")) == [
        "Recorder.add"]  # the method and the function below it moved down, unchanged
    assert changed(source.replace("window = 10", "window = 20")) == ["Recorder"]
    assert changed(source + "\n\n# the end\n") == []
    assert changed("# a header\n\n" + source) == []
    assert changed(source.replace("    def add", "    def record")) == ["Recorder", "Recorder.add", "Recorder.record"]


def test_the_parts_holding_calls_of_a_name_are_named_as_module_parts_names_them() -> None:
    """`calling_parts`: the function, method (`Class.method`), class (its own lines: attributes,
    decorators, bases, a method sharing the class's line) or module-level part holding a call."""
    from loopcheck.lint.summary import MODULE_PART, calling_parts, module_parts

    source = textwrap.dedent('''\
        @register(build())
        class Recorder(Base):
            default = build()

            def add(self, loss):
                self.losses.append(build(loss))

            def mean(self):
                return self.recorder.build()


        def train(recorder):
            recorder.add(1.0)
            return [build(x) for x in range(3)]


        run = build()
        ''')
    parts = module_parts(source)
    found = calling_parts(source, "name", "build")
    assert found == sorted(["Recorder", "Recorder.add", MODULE_PART, "train"])
    assert set(found) <= set(parts)
    assert calling_parts(source, "attr", "build") == ["Recorder.mean"]
    assert calling_parts(source, "name", "missing") == []
    assert calling_parts("def broken(:\n", "name", "build") is None


def test_a_word_looked_for_file_by_file_is_found_where_the_index_of_every_word_finds_it(tmp_path: Path, monkeypatch) -> None:
    texts = {
        "a.py": "save(x)\nsaver = 1\n_save = 2\n",
        "b.py": "12save 3\nx12save\n# save_state\n",
        "c.py": "obj.save\nsave\n",
        "d.py": "presave\nsave_\n",
        "e.py": "sävе save2\n",
    }
    write(tmp_path / "pyproject.toml", "")
    for name, text in texts.items():
        write(tmp_path / name, text)
    words = ["save", "saver", "_save", "x12save", "save_state", "obj", "save_", "presave", "save2", "sävе", "1x", ""]
    scanned = {word: Project([tmp_path])._holding(word) for word in words}  # each the first word asked
    monkeypatch.setattr(project_module, "_SCANNED_WORDS", 0)  # every word of every file indexed at once
    indexed = Project([tmp_path])
    assert scanned == {word: indexed._holding(word) for word in words}
    assert indexed._words is not None and scanned["save"] == [str(tmp_path.resolve() / n) for n in ("a.py", "b.py", "c.py")]
