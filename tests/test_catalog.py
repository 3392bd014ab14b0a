"""The rule catalogue: every page's front block is complete and the generated index is current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loopcheck import catalog
from loopcheck.findings import Severity

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT.parent / "shared" / "DESIGN.md"


def test_every_page_parses_and_is_named_after_its_code():
    pages = catalog.catalog()
    assert len(pages) >= 51
    for code, page in pages.items():
        assert page.path.stem == code
        assert re.fullmatch(r"L[CP]\d{3}", code)
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", page.name), page.name
        assert isinstance(page.severity, Severity)
        assert page.fix in {"safe", "unsafe", "none"}
        assert page.summary


def test_names_are_unique():
    names = [p.name for p in catalog.catalog().values()]
    assert len(names) == len(set(names))


@pytest.mark.skipif(not DESIGN.exists(), reason="design document not beside the checkout")
def test_catalogue_covers_every_code_of_the_design_with_its_name_and_severity():
    rows = re.findall(r"^\| (L[CP]\d{3}) \| ([\w-]+) \|(?: (\w+) \|)?", DESIGN.read_text(), re.M)
    assert rows
    for code, name, severity in rows:
        page = catalog.page(code)
        assert page.name == name
        if severity:
            assert page.severity.value == severity


def test_rule_index_is_generated_from_the_pages():
    index = (ROOT / "rules" / "README.md").read_text(encoding="utf-8")
    assert index == catalog.index_markdown(), "regenerate: python -m loopcheck.catalog > rules/README.md"


def test_unknown_code_is_a_clear_key_error():
    with pytest.raises(KeyError, match="unknown rule code"):
        catalog.page("LC999")


def test_page_sections_and_examples_are_extracted(tmp_path, monkeypatch):
    (tmp_path / "LC999.md").write_text(
        "---\ncode: LC999\nname: demo-rule\nseverity: warning\nsince: 0.1.0\nsummary: s\n---\n\n"
        "# LC999\n\n## Bad\n```python\nbad()\n```\n\n## Good\n```python\ngood()\n```\n"
    )
    monkeypatch.setattr(catalog, "pages_dir", lambda: tmp_path)
    catalog.catalog.cache_clear()
    try:
        page = catalog.page("LC999")
        assert page.example("Bad") == "bad()\n"
        assert page.example("Good") == "good()\n"
        assert page.section("Missing") == ""
    finally:
        catalog.catalog.cache_clear()
