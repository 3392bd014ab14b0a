"""Positions computed one statement at a time agree with the whole-module table, node for node."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from loopcheck.lint import positions
from loopcheck.lint.syntax import module_nodes

REPO = Path(__file__).resolve().parents[2]

TRICKY = textwrap.dedent(
    '''\
    # a comment that belongs to the first statement

    @decorator(
        arg=1,
    )
    # between decorators
    @other
    async def train(model, *, lr=1e-3) -> None:
        """Doc."""
        a = 1; b = 2; c = \\
            3
        async with ctx() as c, other():
            pass
        async for x in gen():
            if x: y = 1; z = 2
            elif x > 2:
                pass
            elif x > 3: pass
            else:
                w = "é ü"; v = 1
        try:
            pass
        except* ValueError as e:
            pass
        try:
            q = (
                1,
                2,
            )
        except (A, B):
            pass
        else:
            pass
        finally:
            r = 1
        match command:
            case [x, y]:
                pass
            case {"k": v} if v:
                s = 1
            case _:
                t = lambda: (yield)
        while True:
            break
        else:
            pass
        class Inner(Base, metaclass=M):
            def m(self): return 1
        with (open(a) as f,
              open(b) as g):
            f.write(g.read())
        optimizer.step()
        optimizer.step()
        return f"{a!r:>10}"  # trailing
    x = [i for i in range(3)]  # comment


    def end(): pass
    '''
)


def _agree(source: str) -> tuple[int, bool]:
    """Compare every node's span and text; (nodes compared, whether the table was needed)."""
    module = cst.parse_module(source)
    lazy = positions.StatementPositions(module, source)
    table = positions.PositionTable(module)
    nodes = module_nodes(module)[0][1:]  # the module itself has no statement around it
    for node in nodes:
        assert lazy.span(node) == table.span(node), (type(node).__name__, module.code_for_node(node)[:60])
        assert lazy.text(node) == table.text(node), type(node).__name__
    return len(nodes), lazy._table is not None


def test_tricky_syntax_without_the_table() -> None:
    count, fell_back = _agree(TRICKY)
    assert count > 200
    assert not fell_back


def test_crlf_and_tabs() -> None:
    source = "import torch\r\nx = 1\r\nif x:\r\n\ty = 2\r\nelse:\r\n\ty = 3\r\n"
    _, fell_back = _agree(source)
    assert not fell_back


def test_repeated_statements_are_told_apart() -> None:
    source = "def a():\n    opt.step()\n    opt.step()\n\n\ndef b():\n    opt.step()\n"
    module = cst.parse_module(source)
    lazy = positions.StatementPositions(module, source)
    calls = [n for n in module_nodes(module)[0] if isinstance(n, cst.Call)]
    assert [lazy.span(c)[:2] for c in calls] == [(2, 5), (3, 5), (7, 5)]


def test_no_final_newline_falls_back_to_the_table() -> None:
    count, _ = _agree("def f():\n    return 1")
    assert count > 3


@pytest.mark.parametrize("folder", ["fixtures", "loopcheck/lint"])
def test_real_files(folder: str) -> None:
    for path in sorted((REPO / folder).rglob("*.py")):
        _, fell_back = _agree(path.read_text(encoding="utf-8"))
        assert not fell_back, path
