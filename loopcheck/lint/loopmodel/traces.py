"""Blocks of events with branches, calls and jumps, expanded into the paths of one iteration."""

from __future__ import annotations

from loopcheck.lint.loopmodel.facts import Event, Loop
from loopcheck.lint.loopmodel.nodes import _MAX_PATHS


class _Branch:
    __slots__ = ("alts",)

    def __init__(self, alts: list[list]) -> None:
        self.alts = alts


class _CallBlock:
    __slots__ = ("block",)

    def __init__(self, block: list) -> None:
        self.block = block


class _Jump:
    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "continue" | "break" | "return" | "raise"


class _LoopRef:
    __slots__ = ("loop",)

    def __init__(self, loop: Loop) -> None:
        self.loop = loop


def _expand(block: list, dropped: set[int]) -> list[tuple[list[Event], str | None]]:
    paths: list[tuple[list[Event], str | None]] = [([], None)]
    for element in block:
        if all(term is not None for _, term in paths):
            break
        if isinstance(element, Event):
            if id(element) in dropped:
                continue
            paths = [(evs + [element], None) if term is None else (evs, term) for evs, term in paths]
            continue
        if isinstance(element, _LoopRef):
            continue
        if isinstance(element, _Jump):
            paths = [(evs, element.kind) if term is None else (evs, term) for evs, term in paths]
            continue
        if isinstance(element, _Branch):
            subs: list[tuple[list[Event], str | None]] = []
            for alt in element.alts:
                subs.extend(_expand(alt, dropped))
        else:  # _CallBlock: a return ends the helper, not the iteration
            subs = [(evs, None if term == "return" else term) for evs, term in _expand(element.block, dropped)]
        new: list[tuple[list[Event], str | None]] = []
        seen: set[tuple] = set()
        for evs, term in paths:
            if term is not None:
                candidates = [(evs, term)]
            else:
                candidates = [(evs + sub, sub_term) for sub, sub_term in subs]
            for cand in candidates:
                key = (tuple(id(e) for e in cand[0]), cand[1])
                if key not in seen:
                    seen.add(key)
                    new.append(cand)
            if len(new) >= _MAX_PATHS:
                break
        paths = new[:_MAX_PATHS]
    return paths


def _condition(text: str, negated: bool) -> tuple[str, bool]:
    """A guard as (test without a leading `not`, the truth it needs)."""
    text = " ".join(text.split())
    while text.startswith("not "):
        text, negated = text[4:].strip(), not negated
    if text.startswith("(") and text.endswith(")") and text.count("(") == 1:
        text = text[1:-1].strip()
    return text, not negated


def feasible(events: list[Event]) -> bool:
    """False when a path needs one test both true and false (`if not accumulate:` early in the
    iteration, the `else` of `if accumulate:` later): such a path never runs."""
    needed: dict[str, bool] = {}
    for event in events:
        for guard in event.guards:
            test, truth = _condition(guard.text, guard.negated)
            if needed.setdefault(test, truth) is not truth:
                return False
    return True
