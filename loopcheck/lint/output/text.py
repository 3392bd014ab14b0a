"""Human output: the full text report (rich), the concise one-line-per-finding form, statistics."""

from __future__ import annotations

import os
from typing import Callable, TextIO

from rich.console import Console
from rich.text import Text

from loopcheck.findings import Finding, Severity
from loopcheck.lint.output.report import Report, cell_of, fix_kind, plural

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}

SourceLines = Callable[[Finding], list[str]]  # the lines a finding's line numbers count in

# `[*]`: `loopcheck lint --fix` applies the fix; `[~]`: only with `--unsafe-fixes` as well
MARKS = {"safe": "[*]", "unsafe": "[~]"}


def console(stream: TextIO, *, colour: bool = True) -> Console:
    """A console that colours only a terminal, never when NO_COLOR is set or colour is False."""
    plain = not colour or bool(os.environ.get("NO_COLOR"))
    return Console(
        file=stream,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
        color_system=None if plain else "auto",
        no_color=plain or None,
    )


def location(f: Finding) -> str:
    cell = cell_of(f)
    return f"{f.path}:{'' if cell is None else f'cell {cell}:'}{f.line}:{f.column}"


def mark(f: Finding) -> str:
    """`[*] ` / `[~] ` before the message of a finding whose fix will be applied, else ""."""
    kind = fix_kind(f)
    return f"{MARKS[kind]} " if kind else ""


def concise(report: Report) -> str:
    return "".join(f"{location(f)}: {f.code} {mark(f)}{f.message}\n" for f in report.findings)


def _snippet(f: Finding, lines: list[str]) -> Text | None:
    """The finding's first source line with a caret marker under its span."""
    if not f.line or f.line > len(lines):
        return None
    source = lines[f.line - 1].rstrip("\r\n").replace("\t", " ")
    start = max((f.column or 1) - 1, 0)
    if f.end_line == f.line and f.end_column and f.end_column - 1 > start:
        stop = min(f.end_column - 1, len(source))
    else:  # the span goes on past this line: mark up to its last visible character
        stop = len(source.rstrip())
    width = max(stop - start, 1)
    gutter = " " * len(str(f.line))
    text = Text()
    text.append(f" {f.line} | ", style="blue")
    text.append(source + "\n")
    text.append(f" {gutter} | ", style="blue")
    text.append(" " * start)
    text.append("^" * width, style=STYLE[f.severity])
    text.append(f" {f.name} ({f.severity.value})", style=STYLE[f.severity])
    return text


def full(report: Report, out: Console, source_lines: SourceLines, *, statistics: bool = False, quiet: bool = False) -> None:
    if statistics:
        table = statistics_text(report)
        if table:
            out.print(table)
    else:
        for f in report.findings:
            head = Text()
            head.append(location(f), style="bold")
            head.append(": ")
            head.append(f.code, style=STYLE[f.severity])
            head.append(f" {mark(f)}{f.message}")
            out.print(head)
            snippet = _snippet(f, source_lines(f))
            if snippet is not None:
                out.print(snippet)
            out.print()
    if quiet:
        return
    for note in report.notes:
        out.print(note)
    out.print(summary_text(report))


def summary_text(report: Report) -> Text:
    counts = report.counts()
    checked = f"{plural(report.files_checked, 'file')} checked"
    text = Text()
    if report.findings:
        text.append(f"Found {plural(len(report.findings), 'finding')}: ", style="bold")
        parts = [
            (plural(counts[Severity.ERROR], "error"), Severity.ERROR),
            (plural(counts[Severity.WARNING], "warning"), Severity.WARNING),
            (f"{counts[Severity.INFO]} info", Severity.INFO),
        ]
        for i, (label, sev) in enumerate(parts):
            text.append(label, style=STYLE[sev] if counts[sev] else None)
            text.append(", " if i < len(parts) - 1 else "")
        text.append(f" ({checked}).")
    else:
        text.append(f"No findings ({checked}).", style="bold green" if not report.errors else "bold")
    safe = sum(1 for f in report.findings if fix_kind(f) == "safe")
    unsafe = sum(1 for f in report.findings if fix_kind(f) == "unsafe")
    if report.fixed:
        text.append(f"\nFixed {plural(report.fixed, 'finding')}.")
    if safe:
        text.append(f"\n{MARKS['safe']} {safe} fixable with `loopcheck lint --fix`.")
    if unsafe:
        text.append(f"\n{MARKS['unsafe']} {unsafe} fixable with `loopcheck lint --fix --unsafe-fixes` (check the change: it may alter behaviour).")
    if report.errors:
        text.append(f"\n{plural(len(report.errors), 'file')} could not be checked (see the errors above).", style="bold red")
    return text


def statistics_text(report: Report) -> str:
    rows = report.statistics()
    if not rows:
        return ""
    count_w = max(len(str(r["count"])) for r in rows)
    name_w = max(len(r["name"]) for r in rows)
    lines = []
    for r in rows:
        fixable = f"  {r['fixable']} fixable" if r["fixable"] else ""
        row = f"{r['count']:>{count_w}}  {r['code']:<6} {r['name']:<{name_w}}  {r['severity']:<7}{fixable}"
        lines.append(row.rstrip())
    return "\n".join(lines) + "\n"


def error_lines(report: Report) -> str:
    """`path:line:column: error: message` lines, for stderr."""
    return "".join(f"{e.location}: error: {e.message}\n" for e in report.errors)
