"""Every probe rule page names the lint rules that find its bug before the run (or says there is none)."""

from __future__ import annotations

from loopcheck.catalog import catalog, codes, runtime_twins


def test_every_lp_page_declares_its_lint_twin():
    for code in codes("LP"):
        p = catalog()[code]
        head = p.path.read_text(encoding="utf-8").split("\n---\n", 1)[0]
        assert "\nlint_twin:" in head, f"rules/{code}.md: add `lint_twin: LCxxx, ...` (or `none`) to the front block"
        for twin in p.lint_twin:
            assert twin.startswith("LC") and twin in catalog(), f"rules/{code}.md: lint_twin {twin} is not an LC rule"
            assert twin in p.text, f"rules/{code}.md: the page should say how {twin} relates to it"


def test_the_link_reads_both_ways():
    assert catalog()["LP403"].lint_twin == ("LC101",)
    assert runtime_twins("LC101") == ["LP403"]
    assert set(runtime_twins("LC601")) == {"LP201", "LP202"}
    assert runtime_twins("LC405") == []


def test_a_probe_finding_names_its_lint_twin():
    from loopcheck.findings import Finding, Severity

    finding = Finding(code="LP301", name="lr-cadence", severity=Severity.ERROR, message="...", step=8)
    assert finding.lint_twin == ("LC201", "LC202", "LC205")
    assert finding.with_(code="LP105").lint_twin == ()
