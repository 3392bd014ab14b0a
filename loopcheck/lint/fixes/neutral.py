"""Fixes neutral to the model: applying one changes no finding but those it fixes.

A fix of a code listed here, applied to a text, leaves a text that parses and whose findings are
the text's findings less the ones that carry this same fix (its own, and those of other findings
it also fixes: one import rewrite reached from each call it covers); every other finding keeps
its code and its fix, or its lack of one. Then what a fix run (`fixing.fix_source`) applies is
known from the findings of the unchanged text alone (`fixing.promised`): the "fixable" marks
need no lint of a fixed text.

Why each is neutral:

- LC508 adds `weights_only=True` to one `torch.load` call. The loop model reads nothing of that
  argument that a rule uses; the only rule that reads it is LC508, per call.
- LC405 spells a `torch.cuda.amp` / `torch.cpu.amp` class as its `torch.amp` twin with the device
  as first argument. The model knows autocast and the scaler by their last dotted name, whatever
  module they come from; only LC405 tells the spellings apart.

`tests/lint/test_neutral_fixes.py` holds the list to the full re-check, on every fixture and
every fixable rule page's examples.
"""

from __future__ import annotations

NEUTRAL = frozenset({"LC405", "LC508"})


def neutral(code: str) -> bool:
    """Whether the fixes of `code` are neutral to the model (see the module's docstring)."""
    return code in NEUTRAL
