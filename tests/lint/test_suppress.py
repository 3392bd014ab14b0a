"""Suppression comments: line, statement and file scope; used and unused suppressions."""

from __future__ import annotations

import textwrap

from loopcheck.findings import Finding, Severity
from loopcheck.lint.suppress import apply_suppressions, scan, scan_file, unused


def finding(code: str, line: int, end_line: int | None = None, column: int = 5) -> Finding:
    return Finding(
        code=code, name="n", severity=Severity.ERROR, message="m", path="train.py",
        line=line, column=column, end_line=end_line or line, end_column=column + 10,
    )


def lines(text: str) -> list[str]:
    return textwrap.dedent(text).lstrip("\n").splitlines()


SOURCE = lines(
    """
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.zero_grad()  # noqa: LC102
        optimizer.step()  # loopcheck: ignore[LC1, LC201]
        scheduler.step()  # noqa
        log("# noqa: LC104")
        opt2.step()  # noqa:LC104,E501
    """
)


def kept_codes(findings, src):
    kept, _ = apply_suppressions(findings, src)
    return [(f.code, f.line) for f in kept]


def test_line_comments_silence_their_codes_and_prefixes_only():
    findings = [
        finding("LC102", 4), finding("LC201", 4),  # noqa: LC102 covers only LC102
        finding("LC104", 5), finding("LC201", 5), finding("LC301", 5),  # LC1 prefix and LC201
        finding("LC205", 6), finding("LC801", 6),  # bare noqa: everything
        finding("LC104", 7),  # the noqa is inside a string, not a comment
        finding("LC104", 8),
    ]
    assert kept_codes(findings, SOURCE) == [("LC201", 4), ("LC301", 5), ("LC104", 7)]


def test_directives_are_recognised_in_any_case():
    src = ["# LoopCheck: Ignore-File[LC5]", "import torch", "opt.step()  # NOQA: LC104", "sched.step()  # NoQa"]
    findings = [finding("LC501", 2), finding("LC104", 3), finding("LC201", 4), finding("LC102", 3)]
    assert kept_codes(findings, src) == [("LC102", 3)]


def test_a_file_without_directives_keeps_every_finding():
    src = ["for x in loader:", "    opt.step()  # not a directive", "    log('noq' + 'a')"]
    findings = [finding("LC104", 2), finding("LC201", 3)]
    assert kept_codes(findings, src) == [("LC104", 2), ("LC201", 3)]
    assert scan_file(src).all() == []


def test_used_suppressions_carry_the_codes_they_silenced():
    _, used = apply_suppressions([finding("LC102", 4), finding("LC104", 5), finding("LC104", 8)], SOURCE)
    assert [(s.line, s.kind, s.matched) for s in used] == [
        (4, "noqa", ("LC102",)),
        (5, "ignore", ("LC104",)),
        (8, "noqa", ("LC104",)),
    ]
    assert used[0].column == SOURCE[3].index("#") + 1


def test_a_comment_on_any_line_of_a_multi_line_statement_counts():
    src = lines(
        """
        total = compute(
            a,
            b,
        )  # noqa: LC601
        optimizer.step(
            closure,  # noqa: LC104
        )
        other = 1  # noqa: LC205
        """
    )
    findings = [finding("LC601", 1, 4), finding("LC601", 2, 2), finding("LC104", 5, 7), finding("LC205", 5, 7)]
    # LC601 at line 2 starts inside the statement of lines 1-4; LC205's comment is on the next statement
    assert kept_codes(findings, src) == [("LC205", 5)]


def test_only_the_header_of_a_compound_statement_counts():
    src = lines(
        """
        for batch in loader:  # noqa: LC701
            step(batch)  # noqa: LC702
        with torch.no_grad(
            True
        ):
            pass  # noqa: LC304
        """
    )
    findings = [finding("LC701", 1, 2), finding("LC702", 1, 2), finding("LC304", 3, 6)]
    assert kept_codes(findings, src) == [("LC702", 1), ("LC304", 3)]


