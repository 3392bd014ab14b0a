"""The real-code benchmark's tooling on tiny synthetic inputs: scorer, verdict matching, rebuild.

No mirror of a public repository is needed: the scorer runs on hand-written findings and verdict
files, and rebuild runs on a throw-away git repository made here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "realworld"
sys.path.insert(0, str(BENCH))

import benchset  # noqa: E402
import rebuild  # noqa: E402
import run  # noqa: E402
import score  # noqa: E402

HEADER = "\t".join(score.COLUMNS)


def finding(path: str, line: int, code: str, severity: str, function: str = "train") -> dict:
    return {"repo": "acme/trainer", "path": path, "line": line, "code": code, "severity": severity,
            "function": function, "message": f"{code} here"}


@pytest.fixture
def findings_file(tmp_path: Path) -> Path:
    data = {"version": 1, "repos": {"acme/trainer": {
        "lines": 2000, "files": 3, "errors": [],
        "findings": [
            finding("train.py", 40, "LC102", "error"),
            finding("train.py", 88, "LC301", "error", "evaluate"),
            finding("train.py", 120, "LC105", "warning"),
            finding("train.py", 130, "LC105", "warning"),
            finding("engine.py", 12, "LC302", "warning", "Net.forward"),
            finding("engine.py", 50, "LC203", "warning", "fit"),
            finding("engine.py", 70, "LC405", "info", "<module>"),
        ],
    }}}
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(data))
    return path


def write_verdicts(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "verdicts.tsv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


ROWS = [
    "acme/trainer\ttrain.py\t40\tLC102\ttrain\ttp\treset sits between backward and step",
    "acme/trainer\ttrain.py\t88\tLC301\tevaluate\tfp\teval() is called by the caller",
    "acme/trainer\ttrain.py\t120\tLC105\ttrain\ttp\tloss summed over micro-batches unscaled",
    "acme/trainer\ttrain.py\t130\tLC105\ttrain\tdebatable\tsum reduction may be intended",
    # the finding moved from line 10 to 12 inside the same method: still matched
    "acme/trainer\tengine.py\t10\tLC302\tNet.forward\tfp\tblock loop inside forward is not evaluation",
    # no finding any more: a gone true positive
    "acme/trainer\tengine.py\t99\tLC201\tfit\ttp\tscheduler stepped before the optimizer",
]


def test_precision_per_severity_and_code(tmp_path: Path, findings_file: Path) -> None:
    result = score.score(score.read_findings(findings_file), score.read_verdicts(write_verdicts(tmp_path, ROWS)))

    assert result["lines"] == 2000
    err, warn, info = (result["severity"][s] for s in ("error", "warning", "info"))
    assert (err["tp"], err["fp"], err["precision"]) == (1, 1, 0.5)
    assert (warn["tp"], warn["fp"], warn["debatable"], warn["unjudged"]) == (1, 1, 1, 1)
    assert warn["precision"] == 0.5
    assert info["findings"] == 1 and info["precision"] is None
    assert err["per_1k_lines"] == pytest.approx(1.0)
    assert warn["per_1k_lines"] == pytest.approx(2.0)
    assert result["code"]["LC105"]["precision"] == 1.0
    assert result["code"]["LC105"]["debatable"] == 1
    assert result["code"]["LC302"]["fp"] == 1
    # only the warning nobody judged is listed; info findings need no verdict
    assert [(f["path"], f["line"], f["code"]) for f in result["unjudged"]] == [("engine.py", 50, "LC203")]
    assert result["gone"]["count"] == 1
    assert [v["code"] for v in result["gone"]["true_positives"]] == ["LC201"]


def test_a_moved_finding_takes_the_nearest_verdict_of_its_function() -> None:
    verdicts = [score.Verdict("r", "a.py", line, "LC105", "fit", verdict, "why", 2)
                for line, verdict in ((100, "tp"), (140, "fp"))]
    moved = [{"repo": "r", "path": "a.py", "line": line, "code": "LC105", "function": "fit"}
             for line in (143, 103)]
    chosen, stale = score.match(moved, verdicts)
    assert [v.verdict for v in chosen] == ["fp", "tp"]
    assert stale == []
    # another function does not take the verdict
    elsewhere = [{"repo": "r", "path": "a.py", "line": 143, "code": "LC105", "function": "evaluate"}]
    assert score.match(elsewhere, verdicts)[0] == [None]


def test_report_exits_zero_and_prints_json(tmp_path: Path, findings_file: Path, capsys) -> None:
    verdicts = write_verdicts(tmp_path, ROWS)
    assert score.main(["--findings", str(findings_file), "--verdicts", str(verdicts)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^error\s+2\s+1\.00\s+1\s+1\s+0\s+0\s+50\.0%$", text, re.M)
    assert "unjudged error and warning findings: 1" in text
    assert "lost true positive: acme/trainer engine.py:99 LC201" in text

    assert score.main(["--findings", str(findings_file), "--verdicts", str(verdicts), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["severity"]["warning"]["debatable"] == 1


@pytest.mark.parametrize("row, said", [
    ("acme/trainer\ttrain.py\t40\tLC102\ttrain\tmaybe\twhy", "verdict 'maybe'"),
    ("acme/trainer\ttrain.py\t40\tLC102\ttrain\ttp", "6 columns"),
    ("acme/trainer\ttrain.py\tforty\tLC102\ttrain\ttp\twhy", "line 'forty'"),
    ("acme/trainer\ttrain.py\t40\tLC102\ttrain\ttp\t ", "one-line reason"),
])
def test_a_bad_verdict_row_is_named_with_its_line(tmp_path: Path, findings_file: Path, capsys,
                                                  row: str, said: str) -> None:
    verdicts = write_verdicts(tmp_path, [ROWS[0], row])
    assert score.main(["--findings", str(findings_file), "--verdicts", str(verdicts)]) == 2
    err = capsys.readouterr().err
    assert f"verdicts.tsv:3: " in err and said in err


def test_missing_findings_say_how_to_make_them(tmp_path: Path, capsys) -> None:
    verdicts = write_verdicts(tmp_path, ROWS)
    assert score.main(["--findings", str(tmp_path / "nope.json"), "--verdicts", str(verdicts)]) == 2
    assert "run benchmarks/realworld/run.py first" in capsys.readouterr().err


def test_the_shipped_lists_are_well_formed() -> None:
    repos = benchset.load_repos()
    assert len(repos) >= 30
    assert len({r.name for r in repos}) == len(repos)
    assert all(re.fullmatch(r"[0-9a-f]{40}", r.commit) for r in repos)
    verdicts = score.read_verdicts(benchset.VERDICTS_FILE)
    assert {v.repo for v in verdicts} <= {r.name for r in repos}
    keys = [(v.repo, v.path, v.line, v.code) for v in verdicts]
    assert len(keys) == len(set(keys)), "one verdict per finding"


def test_enclosing_function_names_the_innermost_scope() -> None:
    source = "import os\n\nclass Trainer:\n    @staticmethod\n    def fit(x):\n        def inner():\n            return x\n        return inner\n"
    scopes = run.scopes_of(source)
    assert run.enclosing(scopes, 1) == "<module>"
    assert run.enclosing(scopes, 4) == "Trainer.fit"
    assert run.enclosing(scopes, 7) == "Trainer.fit.inner"
    assert run.scopes_of("print 'python two'\n") == []


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
                               "HOME": str(cwd), "PATH": "/usr/bin:/bin"}).stdout.strip()


def test_rebuild_writes_only_python_files_of_the_listed_paths(tmp_path: Path, capsys) -> None:
    work = tmp_path / "work"
    for rel, text in {"examples/train.py": "x = 1\ny = 2\n", "examples/data.csv": "a,b\n",
                      "examples/tests/test_it.py": "pass\n", "lib/core.py": "pass\n",
                      "setup.py": "from setuptools import setup\nsetup(install_requires=['torch>=2.1'])\n"}.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git("init", "-q", cwd=work)
    _git("add", ".", cwd=work)
    _git("commit", "-qm", "one", cwd=work)
    commit = _git("rev-parse", "HEAD", cwd=work)
    mirrors = tmp_path / "mirrors"
    _git("clone", "-q", "--bare", str(work), str(mirrors / "acme+trainer" / "repo"), cwd=tmp_path)
    listing = tmp_path / "repos.toml"
    listing.write_text(f'[defaults]\nexclude = ["examples/tests/"]\n\n'
                       f'[[repo]]\nname = "acme/trainer"\ncommit = "{commit}"\npaths = ["examples"]\n\n'
                       f'[[repo]]\nname = "acme/absent"\ncommit = "{commit}"\n')
    out = tmp_path / "scratch"

    code = rebuild.main([str(out), "--mirrors", str(mirrors), "--repos", str(listing)])

    assert code == 1  # one mirror is missing
    built = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    # the root marker of a clone, and the root setup.py: it declares the torch range
    assert built == ["acme+trainer/examples/train.py", "acme+trainer/setup.cfg", "acme+trainer/setup.py"]
    captured = capsys.readouterr()
    assert "2 files       4 lines" in captured.out  # (setup.py is linted too)
    assert "MISSING acme/absent" in captured.err
    assert "git clone --bare https://github.com/acme/absent.git" in captured.err


def test_collect_keys_findings_by_repository_path_and_function(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "loop.py").write_text(
        "def fit(model, loader, opt):\n    for x in loader:\n        model(x).backward()\n        opt.step()\n")
    report = {"findings": [{"code": "LC101", "severity": "error", "path": "./pkg/loop.py", "line": 4,
                            "message": "never reset"}],
              "errors": [{"path": "./pkg/old.py", "line": 1, "message": "Python 2"}]}

    record = run.collect("acme/trainer", tmp_path, report)

    assert record["lines"] == 4 and record["files"] == 1
    assert record["findings"] == [{"repo": "acme/trainer", "path": "pkg/loop.py", "line": 4, "code": "LC101",
                                   "severity": "error", "function": "fit", "message": "never reset"}]
    assert record["errors"][0]["path"] == "pkg/old.py"
