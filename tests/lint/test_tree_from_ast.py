"""Trees built from `ast` are libcst's trees: the same node types and fields (whitespace and
punctuation aside) on every fixture and on each construct below, or None where they cannot be;
their nodes are where libcst's tree puts them, with the same text; the lint's findings and fixes
are the same with built trees as with libcst's parse."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from loopcheck.lint import positions, syntax, tree_from_ast
from loopcheck.lint.positions import node_code, node_span, register_source
from loopcheck.lint.syntax import parse_module
from loopcheck.lint.tree_from_ast import BuiltModule, build, read_module
from loopcheck.lint.tree_pairs import difference, pairs, translated

REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted((REPO / "fixtures").rglob("*.py"))


def _same_as_libcst(source: str) -> None:
    built = build(source)
    assert built is not None, "fell back to libcst"
    assert difference(parse_module(source), built) is None


def test_every_fixture_builds_the_tree_libcst_parses():
    assert len(FIXTURES) > 100
    for path in FIXTURES:
        source = path.read_text(encoding="utf-8")
        built = build(source)
        assert built is not None, path
        assert difference(parse_module(source), built) is None, path


CONSTRUCTS = {
    "elif and else-if": "if a:\n    x = 1\nelif b:\n    x = 2\nelse:\n    if c:\n        x = 3\n",
    "one-line suites": "if ready: go(); stop()\nfor i in r: total += i\nclass Empty: pass\n",
    "semicolons": "a = 1; b = 2\nc = 3\n",
    "adjacent literals": 'msg = ("first part "  # why\n       "second part" f"{n:>4}")\nb = b"x" rb"\\d"\n',
    "f-strings": 'print(f"{loss.item():.4f} {name!r} {{literal}} {epoch=}")\n',
    "parameters": ("def f(a, b=1, /, c: int = 2, *args: str, d, e=3, **kw) -> None:\n    pass\n"
                   "def g(*, key):\n    pass\nh = lambda x, *, y=2: x + y\n"),
    "decorators": "@torch.no_grad()\n@staticmethod\ndef evaluate(model):\n    return model\n",
    "subscripts": "a = x[1:2, ::3]\nb = x[(1, 2)]\nc = x[(1, 2), 3]\nd = x[i][:, None]\ne = x[...]\n",
    "targets": "a, *rest = items\n(first, second), third = pairs\nx = y = 0\ncount: int = 0\nn //= 2\n",
    "calls": "f(a, *more, key=1, **extra)\ng(key=1, *more)\nh(x for x in xs)\n",
    "comprehensions": "s = {k: v for k, v in d.items() if v if k}\nt = [i * j for i in a for j in b]\nu = {*a, *b}\n",
    "expressions": ("v = not a and b or c and d\nw = a < b <= c is not None not in s\nz = -x ** 2 if x else ~y\n"
                    "n = 0x1F + 1_000 + 1.5e-3 + 2j\nq = (y := f(x))\nd = {**base, 'k': 1}\n"),
    "async and yield": ("async def run(loader):\n    async with lock as held, other:\n        async for b in loader:\n"
                        "            await step(b)\n    yield 1\n    yield from rest\n"),
    "try": "try:\n    go()\nexcept (A, B) as err:\n    raise C() from err\nelse:\n    pass\nfinally:\n    done()\n",
    "imports": "import a.b as c, d\nfrom . import e\nfrom ..f.g import h as i, j\nfrom k import *\n",
    "scopes": ("def outer():\n    global g\n    n = 0\n    def inner():\n        nonlocal n\n        del a, b[0]\n"
               "        assert n, 'message'\n    return inner\n"),
    "classes": "class Trainer(Base, metaclass=Meta):\n    '''Doc.'''\n    rate = 0.1\n",
    "with items": "with open(p) as fh, torch.no_grad():\n    pass\nwith (a as b, c as d):\n    pass\n",
    "empty and comments": "# only a comment\n",
    "a form feed between statements": "x = 'a'\n\x0c\ndef f():\n    return 'b'\n",
    "full-width punctuation in a comment": "x = 1  # 学習率（初期値）：０．１\n",
    "comments inside parentheses": (
        "shape = (\n    1,\n    width // 8,  # the factor,\n)\nnames = (\n    # first\n    'a',\n    'b',\n)\n"
        "y = (  # why\n    a if b else c\n)\nz = (\n    None  # nothing\n)\n"),
    "a call continued on the next line": (
        "(check if ok else fail)\\\n    (value())\nx = [\n    table[i]\n    (item), 2]\nname = other\n(a, b) = c\n"),
    "parentheses after with": "with (root / 'a.json').open() as fh:\n    pass\nwith (a, b):\n    pass\n",
    "brackets in strings": "table.update((ord(c), ord('(')) for c in '({[')\nwith lock: pass\nfrom a import (b, c)\n",
    "chains and deletions": (
        "ok = (a and b)\\\n    or (c and d) or e\ndel first, second, third\nm = pattern.match(text)\n_(message)\n"),
    "comments at the end of blocks": (
        "def close(self):\n    if self.open:\n        try:\n            self.stop()\n        except OSError:\n"
        "            pass\n\n        # keep the handle: a retry may still need it\n\n    # done\n# top level\n"
        "def later():\n    for step in steps:\n        run(step)\n          # deeper\n      # the function's\n  # the next one's\n"
        "def spaced():\n    if ready:\n        go()\n        \n    \n\nlast = 1\n"),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_each_construct_builds_the_tree_libcst_parses(name):
    _same_as_libcst(CONSTRUCTS[name])


@pytest.mark.parametrize("source", [
    "match command:\n    case 'go':\n        pass\n",  # not built: libcst parses it
    "ｔｈ = 1\n",  # `ast` gives `th`: the tree must keep the identifier as written
    "\ufeffx = 1\n",
    "# -*- coding: latin-1 -*-\nx = 1\n",  # libcst keeps the encoding in the module
    b"x = '\xe9'\n",  # not UTF-8
    "def broken(:\n",
])
def test_falls_back_to_libcst_where_it_cannot_reproduce_the_tree(source):
    assert build(source) is None


def test_read_module_builds_where_it_can_and_parses_with_libcst_elsewhere():
    assert type(read_module("x = 1\n")) is BuiltModule
    assert type(read_module("# coding: utf-8\nx = 'é'\n".encode("utf-8"))) is BuiltModule
    assert type(read_module("match x:\n    case 1:\n        pass\n")) is cst.Module
    with pytest.raises(cst.ParserSyntaxError):  # libcst's error, with its line, as before
        read_module("def broken(:\n")
    tree_from_ast.FROM_AST = False
    try:
        assert type(read_module("x = 1\n")) is cst.Module
    finally:
        tree_from_ast.FROM_AST = True


def test_difference_ignores_whitespace_and_names_the_first_differing_field():
    assert difference(parse_module("f(a,b)\n"), parse_module("f( a , b )  # note\n")) is None
    found = difference(parse_module("y = a + b\n"), parse_module("y = a - b\n"))
    assert found is not None and "operator" in found


def test_built_nodes_are_libcst_nodes_that_render():
    built = build("total = loss.item() + 1\n")
    assert isinstance(built, cst.Module)
    assert built.code == "total = loss.item() + 1\n"


def _lines(text: str) -> str:
    """Text with the indentation of its lines taken off: libcst's rendering of a node reindents
    continuation lines to the node's block, a built node's text keeps them as written."""
    return "\n".join(line.strip() for line in text.split("\n"))


def _same_places_and_texts(source: str) -> int:
    """Positions and one-line texts of every node of the built tree are those of the same node
    of libcst's tree (from the spans where they can be, from libcst's parse of the file for the
    rest); the code of an expression or a statement is its code there too. The nodes checked."""
    parsed = parse_module(source)
    register_source(parsed, source)
    built = build(source)
    where = built.positions
    checked = 0
    for native, made in pairs(parsed.body, built.body):
        assert where.span(made) == node_span(parsed, native), (type(native).__name__, parsed.code_for_node(native))
        assert where.text(made) == positions.positions_for(parsed).text(native), type(native).__name__
        if isinstance(made, cst.BaseExpression) and type(made) is not cst.StarredElement:  # libcst adds its comma
            assert _lines(node_code(made, built)) == _lines(parsed.code_for_node(native)), type(native).__name__
        elif isinstance(made, cst.BaseStatement):  # the same, without the blank and comment lines above it
            code, own = _lines(parsed.code_for_node(native)), _lines(node_code(made, built))
            assert code.endswith(own), (type(native).__name__, own)
            assert all(not line or line.startswith("#") for line in code[:-len(own)].splitlines())
        checked += 1
    return checked


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_node_is_where_the_parsed_tree_has_it_with_the_same_text(path):
    assert _same_places_and_texts(path.read_text(encoding="utf-8")) > 0


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_every_node_of_each_construct_is_where_the_parsed_tree_has_it(name):
    assert _same_places_and_texts(CONSTRUCTS[name]) > 0 or name == "empty and comments"


def test_nodes_away_from_the_spans_are_answered_from_libcst_s_parse():
    source = "def f(a, b=1):\n    return g(a, key=b)\n"
    built = build(source)
    parsed = parse_module(source)
    register_source(parsed, source)
    param = built.body[0].params.params[1]
    assert id(param) not in built.positions.origin
    assert built.positions.span(param) == node_span(parsed, parsed.body[0].params.params[1])
    keyword = built.body[0].body.body[0].body[0].value.args[1]
    assert built.positions.span(keyword) == node_span(parsed, parsed.body[0].body.body[0].body[0].value.args[1])


def test_a_node_renders_with_its_own_parentheses_only():
    source = "y = f((a + b) * c, (d))\nif (ready):\n    g(x)\n"
    built = build(source)
    call = built.body[0].body[0].value
    assert node_code(call) == "f((a + b) * c, (d))"
    assert node_code(call.args[0].value.left) == "(a + b)"
    assert node_code(call.args[1].value) == "(d)"
    assert node_code(built.body[1].test) == "(ready)"
    assert node_code(built.body[1].body.body[0].body[0].value.args[0].value) == "x"  # a call's parentheses are not its own
    assert node_code(built.body[1]) == "if (ready):\n    g(x)\n"


def test_the_text_of_a_built_node_is_known_while_its_module_lives():
    built = build("step(  model ,  # the net\n  batch)\n")
    call = built.body[0].body[0].value
    assert node_code(call) == "step(  model ,  # the net\n  batch)"  # as written, the comment too
    known = len(positions._BUILT_NODES)
    del built  # nothing else holds the module (its positions hold its statements, not it)
    assert len(positions._BUILT_NODES) < known  # its nodes' entries went with it
    assert node_code(call) == cst.Module([]).code_for_node(call)  # a node that outlived its module: as libcst renders it


def test_a_copy_of_a_model_maps_its_nodes_and_keeps_what_is_shared():
    old, new = cst.Name("model"), cst.Name("model")

    class Step:
        def __init__(self, node, loop=None):
            self.node, self.loop, self.names = node, loop, {"target": node}
    first = Step(old)
    first.loop = first  # a cycle
    shared = [first, first, (old, "text")]
    copied = translated(shared, {id(old): new})
    assert copied[0] is copied[1] and copied[0] is not first
    assert copied[0].node is new and copied[0].loop is copied[0] and copied[0].names["target"] is new
    assert copied[2] == (new, "text")
    assert first.node is old  # the original is left as it was


def _findings(paths, jobs=1):
    from loopcheck.lint.engine import check_paths

    report = check_paths(paths, jobs=jobs)
    return sorted((f.path, f.line, f.column, f.end_line, f.end_column, f.code, f.message, repr(f.fix))
                  for f in report.findings), sorted((e.path, e.line, e.message) for e in report.errors)


def test_findings_and_fixes_on_the_fixtures_are_those_of_libcst_s_parse():
    built = _findings([REPO / "fixtures"])
    tree_from_ast.FROM_AST = False
    try:
        parsed = _findings([REPO / "fixtures"])
    finally:
        tree_from_ast.FROM_AST = True
    assert len(built[0]) > 100 and sum("'edits'" in f[-1] for f in built[0]) > 20
    assert built == parsed


LOADS = {
    "at the top level": "import torch\nstate = torch.load('last.pt')\n",
    "in a method, one argument per line": (
        "import torch\n\n\nclass Trainer:\n    def resume(self, path):\n        state = torch.load(\n"
        "            path,\n            map_location='cpu',\n        )\n        self.step = state['step']\n"),
    "after a comment, in a loop": (
        "import torch\n\nfor name in names:\n    # the newest first\n    blob = torch.load(name, map_location=lambda s, l: s)  # cpu\n"),
    "in a one-line suite": "import torch\n\ndef restore(path):\n    if path: return torch.load(path)\n",
    "two on one line": "import torch\na = torch.load('a.pt'); b = torch.load('b.pt')\n",
}


@pytest.mark.parametrize("name", sorted(LOADS))
def test_a_local_fix_on_its_statement_alone_is_the_fix_on_the_whole_parse(name):
    """LC508's fixer edits one call: it runs on that statement parsed alone, and its edits are
    those of the fixer run on libcst's parse of the whole file."""
    from loopcheck.lint.api import lint_source

    source = LOADS[name]
    built = [(f.line, f.column, f.fix) for f in lint_source(source, "train.py", select="LC508")]
    tree_from_ast.FROM_AST = False
    try:
        parsed = [(f.line, f.column, f.fix) for f in lint_source(source, "train.py", select="LC508")]
    finally:
        tree_from_ast.FROM_AST = True
    assert built and all(fix is not None for *_, fix in built)
    assert built == parsed


def test_a_local_fix_parses_only_its_statement():
    from loopcheck.lint.context import FileContext
    from loopcheck.lint.fixes import attach_fixes
    from loopcheck.lint.fixes.fragment import fragment_of
    from loopcheck.lint.rules.base import all_rules

    source = LOADS["in a method, one argument per line"]
    ctx = FileContext("train.py", source, read_module(source))
    findings = [f for rule in all_rules() if rule.code == "LC508" for f in rule().check(ctx)]
    fragment = fragment_of(ctx, findings[0])
    assert fragment.source == "if True:\n" + "".join(source.splitlines(keepends=True)[5:9])
    assert fragment.shift == 4
    parses = []
    original = syntax.parse_module

    def counted(text):
        parses.append(text)
        return original(text)
    syntax.parse_module = counted
    try:
        fixed = attach_fixes(findings, ctx)
    finally:
        syntax.parse_module = original
    assert parses == [fragment.source]  # not the whole file
    assert fixed[0].fix["edits"][0]["line"] == 9  # a line for the new argument, before the `)`