def test_ignore_file_in_the_header_silences_the_whole_file():
    src = lines(
        '''
        #!/usr/bin/env python
        """Training script kept for comparison with the paper."""
        # loopcheck: ignore-file[LC5, LC201]
        import torch
        save()
        sched.step()
        opt.step()
        '''
    )
    findings = [finding("LC501", 5), finding("LC201", 6), finding("LC104", 7)]
    assert kept_codes(findings, src) == [("LC104", 7)]
    bare = ["# loopcheck: ignore-file", "import torch", "x()"]
    assert kept_codes([finding("LC104", 3), finding("LC601", 2)], bare) == []


def test_ignore_file_after_the_first_statement_is_not_a_file_directive():
    src = ["import torch", "# loopcheck: ignore-file", "opt.step()"]
    assert kept_codes([finding("LC104", 3)], src) == [("LC104", 3)]
    assert scan_file(src).file_level == []


def test_text_the_tokenizer_rejects_falls_back_to_per_line_comments():
    src = ["def f(:", "    opt.step()  # noqa: LC104", "    s = '''unterminated"]
    assert kept_codes([finding("LC104", 2), finding("LC105", 1)], src) == [("LC105", 1)]


def test_scan_keeps_its_simple_form():
    table = scan(SOURCE)
    assert table[4].codes == ("LC102",) and table[6].codes is None
    assert 7 not in table


def report_unused(src, used, active=lambda code: True):
    known = ["LC101", "LC102", "LC104", "LC201", "LC205", "LC501"]
    return unused(src, used, "train.py", active=active, known=known, name="unused-suppression")


def test_unused_reports_only_loopcheck_codes_that_silenced_nothing():
    src = lines(
        """
        # loopcheck: ignore-file[LC5]
        opt.step()  # noqa: LC104, E501
        opt.zero_grad()  # noqa: LC102, LC201
        x = 1  # noqa
        y = 2  # noqa: F401
        z = 3  # loopcheck: ignore[LC999]
        w = 4  # loopcheck: ignore
        """
    )
    findings = [finding("LC104", 2), finding("LC102", 3)]
    _, used = apply_suppressions(findings, src)
    out = report_unused(src, used)
    assert [(f.code, f.line, f.severity) for f in out] == [
        ("LC001", 1, Severity.INFO),
        ("LC001", 3, Severity.INFO),
        ("LC001", 6, Severity.INFO),
        ("LC001", 7, Severity.INFO),
    ]
    assert out[0].message == "unused suppression `# loopcheck: ignore-file[LC5]`: no LC5 finding in this file to silence"
    assert out[1].message == "unused suppression `# noqa: LC102, LC201`: no LC201 finding here to silence"
    assert out[1].column == src[2].index("#") + 1 and out[1].end_column == len(src[2]) + 1
    assert out[2].message == "unused suppression `# loopcheck: ignore[LC999]`: unknown code LC999"
    assert out[3].message == "unused suppression `# loopcheck: ignore`: no finding here to silence"


def test_unused_skips_codes_that_were_not_checked():
    src = ["opt.step()  # noqa: LC201"]
    assert report_unused(src, [], active=lambda code: not code.startswith("LC2")) == []
    assert len(report_unused(src, [])) == 1


def test_a_fully_used_file_has_no_unused_suppressions():
    findings = [finding("LC102", 4), finding("LC104", 5), finding("LC201", 5), finding("LC104", 8)]
    _, used = apply_suppressions(findings, SOURCE)
    assert report_unused(SOURCE, used) == []


def test_suppressions_can_be_switched_off_for_a_host_that_applies_noqa_itself():
    from loopcheck.lint import suppress

    findings = [finding("LC102", 4)]
    with suppress.disabled():
        assert apply_suppressions(findings, SOURCE) == (findings, [])
    assert apply_suppressions(findings, SOURCE)[0] == []
