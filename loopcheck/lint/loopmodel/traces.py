"""Blocks of events with branches, calls and jumps, expanded into the paths of one iteration."""

from __future__ import annotations

from loopcheck.lint.loopmodel.facts import Event, Loop
from loopcheck.lint.loopmodel.nodes import _MAX_PATHS


class _Branch:
    __slots__ = ("alts", "tests")

    def __init__(self, alts: list[list], tests: list[tuple] | None = None) -> None:
        self.alts = alts
        # what taking each alternative needs: (scope, test, truth) of an `if` and its `else`; a path
        # that needs a test both true and false never runs (see `_expand`)
        self.tests = tests


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
    """The paths of one iteration through `block`: (events, how the path ends)."""
    return [(evs, term) for evs, term, _ in _paths(block, dropped)]


def _paths(block: list, dropped: set[int]) -> list[tuple[list[Event], str | None, dict]]:
    """`_expand`, each path with the branch tests it took (`_Branch.tests`): a path whose branches
    need one test both true and false (the `if` of a reset taken, the same `if` of the backward
    skipped) is left out, unless every way through a branch would be."""
    paths: list[tuple[list[Event], str | None, dict]] = [([], None, {})]
    for element in block:
        if all(term is not None for _, term, _ in paths):
            break
        if isinstance(element, Event):
            if id(element) in dropped:
                continue
            paths = [(evs + [element], None, needs) if term is None else (evs, term, needs) for evs, term, needs in paths]
            continue
        if isinstance(element, _LoopRef):
            continue
        if isinstance(element, _Jump):
            paths = [(evs, element.kind, needs) if term is None else (evs, term, needs) for evs, term, needs in paths]
            continue
        if isinstance(element, _Branch):
            subs: list[tuple[list[Event], str | None, dict]] = []
            tests = element.tests or [None] * len(element.alts)
            for alt, test in zip(element.alts, tests):
                for evs, term, needs in _paths(alt, dropped):
                    if test is not None:
                        if needs.get(test[:2], test[2]) is not test[2]:
                            continue
                        needs = {**needs, test[:2]: test[2]}
                    subs.append((evs, term, needs))
        else:  # _CallBlock: a return ends the helper, not the iteration
            subs = [(evs, None if term == "return" else term, needs) for evs, term, needs in _paths(element.block, dropped)]
        new: list[tuple[list[Event], str | None, dict]] = []
        seen: set[tuple] = set()
        for evs, term, needs in paths:
            if term is not None:
                candidates = [(evs, term, needs)]
            else:
                candidates = [(evs + sub, sub_term, _joined(needs, sub_needs)) for sub, sub_term, sub_needs in subs
                              if not needs or all(needs.get(k, v) is v for k, v in sub_needs.items())]
                if not candidates:  # every way through conflicts: keep them all rather than none
                    candidates = [(evs + sub, sub_term, needs) for sub, sub_term, _ in subs]
            for cand in candidates:
                key = (tuple(id(e) for e in cand[0]), cand[1])
                if key not in seen:
                    seen.add(key)
                    new.append(cand)
            if len(new) >= _MAX_PATHS:
                break
        paths = new[:_MAX_PATHS]
    return paths


def _joined(needs: dict, more: dict) -> dict:
    """The tests of a path and of the branch it takes next (shared when either has none)."""
    if not more:
        return needs
    if not needs:
        return more
    return {**needs, **more}


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
