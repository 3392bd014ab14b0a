"""`syntax.parse_module`: libcst's parse without the per-node checks, and nothing else changed."""

from __future__ import annotations

import threading
from pathlib import Path

import libcst as cst
import pytest

from loopcheck.lint import syntax

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.py"))[:40], ids=lambda p: p.name)
def test_the_tree_is_the_one_libcst_builds(path):
    text = path.read_text(encoding="utf-8")
    fast, plain = syntax.parse_module(text), cst.parse_module(text)
    assert fast.deep_equals(plain)
    assert fast.code == text


def test_trees_built_by_hand_are_still_checked_after_a_parse():
    syntax.parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_syntax_errors_come_out_as_libcst_raises_them_and_the_checks_come_back():
    with pytest.raises(cst.ParserSyntaxError):
        syntax.parse_module("def f(:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")


def test_parses_in_threads_leave_the_checks_on():
    errors: list[BaseException] = []

    def parse_many() -> None:
        try:
            for _ in range(30):
                syntax.parse_module("for x in range(3):\n    y = x * 2\n")
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cst.CSTNode.__post_init__ is syntax._VALIDATE
    with pytest.raises(cst.CSTValidationError):
        cst.Name("1x")
