"""Configuration: selection semantics, file discovery, per-file settings and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopcheck.errors import ConfigError
from loopcheck.findings import Severity
from loopcheck.lint import config as cfg
from loopcheck.lint.config import Config, Overrides, Resolver, Selection, parse_selectors


def codes(config: Config, prefix: str = "") -> set[str]:
    return {c for c in config.enabled_codes if c.startswith(prefix)}


def test_default_selection_is_every_lint_rule_but_meta_codes():
    config = Config()
    assert "LC102" in config.enabled_codes and "LC801" in config.enabled_codes
    assert "LC001" not in config.enabled_codes
    assert not any(c.startswith("LP") for c in config.enabled_codes)
    assert config.fail_on is Severity.WARNING


@pytest.mark.parametrize(
    ("layer", "on", "off"),
    [
        (Selection(select=("LC1",)), {"LC101", "LC105"}, {"LC201", "LC602"}),
        (Selection(select=("LC102",), ignore=("LC1",)), {"LC102"}, {"LC101", "LC103"}),
        (Selection(ignore=("LC2",), extend_select=("LC201",)), {"LC201", "LC101"}, {"LC202", "LC205"}),
        (Selection(select=("ALL",), ignore=("LC5",)), {"LC101", "LC801"}, {"LC501", "LC510", "LC001"}),
        (Selection(select=("LC",)), {"LC101"}, {"LC001"}),
        (Selection(extend_select=("LC001",)), {"LC001", "LC102"}, set()),
        (Selection(select=("LC201",), ignore=("LC201",)), set(), {"LC201"}),  # a tie: ignore wins
    ],
)
def test_most_specific_selector_wins_within_a_layer(layer, on, off):
    config = Config(layers=(layer,))
    assert on <= config.enabled_codes
    assert not (off & config.enabled_codes)


def test_command_line_layer_applies_on_top_of_the_file():
    file_layer = Selection(select=("LC1", "LC2"), ignore=("LC205",))
    config = Config(layers=(file_layer,))
    assert codes(config) == codes(config, "LC1") | (codes(config, "LC2") - {"LC205"})
    # --ignore adds to the file's ignores
    ignored = config.with_overrides(Overrides(ignore=("LC1",)))
    assert codes(ignored) == codes(config, "LC2")
    # --select replaces the file's selection, its ignores included
    selected = config.with_overrides(Overrides(select=("LC205", "LC5")))
    assert codes(selected) == {"LC205"} | {c for c in cfg.lint_codes() if c.startswith("LC5")}
    # --extend-select adds to it
    extended = config.with_overrides(Overrides(extend_select=("LC602",)))
    assert "LC602" in extended.enabled_codes and "LC205" not in extended.enabled_codes


def test_selectors_accept_comma_lists_and_reject_unknown_codes():
    assert parse_selectors("lc1, LC201,,ALL", "--select") == ("LC1", "LC201", "ALL")
    with pytest.raises(ConfigError, match=r"--select: unknown rule code 'LC999'"):
        parse_selectors("LC1,LC999", "--select")
    with pytest.raises(ConfigError, match=r"did you mean LC102"):
        parse_selectors(["LC1022"], "select")
    with pytest.raises(ConfigError, match=r"unknown rule code 'LP101'"):
        parse_selectors(["LP101"], "select")  # probe codes are not lint codes


def test_overrides_from_cli_parse_fail_on():
    o = Overrides.from_cli(None, "LC001", "LC5", "info")
    assert o.fail_on is Severity.INFO and o.extend_select == ("LC001",) and o.ignore == ("LC5",)
    with pytest.raises(ConfigError, match=r"--fail-on: expected one of error, warning, info, got 'fatal'"):
        Overrides.from_cli(None, None, None, "fatal")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_configuration_is_found_walking_up_from_each_file(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.loopcheck]\nignore = ["LC5"]\nfail-on = "error"\n')
    write(tmp_path / "experiments" / "pyproject.toml", "[project]\nname = 'x'\n")  # no table: skipped
    write(tmp_path / "legacy" / "loopcheck.toml", 'select = ["LC2"]\n')
    write(tmp_path / "legacy" / "pyproject.toml", '[tool.loopcheck]\nselect = ["LC6"]\n')
    deep = write(tmp_path / "experiments" / "a" / "b" / "train.py", "")
    legacy = write(tmp_path / "legacy" / "train.py", "")
    resolver = Resolver()
    top = resolver.for_path(deep)
    assert top.path == tmp_path / "pyproject.toml"
    assert "LC501" not in top.enabled_codes and "LC102" in top.enabled_codes
    assert top.fail_on is Severity.ERROR
    mine = resolver.for_path(legacy)
    assert mine.path == tmp_path / "legacy" / "loopcheck.toml"  # wins over pyproject.toml
    assert codes(mine) == codes(mine, "LC2") and mine.fail_on is Severity.WARNING


def test_explicit_file_and_isolated_mode(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.loopcheck]\nselect = ["LC3"]\n')
    other = write(tmp_path / "ci" / "strict.toml", 'select = ["LC1"]\nfail-on = "info"\n')
    script = write(tmp_path / "train.py", "")
    fixed = Resolver(config_file=other).for_path(script)
    assert codes(fixed) == codes(fixed, "LC1") and fixed.fail_on is Severity.INFO
    isolated = Resolver(isolated=True).for_path(script)
    assert isolated.path is None and "LC102" in isolated.enabled_codes
    with pytest.raises(ConfigError, match="no such configuration file"):
        Resolver(config_file=tmp_path / "missing.toml")


def test_cli_overrides_win_over_the_file(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.loopcheck]\nselect = ["LC3"]\nfail-on = "error"\n')
    script = write(tmp_path / "train.py", "")
    config = Resolver(Overrides(select=("LC1",), fail_on=Severity.INFO)).for_path(script)
    assert codes(config) == codes(config, "LC1") and config.fail_on is Severity.INFO


def test_per_file_ignores_exclude_and_severity(tmp_path):
    write(
        tmp_path / "loopcheck.toml",
        'exclude = ["tests/data", "*_generated.py", "build"]\n'
        '[per-file-ignores]\n"scripts/*.py" = ["LC5"]\n"notebook_export.py" = ["ALL"]\n'
        '[severity]\nLC702 = "info"\nLC7 = "error"\n',
    )
    config = Resolver().for_path(tmp_path / "train.py")
    assert config.is_enabled("LC501", tmp_path / "train.py")
    assert not config.is_enabled("LC501", tmp_path / "scripts" / "resume.py")
    assert config.is_enabled("LC102", tmp_path / "scripts" / "resume.py")
    assert not config.is_enabled("LC102", tmp_path / "sub" / "notebook_export.py")
    assert config.is_ignored("LC001", tmp_path / "sub" / "notebook_export.py") is False  # ALL skips meta codes
    assert config.is_excluded(tmp_path / "tests" / "data" / "x.py")
    assert config.is_excluded(tmp_path / "pkg" / "model_generated.py")
    assert config.is_excluded(tmp_path / "build" / "lib" / "train.py")
    assert not config.is_excluded(tmp_path / "tests" / "test_data.py")
    assert not config.is_excluded(tmp_path / "rebuild.py")
    # a folder named on the command line is checked even when excluded; what is below it is not
    assert not config.is_excluded(tmp_path / "build" / "lib" / "train.py", below=tmp_path / "build")
    assert config.is_excluded(tmp_path / "src" / "build" / "x.py", below=tmp_path / "src")
    assert not config.is_excluded(tmp_path / "tests" / "data" / "x.py", below=tmp_path / "tests" / "data")
    assert config.is_excluded(tmp_path / "tests" / "data" / "x.py", below=tmp_path / "tests")
    assert config.severity_of("LC702", Severity.WARNING) is Severity.INFO  # the most specific entry
    assert config.severity_of("LC701", Severity.WARNING) is Severity.ERROR
    assert config.severity_of("LC102", Severity.ERROR) is Severity.ERROR


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[tool.loopcheck]\nselct = ["LC1"]\n', r"\[tool.loopcheck\]: unknown key 'selct'; did you mean 'select'\?"),
        ('[tool.loopcheck]\nselect = "LC1"\n', r"\[tool.loopcheck\]: select: expected a list of rule codes, got 'LC1'"),
        ('[tool.loopcheck]\nignore = ["LC9"]\n', r"\[tool.loopcheck\]: ignore: unknown rule code 'LC9'"),
        ('[tool.loopcheck]\nfail-on = "fatal"\n', r"fail-on: expected one of error, warning, info, got 'fatal'"),
        ('[tool.loopcheck.severity]\nLC102 = "critical"\n', r"severity.LC102: expected one of error, warning, info"),
        ('[tool.loopcheck.severity]\nLC999 = "info"\n', r"severity: unknown rule code 'LC999'"),
        ('[tool.loopcheck]\nexclude = "fixtures"\n', r"exclude: expected a list of glob patterns"),
        ('[tool.loopcheck]\nper-file-ignores = ["a"]\n', r"per-file-ignores: expected a table"),
        ('[tool.loopcheck.per-file-ignores]\n"a.py" = "LC1"\n', r"per-file-ignores.'a.py': expected a list"),
        ('[tool.loopcheck\nselect = []\n', r"invalid TOML"),
        ("tool = 3\n[tool]\n", r"invalid TOML"),
    ],
)
def test_bad_configuration_names_the_file_and_the_key(tmp_path, text, message):
    write(tmp_path / "pyproject.toml", text)
    with pytest.raises(ConfigError, match=message) as info:
        Resolver().for_path(write(tmp_path / "train.py", ""))
    assert str(tmp_path / "pyproject.toml") in str(info.value)


def test_fingerprint_follows_what_changes_findings():
    base = Config()
    assert base.fingerprint() == Config().fingerprint()
    assert base.fingerprint() != base.with_overrides(Overrides(ignore=("LC1",))).fingerprint()
    assert base.fingerprint() != Config(severity=(("LC102", Severity.INFO),)).fingerprint()
    # fail-on decides the exit code, not the findings: it does not invalidate cached results
    assert base.fingerprint() == base.with_overrides(Overrides(fail_on=Severity.ERROR)).fingerprint()
