"""The fixes declared neutral to the model (`fixes.neutral`) held to the full re-check.

On every fixture, every fixable rule page's examples and a few training scripts written here:
each neutral fix applied alone leaves a text that parses and whose findings are the others,
unchanged in code and fix; and what `fixing.promised` says a fix run fixes, without linting a
fixed text, is what the fix run fixes.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import libcst as cst
import pytest

from loopcheck.catalog import catalog
from loopcheck.findings import Finding
from loopcheck.lint import fixing
from loopcheck.lint.fixes import applicability
from loopcheck.lint.fixes.base import FIXERS
from loopcheck.lint.fixes.edits import Edit, apply_edits
from loopcheck.lint.fixes.neutral import NEUTRAL
from loopcheck.lint.fixing import default_linter, fix_source, promised

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
PATH = str(REPO / "fixtures" / "neutral_check.py")  # not on disk: linted as a text of the project

# training scripts in which neutral fixes meet each other and fixes that are not neutral
SCRIPTS = {
    "resume_and_amp": '''
        import torch
        from torch.cuda.amp import GradScaler, autocast


        def resume(model, optimizer, path):
            state = torch.load(
                path,
                map_location="cpu",
            )
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            return state["epoch"] + 1


        def train(model, optimizer, loader, epochs, path):
            scaler = GradScaler()
            start = resume(model, optimizer, path)
            for epoch in range(start, epochs):
                for x, y in loader:
                    with autocast():
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                    scaler.scale(loss).backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
        ''',
    "zero_grad_and_loads": '''
        import torch
        from torch import nn

        model = nn.Linear(8, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.load_state_dict(torch.load("init.pt"))
        teacher = torch.load("teacher.pt", map_location="cpu")
        scaler = torch.cuda.amp.GradScaler()

        for x, y in [(torch.randn(4, 8), torch.randint(0, 2, (4,)))]:
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
        ''',
    "module_alias": '''
        import torch
        from torch.cuda import amp


        def step(model, optimizer, batch, scaler):
            with amp.autocast():
                loss = model(batch).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()


        def build(model):
            scaler = amp.GradScaler(init_scale=2.0 ** 12)
            best = torch.load("best.pt")
            model.load_state_dict(best)
            return scaler
        ''',
    # LC102's fix is not neutral: the reset it moves into the accumulation branch ends LC103 too
    "accumulation": '''
        import torch
        from torch import nn


        def train(model, optimizer, loader, epochs, accumulation=4):
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for i, (x, y) in enumerate(loader):
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.zero_grad()
                    if (i + 1) % accumulation == 0:
                        optimizer.step()
                    state = torch.load("ema.pt")
        ''',
}


def _sources() -> list[tuple[str, str, str]]:
    """(name, text, path to lint it as) of every source the declaration is checked on."""
    out = [(p.relative_to(FIXTURES).as_posix(), p.read_text(encoding="utf-8"), str(p))
           for p in sorted(FIXTURES.rglob("*.py"))]
    pages = catalog()
    for code in sorted(FIXERS):
        for title in ("Bad", "Good"):
            example = pages[code].example(title)
            if example:
                out.append((f"{code}-{title}", example, PATH))
    out += [(name, textwrap.dedent(text).lstrip("\n"), PATH) for name, text in SCRIPTS.items()]
    return out


SOURCES = _sources()
_LINTED: dict[tuple[str, str], list[Finding]] = {}


def lint(source: str, path: str) -> list[Finding]:
    """The engine's findings (a text is linted once in this module: the engine is deterministic)."""
    if (source, path) not in _LINTED:
        _LINTED[source, path] = list(default_linter(source, path))
    return _LINTED[source, path]


lint.attaches_fixes = True  # type: ignore[attr-defined]


def _edits(f: Finding) -> tuple[Edit, ...]:
    return tuple(Edit(**e) for e in (f.fix or {}).get("edits") or ())


def _shape(findings: list[Finding]) -> Counter:
    """What fix runs compare of findings: codes, where they are, and which fix each carries
    (positions move when a fix adds a line)."""
    return Counter((f.code, f.path, (f.fix or {}).get("message")) for f in findings)


