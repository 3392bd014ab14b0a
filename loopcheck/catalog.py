"""The rule catalogue: reads the pages in `rules/` (one Markdown file per code).

Each page starts with a front block that is the only place a code's name, severity and
summary are written down:

    ---
    code: LC102
    name: zero-grad-between-backward-and-step
    severity: error
    since: 0.1.0
    summary: gradients are reset after backward and before step, so the step sees zeros
    ---

A probe (LP) page also names its `lint_twin`: the LC codes that find the same bug in source
before the run, or `none`.

Rules, probe detectors, `loopcheck rules`, `loopcheck explain` and the SARIF driver all read
metadata from here. In a wheel the pages ship as `loopcheck/_pages/`; in a source checkout they
are read from `rules/` at the repository root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from loopcheck.findings import Severity

_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class RulePage:
    code: str
    name: str
    severity: Severity
    since: str
    summary: str
    fix: str  # "safe", "unsafe" or "none"
    lint_twin: tuple[str, ...]  # LP pages: the LC codes that find the same bug before the run
    text: str  # the whole page, front block removed
    path: Path

    def section(self, title: str) -> str:
        """The body of the `## title` section ('' when the page has none)."""
        match = re.search(rf"^## {re.escape(title)}\s*\n(.*?)(?=^## |\Z)", self.text, re.S | re.M)
        return match.group(1).strip() if match else ""

    def example(self, title: str) -> str:
        """The first python code block of section `title` (Bad or Good)."""
        match = _FENCE.search(self.section(title) + "\n")
        return match.group(1) if match else ""

    @property
    def family(self) -> str:
        return self.code[:3]


def pages_dir() -> Path:
    packaged = Path(__file__).parent / "_pages"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "rules"


def _parse(path: Path) -> RulePage:
    raw = path.read_text(encoding="utf-8")
    if not raw.startswith("---\n"):
        raise ValueError(f"{path}: a rule page starts with a '---' front block")
    head, _, body = raw[4:].partition("\n---\n")
    meta: dict[str, str] = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip()
    missing = {"code", "name", "severity", "since", "summary"} - meta.keys()
    if missing:
        raise ValueError(f"{path}: front block lacks {', '.join(sorted(missing))}")
    return RulePage(
        code=meta["code"],
        name=meta["name"],
        severity=Severity(meta["severity"]),
        since=meta["since"],
        summary=meta["summary"],
        fix=meta.get("fix", "none"),
        lint_twin=tuple(c.strip() for c in meta.get("lint_twin", "none").split(",") if c.strip() not in ("", "none")),
        text=body.lstrip("\n"),
        path=path,
    )


@lru_cache(maxsize=1)
def catalog() -> dict[str, RulePage]:
    """All pages by code, in code order."""
    where = pages_dir()
    pages = {page.code: page for page in (_parse(p) for p in sorted(where.glob("L*.md")))}
    if not pages:
        # every rule reads its metadata here: without the pages nothing would be checked, silently
        raise RuntimeError(f"loopcheck's rule pages are missing (no L*.md in {where}); reinstall loopcheck")
    return pages


def page(code: str) -> RulePage:
    try:
        return catalog()[code.upper()]
    except KeyError:
        raise KeyError(f"unknown rule code {code!r}; `loopcheck rules` lists them") from None


def lint_twin(code: str) -> tuple[str, ...]:
    """The LC codes that find the bug of probe code `code` before the run (none for unknown codes)."""
    p = catalog().get(code.upper())
    return p.lint_twin if p is not None else ()


def runtime_twins(lint_code: str) -> list[str]:
    """The LP codes whose page names `lint_code` as the static check of the same bug."""
    return [code for code, p in catalog().items() if lint_code.upper() in p.lint_twin]


def codes(prefix: str = "") -> list[str]:
    return [code for code in catalog() if code.startswith(prefix.upper())]


SEVERITY_POLICY = """\
## Severity policy

Every lint rule applies the same rule for how sure it must be:

- **error**: the code proves the defect on every path the loop model resolves: the roles of the
  objects (optimizer, model, scheduler, ...) come from their constructors or their use, and the
  order of the events is the order the code runs them in.
- **warning**: almost surely wrong here, with one assumption a reader can check in the message
  (a declared dependency range, a file's purpose read from its name and use).
- **info**: advice, or a defect that rests on a fact the code does not settle.

When a fact rests on something unresolved (a call into a library or a helper the model cannot
follow, a dynamic attribute, a value from a config or the command line), a rule lowers the
severity or says nothing; a page's severity is the highest its findings get. Every message states
its evidence with lines, for example "`optimizer.zero_grad()` (line 40) runs after
`loss.backward()` (line 38) and before `optimizer.step()` (line 45)", so a reader can check it in
seconds."""


def index_markdown() -> str:
    """The rule index page (rules/README.md), generated from the front blocks."""
    families = {
        "LC0": "Meta", "LC1": "Gradients and zero_grad", "LC2": "LR schedulers", "LC3": "Train/eval modes",
        "LC4": "Mixed precision", "LC5": "Checkpoints", "LC6": "Memory and loss", "LC7": "Data and distributed",
        "LC8": "EMA and averaging", "LP1": "Probe: gradients and non-finite values", "LP2": "Probe: memory",
        "LP3": "Probe: learning rate", "LP4": "Probe: modes and gradient bookkeeping", "LP5": "Probe: loss",
        "LP6": "Probe: data",
    }
    out = [
        "# Rule index",
        "",
        "Generated from the pages' front blocks (`python -m loopcheck.catalog > rules/README.md`).",
        "`loopcheck rules` prints the same list; `loopcheck explain CODE` prints a page.",
        "LC codes come from `loopcheck lint`, LP codes from `loopcheck.probe`.",
        "",
        SEVERITY_POLICY,
    ]
    current = None
    for code, p in catalog().items():
        if p.family != current:
            current = p.family
            out += ["", f"## {families.get(current, current)}", "", "| code | name | severity | autofix | finds |", "|---|---|---|---|---|"]
        fix = {"safe": "safe", "unsafe": "unsafe"}.get(p.fix, "")
        out.append(f"| [{code}]({code}.md) | {p.name} | {p.severity.value} | {fix} | {p.summary} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(index_markdown(), end="")
