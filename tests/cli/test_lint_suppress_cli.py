"""`loopcheck lint` with suppression comments and --warn-unused-suppressions (LC001)."""

from __future__ import annotations

import json

from .conftest import UNSAFE_LOAD, write
from loopcheck.catalog import page


def findings(result) -> list[tuple[str, int]]:
    return [(f["code"], f["line"]) for f in json.loads(result.stdout)["findings"]]


def test_noqa_and_ignore_comments_silence_a_finding(lint, project):
    write(project / "a.py", UNSAFE_LOAD.replace('map_location="cpu")', 'map_location="cpu")  # noqa: LC508'))
    write(project / "b.py", UNSAFE_LOAD.replace('map_location="cpu")', 'map_location="cpu")  # loopcheck: ignore[LC5]'))
    write(project / "c.py", UNSAFE_LOAD.replace('map_location="cpu")', 'map_location="cpu")  # noqa: LC602'))
    write(project / "d.py", "# loopcheck: ignore-file[LC508]\n" + UNSAFE_LOAD)
    result = lint(".", "-f", "json")
    assert result.exit_code == 1
    assert [(f["path"], f["code"]) for f in json.loads(result.stdout)["findings"]] == [("c.py", "LC508")]


def test_a_comment_on_the_last_line_of_a_multi_line_call_counts(lint, project):
    split = UNSAFE_LOAD.replace('torch.load(path, map_location="cpu")', 'torch.load(\n        path,\n        map_location="cpu",\n    )  # noqa: LC508')
    write(project / "a.py", split)
    assert lint("a.py").exit_code == 0


def test_unused_suppressions_are_reported_only_on_request(lint, project):
    source = UNSAFE_LOAD.replace('map_location="cpu")', 'map_location="cpu")  # noqa: LC508, LC602, E501')
    source = source.replace("    return model", "    return model  # loopcheck: ignore[LC201]")
    write(project / "a.py", source)
    assert findings(lint("a.py", "-f", "json")) == []
    result = lint("a.py", "-f", "json", "--warn-unused-suppressions")
    assert result.exit_code == 0  # LC001 is info: below the default fail level
    doc = json.loads(result.stdout)
    assert [(f["code"], f["line"], f["severity"]) for f in doc["findings"]] == [("LC001", 5, "info"), ("LC001", 7, "info")]
    assert doc["findings"][0]["message"].endswith(": no LC602 finding here to silence")
    assert doc["findings"][1]["message"].endswith(": no LC201 finding here to silence")
    # a code that was not checked may be needed under another selection: not reported
    narrowed = lint("a.py", "-f", "json", "--warn-unused-suppressions", "--select", "LC5")
    assert findings(narrowed) == []
    assert findings(lint("a.py", "-f", "json", "--warn-unused-suppressions", "--ignore", "LC001")) == []
    assert findings(lint("a.py", "-f", "json", "--extend-select", "LC001")) == [("LC001", 5), ("LC001", 7)]


def test_the_lc001_page_examples(lint, project):
    lc001 = page("LC001")
    write(project / "bad.py", lc001.example("Bad"))
    write(project / "good.py", lc001.example("Good"))
    bad = lint("bad.py", "-f", "json", "--warn-unused-suppressions")
    assert {code for code, _ in findings(bad)} == {"LC001"}
    good = lint("good.py", "-f", "json", "--warn-unused-suppressions")
    assert "LC001" not in {code for code, _ in findings(good)}