def test_the_declaration_is_of_codes_with_fixers():
    assert NEUTRAL <= set(FIXERS)
    assert all(applicability(code) != "none" for code in NEUTRAL)


def test_the_declaration_is_exercised():
    """The checks below meet fixes of every neutral code, and neutral fixes next to each other
    (in the scripts written here and the rule pages)."""
    seen: Counter = Counter()
    for _, text, path in [s for s in SOURCES if s[2] == PATH]:
        found = [f for f in lint(text, path) if f.fix and f.code in NEUTRAL]
        seen.update(f.code for f in found)
        seen["together"] += len({_edits(f) for f in found}) > 1
    assert all(seen[code] >= 2 for code in NEUTRAL) and seen["together"] >= 2, seen


def _others_changed(text: str, path: str, codes: frozenset[str]) -> list[str]:
    """The fixes of `codes` in `text` that, applied alone, change a finding they do not fix."""
    before = lint(text, path)
    changed = []
    for edits in dict.fromkeys(_edits(f) for f in before if f.fix and f.code in codes):
        fixed = apply_edits(text, list(edits))
        cst.parse_module(fixed)
        after = list(default_linter(fixed, path))  # never from the memo: this text is new
        others = [f for f in before if _edits(f) != edits]
        if _shape(after) != _shape(others):
            changed.append(f"{edits}: {sorted(_shape(others) - _shape(after))} -> {sorted(_shape(after) - _shape(others))}")
    return changed


@pytest.mark.parametrize("name,text,path", SOURCES, ids=[s[0] for s in SOURCES])
def test_a_neutral_fix_changes_no_other_finding(name: str, text: str, path: str) -> None:
    assert _others_changed(text, path, NEUTRAL) == []


def test_the_check_tells_a_fix_that_is_not_neutral():
    text = textwrap.dedent(SCRIPTS["accumulation"]).lstrip("\n")
    assert {f.code for f in lint(text, PATH) if f.fix} == {"LC102", "LC508"}
    assert _others_changed(text, PATH, frozenset({"LC508"})) == []
    [change] = _others_changed(text, PATH, frozenset({"LC102"}))
    assert "LC103" in change


@pytest.mark.parametrize("name,text,path", SOURCES, ids=[s[0] for s in SOURCES])
def test_the_promise_is_what_the_fix_run_fixes(name: str, text: str, path: str) -> None:
    if not any(f.fix for f in lint(text, path)):
        assert promised(text, path, unsafe=True, linter=lint) == []
        return
    for unsafe in (False, True):
        linted: list[str] = []

        def counting(source: str, where: str) -> list[Finding]:
            linted.append(source)
            return lint(source, where)

        counting.attaches_fixes = True  # type: ignore[attr-defined]
        said = promised(text, path, unsafe=unsafe, linter=counting)
        done = fix_source(text, path, unsafe=unsafe, linter=lint).fixed
        assert [(f.code, f.line, f.column) for f in said] == [(f.code, f.line, f.column) for f in done], name
        if said and all(f.code in NEUTRAL for f in said):
            assert linted == [text], "only the text as written is linted"


def test_a_fix_that_is_not_neutral_is_checked_by_linting(monkeypatch):
    text = textwrap.dedent(SCRIPTS["zero_grad_and_loads"]).lstrip("\n")
    runs: list[bool] = []
    real = fixing.fix_source

    def counted(*args, **kwargs):
        runs.append(kwargs["unsafe"])
        return real(*args, **kwargs)

    monkeypatch.setattr(fixing, "fix_source", counted)
    assert {f.code for f in promised(text, PATH, unsafe=True)} == {"LC102", "LC405", "LC508"}
    assert {f.code for f in promised(text, PATH)} == {"LC102", "LC405"}
    assert {f.code for f in promised(text, PATH, enabled=lambda code: code != "LC102")} == {"LC405"}
    assert runs == [True, False]  # LC102's fix moves a statement of the loop: linted again
