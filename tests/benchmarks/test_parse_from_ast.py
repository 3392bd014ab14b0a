"""Trees built from `ast` are libcst's trees: the same node types and fields (whitespace and
punctuation aside) on every fixture and on each construct below, or None where they cannot be;
and the experiment's script prints its lines (its times are never judged here)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import libcst as cst
import pytest

from loopcheck.lint.syntax import parse_module

REPO = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("parse_from_ast", REPO / "benchmarks" / "parse_from_ast.py")
parse_from_ast = importlib.util.module_from_spec(_SPEC)
sys.modules["parse_from_ast"] = parse_from_ast
_SPEC.loader.exec_module(parse_from_ast)
build, difference = parse_from_ast.build, parse_from_ast.difference


def _same_as_libcst(source: str) -> None:
    built = build(source)
    assert built is not None, "fell back to libcst"
    assert difference(parse_module(source), built) is None


def test_every_fixture_builds_the_tree_libcst_parses():
    fixtures = sorted((REPO / "fixtures").rglob("*.py"))
    assert len(fixtures) > 100
    for path in fixtures:
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
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_each_construct_builds_the_tree_libcst_parses(name):
    _same_as_libcst(CONSTRUCTS[name])


@pytest.mark.parametrize("source", [
    "match command:\n    case 'go':\n        pass\n",  # not built: libcst parses it
    "ｔｈ = 1\n",  # `ast` gives `th`: the tree must keep the identifier as written
    "\ufeffx = 1\n",
    "def broken(:\n",
])
def test_falls_back_to_libcst_where_it_cannot_reproduce_the_tree(source):
    assert build(source) is None


def test_difference_ignores_whitespace_and_names_the_first_differing_field():
    assert difference(parse_module("f(a,b)\n"), parse_module("f( a , b )  # note\n")) is None
    found = difference(parse_module("y = a + b\n"), parse_module("y = a - b\n"))
    assert found is not None and "operator" in found


def test_the_script_prints_fidelity_times_and_the_lint_comparison(tmp_path, capsys):
    (tmp_path / "train.py").write_text(
        "import torch\n\ndef train(model, opt, loader):\n    for x, y in loader:\n        loss = model(x)\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n", encoding="utf-8")
    (tmp_path / "broken.py").write_text("def broken(:\n", encoding="utf-8")
    assert parse_from_ast.main(["--tree", str(tmp_path), "--repeat", "1", "--lint", str(tmp_path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 files; 1 built equal to libcst's parse, 0 different, 0 parsed by libcst instead" in out
    assert "x faster" in out
    assert "check_paths, 1 worker(s)" in out


def test_a_tree_that_is_not_a_directory_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as raised:
        parse_from_ast.main(["--tree", str(tmp_path / "missing")])
    assert raised.value.code == 2


def test_built_nodes_are_libcst_nodes_that_render():
    built = build("total = loss.item() + 1\n")
    assert isinstance(built, cst.Module)
    assert built.code == "total = loss.item() + 1\n"


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "fixtures").glob("*.py")))
def test_positions_from_the_spans_are_those_of_the_parsed_tree(name):
    """Every node built from an `ast` node or inside an f-string, and every line and block of
    statements, is where `positions` finds the same node of libcst's tree."""
    from loopcheck.lint.positions import node_span, register_source

    source = (REPO / "fixtures" / name).read_text(encoding="utf-8")
    parsed = parse_module(source)
    register_source(parsed, source)
    built, where = parse_from_ast.build_with_positions(source)
    checked = 0
    for native, made in parse_from_ast.pairs(parsed, built):
        if id(made) in where.origin or id(made) in where.builder.placed or isinstance(
                made, (cst.SimpleStatementLine, cst.IndentedBlock)):
            assert where.span(made) == node_span(parsed, native), (type(native).__name__, parsed.code_for_node(native))
            checked += 1
    assert checked > 50


def test_a_node_renders_with_its_own_parentheses_only():
    source = "y = f((a + b) * c, (d))\nif (ready):\n    g(x)\n"
    built, where = parse_from_ast.build_with_positions(source)
    call = built.body[0].body[0].value
    assert where.render(call) == "f((a + b) * c, (d))"
    assert where.render(call.args[0].value.left) == "(a + b)"
    assert where.render(call.args[1].value) == "(d)"
    assert where.render(built.body[1].test) == "(ready)"
    assert where.render(built.body[1].body.body[0].body[0].value.args[0].value) == "x"  # a call's parentheses are not its own


def test_a_copy_of_a_model_maps_its_nodes_and_keeps_what_is_shared():
    old, new = cst.Name("model"), cst.Name("model")

    class Step:
        def __init__(self, node, loop=None):
            self.node, self.loop, self.names = node, loop, {"target": node}
    first = Step(old)
    first.loop = first  # a cycle
    shared = [first, first, (old, "text")]
    copied = parse_from_ast.translated(shared, {id(old): new})
    assert copied[0] is copied[1] and copied[0] is not first
    assert copied[0].node is new and copied[0].loop is copied[0] and copied[0].names["target"] is new
    assert copied[2] == (new, "text")
    assert first.node is old  # the original is left as it was


@pytest.mark.parametrize("name", ["amp_clip_before_unscale.py", "lc1_zero_grad_after_backward.py"])
def test_findings_and_their_fixes_are_the_same_with_built_trees(tmp_path, name):
    shutil.copy(REPO / "fixtures" / name, tmp_path / name)
    _, _, same = parse_from_ast.lint_times(tmp_path, jobs=1, repeat=1)
    assert same["findings"] > 0
    assert same["located"] == same["fixed"] == same["findings"]
