"""The rule catalogue is documentation and test suite at once.

For every LC page: the sections are there, the Bad example gives the page's code (and no other
error or warning), the Good example gives none of it; and pages and registered rules agree.
"""

from __future__ import annotations

import pytest

from loopcheck.catalog import catalog
from loopcheck.findings import Severity
from loopcheck.lint.api import lint_source
from loopcheck.lint.rules.base import all_rules

SECTIONS = ("What it finds", "Why it matters", "Bad", "Good", "Fix")
LC_PAGES = [code for code in catalog() if code.startswith("LC")]
RULE_PAGES = [code for code in LC_PAGES if not code.startswith("LC0")]


@pytest.mark.parametrize("code", LC_PAGES)
def test_page_has_every_section(code: str) -> None:
    page = catalog()[code]
    missing = [title for title in SECTIONS if not page.section(title)]
    assert not missing, f"rules/{code}.md lacks section(s): {', '.join(missing)}"
    assert page.text.lstrip().startswith(f"# {code} {page.name}"), f"rules/{code}.md: title must be '# {code} {page.name}'"
    assert page.fix in ("safe", "unsafe", "none"), f"rules/{code}.md: fix must be safe, unsafe or none"


@pytest.mark.parametrize("code", RULE_PAGES)
def test_bad_example_gives_exactly_this_code(code: str) -> None:
    page = catalog()[code]
    bad = page.example("Bad")
    assert bad.strip(), f"rules/{code}.md: the Bad section has no python block"
    findings = lint_source(bad, path=f"{code}_bad.py")
    codes = {f.code for f in findings}
    assert code in codes, f"rules/{code}.md: the Bad example gives {sorted(codes) or 'nothing'}, not {code}"
    others = sorted({f.code for f in findings if f.code != code and f.severity >= Severity.WARNING})
    assert not others, f"rules/{code}.md: the Bad example also gives {others}"


@pytest.mark.parametrize("code", RULE_PAGES)
def test_good_example_gives_none_of_this_code(code: str) -> None:
    page = catalog()[code]
    good = page.example("Good")
    assert good.strip(), f"rules/{code}.md: the Good section has no python block"
    findings = [f for f in lint_source(good, path=f"{code}_good.py") if f.code == code]
    assert not findings, f"rules/{code}.md: the Good example gives {code}: {findings[0].message}"


def test_every_registered_rule_has_a_page() -> None:
    registered = {rule.code for rule in all_rules()}
    assert registered - set(catalog()) == set()


@pytest.mark.parametrize("code", RULE_PAGES)
def test_every_rule_page_has_a_registered_rule(code: str) -> None:
    registered = {rule.code for rule in all_rules()}
    assert code in registered, f"rules/{code}.md has no rule class registered for {code}"


def test_rule_metadata_comes_from_the_page() -> None:
    for rule in all_rules():
        page = catalog()[rule.code]
        instance = rule()
        assert (instance.name, instance.severity) == (page.name, page.severity)
