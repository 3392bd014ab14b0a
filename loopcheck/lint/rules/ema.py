"""Weight-averaging rule (LC801): an EMA / SWA update placed before the optimizer step it should
follow, in the batch loop or at the top of the epoch before the batch loop.

The check reads the loop model's traces: per branch-expanded path of one iteration, an
EMA_UPDATE with no optimizer step before it and one after it. At the epoch level the step sits in
a nested loop, so "after" is the nested training loop starting below the update.
"""

from __future__ import annotations

from typing import Iterator

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import Event, EventKind, Loop
from loopcheck.lint.rules._shared import call_site
from loopcheck.lint.rules.base import FileContext, Rule

_STEPS = (EventKind.STEP, EventKind.SCALER_STEP)


def _steps_in(loop: Loop) -> bool:
    return any(e.kind in _STEPS for inner in loop.walk() for e in inner.events)


class EmaUpdateBeforeStep(Rule):
    code = "LC801"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        reported: set[int] = set()
        for loop in ctx.model.walk_loops():
            for event in self._early_updates(loop):
                if id(event.node) in reported:
                    continue
                reported.add(id(event.node))
                what = event.target or "the average"
                yield self.finding(
                    ctx,
                    event,
                    f"`{what}` is updated before the optimizer step of this iteration, so it averages "
                    "the weights from before each step and never the latest ones: move the update "
                    "after `optimizer.step()` (under the same guard)",
                )

    def _early_updates(self, loop: Loop) -> Iterator[Event]:
        for trace in loop.traces:
            stepped = False
            for i, event in enumerate(trace):
                if event.kind in _STEPS:
                    stepped = True
                elif event.kind is EventKind.EMA_UPDATE and not stepped:
                    if any(e.kind in _STEPS for e in trace[i + 1 :]) or self._trained_below(loop, event):
                        yield event

    @staticmethod
    def _trained_below(loop: Loop, event: Event) -> bool:
        """A nested loop that steps the optimizer starts after `event` in this iteration."""
        here = call_site(event.path, event.line, event.via, loop.via)
        if here is None:
            return False
        for child in loop.children:
            if not _steps_in(child):
                continue
            there = call_site(child.path, child.line, child.via, loop.via)
            if there is not None and there[0] == here[0] and there[1] > here[1]:
                return True
        return False
