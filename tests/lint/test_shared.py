"""Helpers the rule families share: prefilter words, node queries."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import pytest

from loopcheck.lint.rules._shared import classes_of, nodes_of, whole_word
from loopcheck.lint.syntax import walk

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("torch.save(state, path)", True),
        ("accelerator.save_state(out)", True),
        ("save", True),
        ("x=save;", True),
        ("autosave(state)", False),
        ("self.save_every = 5", False),
        ("presave_state()", False),
        ("saved = True", False),
    ],
)
def test_whole_word_matches_the_words_and_nothing_around_them(text, hit):
    pattern = re.compile(whole_word("save", "save_state"))
    assert bool(pattern.search(text)) is hit
    assert bool(pattern.search(text)) is bool(re.search(r"\bsave(?:_state)?\b", text))


def test_whole_word_escapes_and_matches_at_the_ends():
    pattern = re.compile(whole_word("amp"))
    assert pattern.search("amp") and pattern.search("from torch.cuda import amp")
    assert not pattern.search("example = sample") and not pattern.search("amps")


@pytest.mark.parametrize(
    "kind",
    [
        cst.Call, cst.Name, (cst.Assign, cst.AugAssign), cst.BaseExpression, cst.BaseCompoundStatement,
        cst.BaseSmallStatement,
    ],
)
def test_nodes_of_is_an_isinstance_filter(kind):
    module = cst.parse_module((FIXTURES / "lc1_accum_clean.py").read_text())
    every = [node for node, _ in walk(module)]
    assert nodes_of(module, kind) == [node for node in every if isinstance(node, kind)]
    body = module.body[-1]
    assert nodes_of(body, kind) == [node for node, _ in walk(body) if isinstance(node, kind)]
    assert all(isinstance(node, kind) for node in nodes_of(module, kind))
    assert cst.Name in classes_of(cst.BaseExpression) and cst.Name not in classes_of(cst.BaseStatement)
