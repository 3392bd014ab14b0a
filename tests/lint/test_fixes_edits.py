"""The edits of a fix are found by rendering only the statements of the innermost block that
changed; they must be exactly the edits of the whole-file comparison, whatever the layout."""

from __future__ import annotations

from unittest import mock

import libcst as cst
import pytest

from loopcheck.lint.fixes.base import SourceIndex, replace_nodes
from loopcheck.lint.fixes.edits import apply_edits, edits_between
from loopcheck.lint.rules.base import FileContext

NESTED = '''\
import torch  # first


@torch.no_grad()
@decorate(
    "multi-line",
)
def evaluate(model, loader):
    # leading comment
    for x in loader:
        if x is None:
            continue
        elif x == 1:
            model(x)
        else:
            try:
                model(x)  # call
            except ValueError:
                pass
        # a comment the block owns
    return model


class Trainer:
    def step(self):
        self.opt.step()
'''

TABS = "def train(opt):\n\tfor b in range(3):\n\t\topt.zero_grad()\n\t\topt.step()\n"

NO_NEWLINE = "def train(opt):\n    for b in range(3):\n        opt.step()"


def _calls(module: cst.Module, name: str) -> list[cst.Call]:
    return [n for n in _walk(module) if isinstance(n, cst.Call) and cst.Module([]).code_for_node(n.func) == name]


def _walk(node: cst.CSTNode):
    yield node
    for child in node.children:
        yield from _walk(child)


def _statement(index: SourceIndex, node: cst.CSTNode) -> cst.BaseStatement:
    while not isinstance(node, cst.SimpleStatementLine):
        node = index.parent(node)
    return node


def _check(source: str, change, *, whole_file: bool = False) -> None:
    """`whole_file`: the change reaches the unterminated last line, which only the whole-file
    comparison handles; otherwise it must not be used."""
    module = cst.parse_module(source)
    index = SourceIndex(FileContext("t.py", source, module))
    fixed = change(index, module)
    expected = edits_between(source, fixed.code)
    assert expected, "the change changes nothing"
    if whole_file:
        found = index.edits(fixed)
    else:
        with mock.patch("loopcheck.lint.fixes.base.edits_between", side_effect=AssertionError("whole file")):
            found = index.edits(fixed)
    assert found == expected
    assert apply_edits(source, found) == fixed.code


def _renamed(call: cst.Call, name: str) -> cst.Call:
    return call.with_changes(func=cst.parse_expression(name))


@pytest.mark.parametrize("which", [0, 1])
def test_a_call_in_nested_branches(which: int) -> None:
    def change(index, module):
        call = _calls(module, "model")[which]
        return replace_nodes(index, {call: _renamed(call, "net")})

    _check(NESTED, change)


def test_a_call_in_a_method() -> None:
    _check(NESTED, lambda index, module: replace_nodes(
        index, {_calls(module, "self.opt.step")[0]: _renamed(_calls(module, "self.opt.step")[0], "self.sched.step")}))


def test_a_decorator_and_the_first_statement() -> None:
    def change(index, module):
        call = _calls(module, "decorate")[0]
        return replace_nodes(index, {call: _renamed(call, "wrap")})

    _check(NESTED, change)


def test_inserting_before_a_statement_of_an_except_handler() -> None:
    def change(index, module):
        stmt = _statement(index, _calls(module, "model")[1])
        new = cst.parse_statement("log()\n")
        return replace_nodes(index, {stmt: cst.FlattenSentinel([new, stmt])})

    _check(NESTED, change)


def test_removing_the_only_statement_of_a_branch_but_one() -> None:
    def change(index, module):
        stmt = _statement(index, _calls(module, "model")[0])
        return replace_nodes(index, {stmt: cst.FlattenSentinel([stmt, cst.parse_statement("done()\n")])})

    _check(NESTED, change)


@pytest.mark.parametrize("source", [TABS, NO_NEWLINE])
def test_moving_to_the_end_of_a_block(source: str) -> None:
    def change(index, module):
        calls = _calls(module, "opt.zero_grad") or _calls(module, "opt.step")
        stmt = _statement(index, calls[0])
        last = _statement(index, _calls(module, "opt.step")[0])
        new = cst.parse_statement("opt.zero_grad(set_to_none=True)\n")
        if stmt is last:
            return replace_nodes(index, {stmt: cst.FlattenSentinel([stmt, new])})
        return replace_nodes(index, {stmt: cst.RemoveFromParent(), last: cst.FlattenSentinel([last, new])})

    _check(source, change, whole_file=source is NO_NEWLINE)


def test_wrapping_a_loop_in_a_with() -> None:
    def change(index, module):
        loop = next(n for n in _walk(module) if isinstance(n, cst.For))
        header = cst.parse_statement("with torch.no_grad():\n    pass\n")
        wrapped = header.with_changes(
            leading_lines=loop.leading_lines, body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=())]))
        return replace_nodes(index, {loop: wrapped})

    _check(NESTED, change)
