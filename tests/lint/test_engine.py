"""The engine: discovery, per-file checking, parallel runs, dedupe, suppressions, the public API."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from loopcheck.lint.api import CodeFilter, lint_paths, lint_source
from loopcheck.lint.engine import LintError, check_file, check_files, check_paths, check_source, discover

BUGGY = textwrap.dedent("""
    import torch

    def train(model, loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = model(x, y)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
""")


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_check_source_reports_sorted_findings_with_positions() -> None:
    result = check_source(BUGGY, "train.py")
    assert result.errors == []
    assert [(f.code, f.path, f.line, f.column, f.end_line, f.end_column) for f in result.findings] == [
        ("LC102", "train.py", 9, 9, 9, 30),
    ]
    assert result.findings[0].name == "zero-grad-between-backward-and-step"


def test_a_finding_reached_twice_is_reported_once() -> None:
    source = textwrap.dedent("""
        import torch

        def step(model, optimizer, x):
            model(x).sum().backward()
            optimizer.zero_grad()
            optimizer.step()

        def train(model, loader, val_loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                step(model, optimizer, x)
            for x in val_loader:
                step(model, optimizer, x)
    """)
    findings = check_source(source, "t.py").findings
    assert [(f.code, f.line) for f in findings] == [("LC102", 6)]


def test_enabled_selects_rules() -> None:
    assert check_source(BUGGY, "t.py", enabled=lambda code: code != "LC102").findings == []
    assert [f.code for f in lint_source(BUGGY, select=["LC1"])] == ["LC102"]
    assert lint_source(BUGGY, select="LC2,LC3") == []
    assert lint_source(BUGGY, ignore=["LC10"]) == []
    assert CodeFilter(["lc1"], ["LC105"])("LC101") and not CodeFilter(["LC1"], ["LC105"])("LC105")


def test_suppression_comments_are_applied() -> None:
    source = BUGGY.replace("optimizer.zero_grad()", "optimizer.zero_grad()  # noqa: LC102")
    result = check_source(source, "t.py")
    assert result.findings == [] and len(result.suppressions_used) == 1
    other = BUGGY.replace("optimizer.zero_grad()", "optimizer.zero_grad()  # loopcheck: ignore[LC101]")
    assert [f.code for f in check_source(other, "t.py").findings] == ["LC102"]


def test_lint_source_raises_a_clear_error_on_bad_source() -> None:
    with pytest.raises(ValueError, match=r"<string>:2: syntax error"):
        lint_source("import torch\ndef broken(:\n")


def test_discover_skips_tool_folders_and_honours_excludes(tmp_path: Path) -> None:
    for rel in ["a.py", "pkg/b.py", "pkg/sub/c.py", ".git/d.py", ".venv/e.py", "venv/f.py", "build/g.py",
                "pkg/__pycache__/h.py", ".hidden/i.py", "node_modules/j.py", "gen/k.py", "notes.txt"]:
        write(tmp_path, rel, "x = 1\n")
    files, errors = discover([tmp_path], exclude=["gen", "*/sub/*"])
    assert errors == []
    assert sorted(f.relative_to(tmp_path).as_posix() for f in files) == ["a.py", "pkg/b.py"]
    named, _ = discover([tmp_path / "gen" / "k.py"], exclude=["gen"])
    assert named == [tmp_path / "gen" / "k.py"]


def test_discover_reports_missing_paths_and_empty_folders(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    files, errors = discover([tmp_path / "nope.py", tmp_path / "empty"])
    assert files == []
    assert [(Path(e.path).name, e.message) for e in errors] == [
        ("nope.py", "no such file or directory"), ("empty", "no Python files found"),
    ]
    assert errors[0].to_dict() == {"path": str(tmp_path / "nope.py"), "line": None, "message": "no such file or directory"}
    assert LintError("a.py", 3, "boom", code="LC101").to_dict()["code"] == "LC101"


def test_files_that_cannot_matter_are_skipped_unless_they_import_local_code(tmp_path: Path) -> None:
    write(tmp_path, "util.py", "def add(a, b):\n    return a + b\n")
    write(tmp_path, "engine.py", BUGGY)
    write(tmp_path, "main.py", "from engine import train\n\nif __name__ == '__main__':\n    train(None, [])\n")
    report = check_paths([tmp_path], jobs=1)
    assert (report.files_checked, report.files_skipped) == (2, 1)
    main = check_file(tmp_path / "main.py")
    assert not main.skipped
    assert main.findings == []  # the defect is reported in the file where it is
    found = check_file(tmp_path / "engine.py").findings
    assert [(Path(f.path).name, f.line, f.code) for f in found] == [("engine.py", 9, "LC102")]


def test_only_files_about_pytorch_or_reaching_it_are_parsed(tmp_path: Path) -> None:
    # words like `load`, `save` or `loss` alone say nothing: a JSON helper and its caller are
    # skipped; a duck-typed step that imports nothing says `backward(` itself; a file that
    # Python cannot read is parsed, so that the error is reported
    write(tmp_path, "json_utils.py", "import json\n\ndef load(path):\n    return json.load(open(path))\n")
    write(tmp_path, "cli.py", "from json_utils import load\n\nconfig = load('run.json')\n")
    write(tmp_path, "duck.py", (
        "def fit(model, opt, batches):\n"
        "    for x, y in batches:\n"
        "        loss = model(x, y)\n"
        "        loss.backward()\n"
        "        opt.step()\n"
    ))
    write(tmp_path, "models.py", "import torch\n\nclass Net(torch.nn.Module):\n    pass\n")
    write(tmp_path, "build.py", "from models import Net\n\nnet = Net()\n")
    write(tmp_path, "broken.py", "def f(:\n    return 1\n")
    report = check_paths([tmp_path], jobs=1)
    skipped = {Path(r).name for r in ("json_utils.py", "cli.py")}
    assert (report.files_checked, report.files_skipped) == (4, len(skipped))
    assert check_file(tmp_path / "cli.py").skipped and check_file(tmp_path / "json_utils.py").skipped
    assert not check_file(tmp_path / "build.py").skipped  # it reaches a module that imports torch
    found = check_file(tmp_path / "duck.py").findings
    assert [(f.line, f.code) for f in found] == [(5, "LC101")]
    assert [Path(e.path).name for e in report.errors] == ["broken.py"]


def test_suppression_in_the_file_a_finding_points_into(tmp_path: Path) -> None:
    write(tmp_path, "engine.py", BUGGY.replace("optimizer.zero_grad()", "optimizer.zero_grad()  # noqa: LC102"))
    write(tmp_path, "main.py", "from engine import train\ntrain(None, [])\n")
    assert check_file(tmp_path / "main.py").findings == []
    assert check_file(tmp_path / "engine.py").findings == []


def test_parallel_and_serial_runs_agree(tmp_path: Path) -> None:
    for i in range(10):
        body = BUGGY if i % 2 else BUGGY.replace("loss.backward()\n        optimizer.zero_grad()",
                                                   "optimizer.zero_grad()\n        loss.backward()")
        # each file larger than the one before: the workers take the largest first, the
        # results still come in the files' order
        write(tmp_path, f"train_{i}.py", body + "\n# padding" * i + "\n")
    write(tmp_path, "broken.py", "def broken(:\n")
    serial = check_paths([tmp_path], jobs=1)
    parallel = check_paths([tmp_path], jobs=2)
    assert serial.findings == parallel.findings and serial.errors == parallel.errors
    assert [Path(f.path).name for f in serial.findings] == [f"train_{i}.py" for i in (1, 3, 5, 7, 9)]
    files = sorted(tmp_path.glob("*.py"))
    results = check_files(files, jobs=2)
    assert [r.path for r in results] == [str(f) for f in files]
    for result in results:  # each with its own errors
        assert [Path(e.path).name for e in result.errors] == ([Path(result.path).name] if "broken" in result.path else [])
    report = lint_paths(tmp_path, select=["LC102"], jobs=2)
    assert len(report.findings) == 5 and len(report.errors) == 1 and report.files_checked == 11


def test_paths_reported_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "proj/engine.py", BUGGY)
    write(tmp_path, "proj/main.py", "from engine import train\ntrain(None, [])\n")
    monkeypatch.chdir(tmp_path)
    report = lint_paths(["proj"], jobs=1)
    assert {f.path for f in report.findings} == {"proj/engine.py"}


def test_shared_node_walk_matches_libcst_visiting_order() -> None:
    import libcst as cst

    from loopcheck.lint.rules.base import FileContext

    source = textwrap.dedent("""
        @torch.no_grad()
        def f(a: int = g(1), *, b=h[2:3]) -> T:
            try:
                x = {k(v): [w(z) for z in y if p(z)] for k, v in d.items()}
            except (E1, E2) as e:
                raise Q(e) from e
            return m(x) if c(x) else n(lambda q: r(q))
    """)
    module = cst.parse_module(source)
    ctx = FileContext("f.py", source, module)

    class Calls(cst.CSTVisitor):
        def __init__(self) -> None:
            self.found: list[cst.Call] = []

        def visit_Call(self, node: cst.Call) -> None:
            self.found.append(node)

    visitor = Calls()
    module.visit(visitor)
    assert [id(n) for n in ctx.nodes(cst.Call)] == [id(n) for n in visitor.found]
    assert len(visitor.found) == 11
    first = ctx.nodes(cst.Call)[0]
    assert isinstance(ctx.parent(first), cst.Decorator) and ctx.parent(module) is None


def test_a_rule_runs_only_where_its_required_words_occur(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loopcheck.lint.rules.base import all_rules
    from loopcheck.lint.rules.zero_grad import ZeroGradBetweenBackwardAndStep

    assert all(r.requires == () or all(isinstance(p, str) for p in r.requires) for r in all_rules())
    assert [f.code for f in check_source(BUGGY, "train.py").findings] == ["LC102"]
    monkeypatch.setattr(ZeroGradBetweenBackwardAndStep, "requires", (r"\bno_such_word\b",))
    assert check_source(BUGGY, "train.py").findings == []
    # the word may also sit in a project file whose code the loop model followed
    write(tmp_path, "steps.py", """
        def train_step(model, optimizer, x, y):  # no_such_word
            loss = model(x, y)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
    """)
    main = write(tmp_path, "train.py", """
        import torch
        from steps import train_step

        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                train_step(model, optimizer, x, y)
    """)
    assert check_file(main).findings == []  # reported in steps.py, where the defect is
    found = check_file(tmp_path / "steps.py").findings
    assert [(Path(f.path).name, f.code) for f in found] == [("steps.py", "LC102")]
    monkeypatch.setattr(ZeroGradBetweenBackwardAndStep, "requires", (r"\bstill_absent\b",))
    assert check_file(tmp_path / "steps.py").findings == []


def test_required_words_never_change_the_findings_of_the_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    from loopcheck.lint.rules.base import all_rules

    root = Path(__file__).resolve().parents[2]
    paths = [root / "fixtures", root / "examples"]
    with_filters = lint_paths(paths, jobs=1)
    for rule in all_rules():
        monkeypatch.setattr(rule, "requires", ())
    without = lint_paths(paths, jobs=1)
    assert [f.to_dict() for f in with_filters.findings] == [f.to_dict() for f in without.findings]
    assert with_filters.findings


def test_workers_find_what_one_process_finds_across_modules(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "steps.py").write_text(textwrap.dedent("""\
        def train_step(model, batch, optimizer):
            loss = model(batch).mean()
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
        """))
    for i in range(9):
        write(tmp_path, f"train_{i}.py", textwrap.dedent("""\
            import torch
            from steps import train_step

            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for batch in torch.randn(8, 4).split(2):
                    train_step(model, batch, optimizer)
            """))
    serial = check_paths([tmp_path], jobs=1)
    parallel = check_paths([tmp_path], jobs=2)
    assert serial.findings == parallel.findings
    assert {(Path(f.path).name, f.code) for f in serial.findings} >= {("steps.py", "LC102")}
