"""libcst trees built from Python's `ast`: how faithful, how fast, and what they would save the lint.

An experiment for the lint engine's index phase. libcst's parser is native code, and parsing is
the floor every lint run stands on (on a real project it is a third of the run, and two workers
parse the modules both import twice). Python's own `ast` parser is several times faster; this
builds, from its tree and the source text, the libcst tree that `libcst.parse_module` gives, with
the same node types and fields but default whitespace and punctuation. Statements it does not
build (`match`, `except*`) or sources it cannot reproduce (identifiers that `ast` normalises)
make it answer None, and the caller parses with libcst.

A built tree does not render back to the source, so the positions and texts of its nodes come
from the `ast` spans (`SpanPositions`) instead of libcst's rendering, and fixes, which edit a
tree and render it, are made on libcst's parse of the file with the loop model's nodes mapped
onto it (`pairs`, `translated`: the two trees have the same shape). The engine does not use the
built trees yet; this script measures them:

    python benchmarks/parse_from_ast.py [--tree DIR ...] [--repeat 3] [--lint DIR [--jobs N]]

`--tree` (default: the fixtures): per tree, how many files build a tree equal to libcst's (node
types and every field but whitespace and punctuation), how many differ (the first differences are
listed) and how many fall back; then libcst's parse against building from `ast`, interleaved,
with the garbage collector paused as the engine pauses it, and the ratio of the medians.

`--lint DIR`: `check_paths` on DIR with every parse built from `ast` (falling back to libcst),
positions and node texts from the spans and fixes as above, against the engine as it is,
interleaved, and the ratio of the medians; then how many of the findings are the same to the
column and the message, and how many carry the same fix as well. The first findings and errors
that differ are listed.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import gc
import keyword
import statistics
import sys
import time
import unicodedata
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import libcst as cst  # noqa: E402
from libcst import MaybeSentinel  # noqa: E402

from loopcheck.lint.positions import line_column, line_starts  # noqa: E402
from loopcheck.lint.syntax import parse_module as _libcst_parse  # noqa: E402  (kept: `--lint` swaps the engine's)

_BINARY = {ast.Add: "Add", ast.Sub: "Subtract", ast.Mult: "Multiply", ast.Div: "Divide",
           ast.FloorDiv: "FloorDivide", ast.Mod: "Modulo", ast.Pow: "Power", ast.LShift: "LeftShift",
           ast.RShift: "RightShift", ast.BitOr: "BitOr", ast.BitAnd: "BitAnd", ast.BitXor: "BitXor",
           ast.MatMult: "MatrixMultiply"}
_UNARY = {ast.UAdd: "Plus", ast.USub: "Minus", ast.Invert: "BitInvert", ast.Not: "Not"}
_COMPARE = {ast.Eq: "Equal", ast.NotEq: "NotEqual", ast.Lt: "LessThan", ast.LtE: "LessThanEqual",
            ast.Gt: "GreaterThan", ast.GtE: "GreaterThanEqual", ast.Is: "Is", ast.IsNot: "IsNot",
            ast.In: "In", ast.NotIn: "NotIn"}
_BOOLEAN = {ast.And: "And", ast.Or: "Or"}
_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor, ast.While,
             ast.With, ast.AsyncWith, ast.Try, ast.Match, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


class _Makers:
    """`make.Call(func=..., args=...)` builds a `cst.Call` without the dataclass machinery: the fields
    are set directly and the defaults (whitespace, punctuation) are one shared instance per class,
    instead of new ones made by each node's default factories, which cost more than the node."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        cls = getattr(cst, name)
        required, defaulted, lines = [], [], []
        env: dict[str, Any] = {"_new": object.__new__, "_set": object.__setattr__, "_cls": cls}
        for i, field in enumerate(dataclasses.fields(cls)):
            if field.default is not dataclasses.MISSING:
                env[f"_d{i}"] = field.default
            elif field.default_factory is not dataclasses.MISSING:
                env[f"_d{i}"] = field.default_factory()
            else:
                required.append(field.name)
                lines.append(f"    _set(n, {field.name!r}, {field.name})")
                continue
            defaulted.append(f"{field.name}=_d{i}")
            lines.append(f"    _set(n, {field.name!r}, {field.name})")
        source = f"def make({', '.join(required + defaulted)}):\n    n = _new(_cls)\n" + "\n".join(lines) + "\n    return n\n"
        exec(source, env)  # noqa: S102 - the text is made here from the dataclass's own field names
        setattr(self, name, env["make"])
        return env["make"]


make = _Makers()


class Unsupported(Exception):
    """A construct the builder does not make: the caller parses with libcst."""


def build(source: str) -> cst.Module | None:
    """The libcst tree of `source` built from `ast`, or None where libcst must parse it."""
    made = build_with_positions(source)
    return None if made is None else made[0]


def build_with_positions(source: str) -> "tuple[cst.Module, SpanPositions] | None":
    """`build`, and the positions of the built nodes, read from the `ast` spans."""
    if source.startswith("\ufeff"):
        return None
    try:
        tree = ast.parse(source)
        builder = _Builder(source)
        if not builder.ascii and _identifier_changes(source):
            builder.check_identifiers(tree)
        module = builder.module(tree)
    except (Unsupported, SyntaxError, ValueError, RecursionError):
        return None
    return module, SpanPositions(builder)


class SpanPositions:
    """Positions and texts of a built tree's nodes, from the `ast` spans (what `positions`
    computes for a parsed tree by rendering statements)."""

    def __init__(self, builder: "_Builder") -> None:
        self.builder, self.source, self.origin = builder, builder.source, builder.origin

    def offsets(self, node: cst.CSTNode) -> tuple[int, int]:
        """Where `node` is in the source: a node built from an `ast` node is where that one is (a
        tuple or generator expression without its parentheses, as libcst places it); a line or
        block of statements runs from its first to its last; an argument or element is where its
        value is. LookupError for any other node."""
        kind = type(node)
        x = self.origin.get(id(node))
        if x is None:
            placed = self.builder.placed.get(id(node))
            if placed is not None:  # inside an f-string: where it is in the literal, moved to the literal
                from loopcheck.lint.positions import node_span

                at, alone, token = placed
                line, column, end_line, end_column = node_span(alone, node)
                starts = line_starts(token)
                return at + starts[line - 1] + column - 1, at + starts[end_line - 1] + end_column - 1
            if kind in (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.IndentedBlock):
                return self.offsets(node.body[0])[0], self.offsets(node.body[-1])[1]
            if kind in (cst.Arg, cst.Element, cst.Index, cst.SubscriptElement, cst.AssignTarget, cst.Decorator):
                inner = getattr(node, "value", None) or getattr(node, "target", None) or getattr(node, "decorator", None) \
                    or getattr(node, "slice", None)
                return self.offsets(inner)
            raise LookupError(kind.__name__)
        b = self.builder
        start, end = b.offset(x.lineno, x.col_offset), b.offset(x.end_lineno, x.end_col_offset)
        if kind in (cst.Tuple, cst.GeneratorExp) and _parenthesized(self.source[start:end]):
            start, end = start + 1, end - 1
            while self.source[start] in " \t\n\\":
                start += 1
            while self.source[end - 1] in " \t\n\\,":
                if self.source[end - 1] == "," and kind is cst.Tuple:
                    break
                end -= 1
        return start, end

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(line, column, end line, end column), 1-based, the end exclusive, as `positions` gives."""
        start, end = self.offsets(node)
        starts = self.builder.starts
        return (*line_column(starts, start), *line_column(starts, end))

    def text(self, node: cst.CSTNode) -> str | None:
        """A one-line node's source text, else None (as `positions` answers)."""
        try:
            start, end = self.offsets(node)
        except LookupError:
            return None
        found = self.source[start:end]
        return None if "\n" in found else found

    def render(self, node: cst.CSTNode) -> str:
        """What `code_for_node` gives for a parsed tree's node: its text with its own parentheses;
        a statement's lines with its indentation taken off, ending in a line break."""
        start, end = self.offsets(node)
        source = self.source
        if isinstance(node, (cst.BaseStatement, cst.BaseSuite)):
            line_start = source.rfind("\n", 0, start) + 1
            indent = source[line_start:start]
            line_end = source.find("\n", end)
            text = source[line_start:len(source) if line_end == -1 else line_end + 1]
            lines = [line[len(indent):] if line.startswith(indent) else line for line in text.splitlines(keepends=True)]
            out = "".join(lines)
            return out if out.endswith("\n") else out + "\n"
        while True:  # the node's own parentheses: `(` not after a name, a call or a subscript
            i, j = start - 1, end
            while i >= 0 and source[i] in " \t\n\\":
                i -= 1
            while j < len(source) and source[j] in " \t\n\\":
                j += 1
            if i < 0 or j >= len(source) or source[i] != "(" or source[j] != ")":
                break
            k = i - 1
            while k >= 0 and source[k] in " \t":
                k -= 1
            if k >= 0 and (source[k].isalnum() or source[k] in "_)]'\""):
                w = k
                while w >= 0 and (source[w].isalnum() or source[w] == "_"):
                    w -= 1
                word = source[w + 1:k + 1]
                if not (keyword.iskeyword(word) or keyword.issoftkeyword(word)):
                    break  # a call's parentheses
            start, end = i, j + 1
        return source[start:end]


def _identifier_changes(source: str) -> bool:
    """Whether `source` holds a character that NFKC changes and an identifier may contain (a
    full-width letter, a half-width kana): full-width punctuation in comments is not one."""
    return any(not c.isascii() and ("a" + c).isidentifier() and unicodedata.normalize("NFKC", c) != c
               for c in set(source))


class _Builder:
    def __init__(self, source: str) -> None:
        self.source = source
        # lines as `ast` counts them (`str.splitlines` also breaks at form feeds and other separators)
        self.starts = line_starts(source)
        self.lines = [source[a:b] for a, b in zip(self.starts, [*self.starts[1:], len(source)])]
        self.ascii = source.isascii()
        self.origin: dict[int, ast.AST] = {}  # id(built node) -> the ast node it was built from
        self.formatted: list[tuple[int, cst.Module, str]] = []  # each f-string: (offset, parsed alone, text)

    # Source text ------------------------------------------------------------------------------
    def offset(self, lineno: int, col: int) -> int:
        """The text offset of an `ast` position (its columns count UTF-8 bytes)."""
        if self.ascii:
            return self.starts[lineno - 1] + col
        return self.starts[lineno - 1] + len(self.lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", "replace"))

    def text(self, node: ast.AST) -> str:
        return self.source[self.offset(node.lineno, node.col_offset):self.offset(node.end_lineno, node.end_col_offset)]

    def before(self, node: ast.AST) -> str:
        """The text of `node`'s first line before it."""
        return self.lines[node.lineno - 1][:self.offset(node.lineno, node.col_offset) - self.starts[node.lineno - 1]]

    def check_identifiers(self, tree: ast.Module) -> None:
        """`ast` gives identifiers NFKC-normalised (`ｔｈ` is `th`); the tree must keep them as
        written. Raise Unsupported where one is not written as `ast` gives it."""
        for node in ast.walk(tree):
            kind = type(node)
            if kind is ast.Name:
                same = self.text(node) == node.id
            elif kind is ast.Attribute:
                same = self.text(node).rstrip().endswith(node.attr)
            elif kind is ast.arg or (kind is ast.keyword and node.arg):
                same = self.text(node).startswith(node.arg)
            elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
                same = node.name in self.lines[node.lineno - 1]
            elif kind is ast.alias:
                same = all(part in self.source for part in (node.name, node.asname or ""))
            elif kind in (ast.Global, ast.Nonlocal):
                same = all(name in self.lines[node.lineno - 1] for name in node.names)
            else:
                continue
            if not same:
                raise Unsupported("identifier not as written")

    # Statements -------------------------------------------------------------------------------
    def module(self, tree: ast.Module) -> cst.Module:
        return make.Module(body=self.statements(tree.body))

    def statements(self, body: list[ast.stmt]) -> list[cst.BaseStatement]:
        """Compound statements as they are; small ones grouped into lines (`a = 1; b = 2`)."""
        out: list[cst.BaseStatement] = []
        line: list[cst.BaseSmallStatement] = []
        for stmt in body:
            if isinstance(stmt, _COMPOUND):
                if line:
                    out.append(make.SimpleStatementLine(body=line))
                    line = []
                node = self.compound(stmt)
                self.origin[id(node)] = stmt
                out.append(node)
                continue
            if line and not self.before(stmt).rstrip().endswith(";"):
                out.append(make.SimpleStatementLine(body=line))
                line = []
            small = self.small(stmt)
            self.origin[id(small)] = stmt
            line.append(small)
        if line:
            out.append(make.SimpleStatementLine(body=line))
        return out

    def suite(self, body: list[ast.stmt]) -> cst.BaseSuite:
        """`if x: return` keeps its body on the header's line; otherwise an indented block."""
        if not isinstance(body[0], _COMPOUND) and self.before(body[0]).strip():
            smalls = [self.small(s) for s in body]
            self.origin.update((id(n), s) for n, s in zip(smalls, body))
            return make.SimpleStatementSuite(body=smalls)
        return make.IndentedBlock(body=self.statements(body))

    def orelse(self, body: list[ast.stmt]) -> cst.Else | None:
        return make.Else(body=self.suite(body)) if body else None

    def small(self, s: ast.stmt) -> cst.BaseSmallStatement:
        kind, e = type(s), self.expr
        if kind is ast.Expr:
            return make.Expr(value=e(s.value))
        if kind is ast.Assign:
            return make.Assign(targets=[make.AssignTarget(target=e(t)) for t in s.targets], value=e(s.value))
        if kind is ast.AugAssign:
            operator = getattr(make, _BINARY[type(s.op)] + "Assign")()
            return make.AugAssign(target=e(s.target), operator=operator, value=e(s.value))
        if kind is ast.AnnAssign:
            return make.AnnAssign(target=e(s.target), annotation=make.Annotation(annotation=e(s.annotation)),
                                  value=self.maybe(s.value))
        if kind is ast.Return:
            return make.Return(value=self.maybe(s.value))
        if kind is ast.Pass:
            return make.Pass()
        if kind is ast.Break:
            return make.Break()
        if kind is ast.Continue:
            return make.Continue()
        if kind is ast.Raise:
            return make.Raise(exc=self.maybe(s.exc), cause=make.From(item=e(s.cause)) if s.cause else None)
        if kind is ast.Assert:
            return make.Assert(test=e(s.test), msg=self.maybe(s.msg))
        if kind is ast.Delete:
            target = e(s.targets[0]) if len(s.targets) == 1 else make.Tuple(elements=self.elements(s.targets))
            return make.Del(target=target)
        if kind in (ast.Global, ast.Nonlocal):
            names = [make.NameItem(name=make.Name(value=n)) for n in s.names]
            return make.Global(names=names) if kind is ast.Global else make.Nonlocal(names=names)
        if kind is ast.Import:
            return make.Import(names=[self.alias(a) for a in s.names])
        if kind is ast.ImportFrom:
            star = len(s.names) == 1 and s.names[0].name == "*"
            return make.ImportFrom(module=_dotted(s.module) if s.module else None,
                                   names=make.ImportStar() if star else [self.alias(a) for a in s.names],
                                   relative=[make.Dot()] * s.level)
        raise Unsupported(kind.__name__)

    def alias(self, a: ast.alias) -> cst.ImportAlias:
        return make.ImportAlias(name=_dotted(a.name),
                                asname=make.AsName(name=make.Name(value=a.asname)) if a.asname else None)

    def compound(self, s: ast.stmt) -> cst.BaseCompoundStatement:
        kind, e = type(s), self.expr
        asynchronous = make.Asynchronous() if kind in (ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith) else None
        if kind is ast.If:
            return self.if_statement(s)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef):
            return make.FunctionDef(
                name=make.Name(value=s.name), params=self.parameters(s.args), body=self.suite(s.body),
                decorators=[make.Decorator(decorator=e(d)) for d in s.decorator_list],
                returns=make.Annotation(annotation=e(s.returns)) if s.returns else None, asynchronous=asynchronous)
        if kind is ast.ClassDef:
            return make.ClassDef(
                name=make.Name(value=s.name), body=self.suite(s.body), bases=[self.argument(b) for b in s.bases],
                keywords=[self.keyword(k) for k in s.keywords],
                decorators=[make.Decorator(decorator=e(d)) for d in s.decorator_list])
        if kind in (ast.For, ast.AsyncFor):
            return make.For(target=e(s.target), iter=e(s.iter), body=self.suite(s.body), orelse=self.orelse(s.orelse),
                            asynchronous=asynchronous)
        if kind is ast.While:
            return make.While(test=e(s.test), body=self.suite(s.body), orelse=self.orelse(s.orelse))
        if kind in (ast.With, ast.AsyncWith):
            items = [make.WithItem(item=e(i.context_expr),
                                   asname=make.AsName(name=e(i.optional_vars)) if i.optional_vars else None)
                     for i in s.items]
            return make.With(items=items, body=self.suite(s.body), asynchronous=asynchronous)
        if kind is ast.Try:
            handlers = [make.ExceptHandler(body=self.suite(h.body), type=self.maybe(h.type),
                                           name=make.AsName(name=make.Name(value=h.name)) if h.name else None)
                        for h in s.handlers]
            return make.Try(body=self.suite(s.body), handlers=handlers, orelse=self.orelse(s.orelse),
                            finalbody=make.Finally(body=self.suite(s.finalbody)) if s.finalbody else None)
        raise Unsupported(kind.__name__)

    def if_statement(self, s: ast.If) -> cst.If:
        """`elif` is an `If` in the `orelse` of libcst's `If`; `else: if` is an `Else` holding one."""
        orelse: cst.If | cst.Else | None = None
        if s.orelse:
            first = s.orelse[0]
            if len(s.orelse) == 1 and type(first) is ast.If and self.lines[first.lineno - 1].startswith(
                    "elif", self.offset(first.lineno, first.col_offset) - self.starts[first.lineno - 1]):
                orelse = self.if_statement(first)
                self.origin[id(orelse)] = first
            else:
                orelse = make.Else(body=self.suite(s.orelse))
        return make.If(test=self.expr(s.test), body=self.suite(s.body), orelse=orelse)

    def parameters(self, a: ast.arguments) -> cst.Parameters:
        positional = a.posonlyargs + a.args
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)

        def param(arg: ast.arg, default: ast.expr | None, star: str = "") -> cst.Param:
            return make.Param(name=make.Name(value=arg.arg), star=star, default=self.maybe(default),
                              annotation=make.Annotation(annotation=self.expr(arg.annotation)) if arg.annotation else None)
        made = [param(arg, default) for arg, default in zip(positional, defaults)]
        only = len(a.posonlyargs)
        star_arg: Any = MaybeSentinel.DEFAULT
        if a.vararg is not None:
            star_arg = param(a.vararg, None, "*")
        elif a.kwonlyargs:
            star_arg = make.ParamStar()
        return make.Parameters(
            params=made[only:], posonly_params=made[:only], posonly_ind=make.ParamSlash() if only else MaybeSentinel.DEFAULT,
            star_arg=star_arg, kwonly_params=[param(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults)],
            star_kwarg=param(a.kwarg, None, "**") if a.kwarg is not None else None)

    # Expressions ------------------------------------------------------------------------------
    def maybe(self, x: ast.expr | None) -> cst.BaseExpression | None:
        return None if x is None else self.expr(x)

    def argument(self, x: ast.expr) -> cst.Arg:
        if type(x) is ast.Starred:
            return make.Arg(value=self.expr(x.value), star="*")
        return make.Arg(value=self.expr(x))

    def keyword(self, k: ast.keyword) -> cst.Arg:
        if k.arg is None:
            return make.Arg(value=self.expr(k.value), star="**")
        return make.Arg(value=self.expr(k.value), keyword=make.Name(value=k.arg))

    def arguments(self, x: ast.Call) -> list[cst.Arg]:
        """In source order: `f(a, key=1, *rest)` puts a starred argument after a keyword."""
        if x.args and x.keywords and _after(x.args[-1], x.keywords[0]):
            both = sorted([(a.lineno, a.col_offset, a) for a in x.args] + [(k.lineno, k.col_offset, k) for k in x.keywords],
                          key=lambda t: t[:2])
            return [self.keyword(n) if type(n) is ast.keyword else self.argument(n) for _, _, n in both]
        return [self.argument(a) for a in x.args] + [self.keyword(k) for k in x.keywords]

    def elements(self, elts: list[ast.expr]) -> list[cst.BaseElement]:
        return [make.StarredElement(value=self.expr(x.value)) if type(x) is ast.Starred else make.Element(value=self.expr(x))
                for x in elts]

    def comprehension(self, generators: list[ast.comprehension]) -> cst.CompFor:
        inner: cst.CompFor | None = None
        for g in reversed(generators):
            inner = make.CompFor(target=self.expr(g.target), iter=self.expr(g.iter),
                                 ifs=[make.CompIf(test=self.expr(t)) for t in g.ifs], inner_for_in=inner,
                                 asynchronous=make.Asynchronous() if g.is_async else None)
        assert inner is not None
        return inner

    def expr(self, x: ast.expr) -> cst.BaseExpression:
        node = self._expr(x)
        self.origin[id(node)] = x
        return node

    def _expr(self, x: ast.expr) -> cst.BaseExpression:
        kind, e = type(x), self.expr
        if kind is ast.Name:
            return make.Name(value=x.id)
        if kind is ast.Attribute:
            return make.Attribute(value=e(x.value), attr=make.Name(value=x.attr))
        if kind is ast.Call:
            return make.Call(func=e(x.func), args=self.arguments(x))
        if kind is ast.Constant:
            return self.constant(x)
        if kind is ast.BinOp:
            return make.BinaryOperation(left=e(x.left), operator=getattr(make, _BINARY[type(x.op)])(), right=e(x.right))
        if kind is ast.UnaryOp:
            return make.UnaryOperation(operator=getattr(make, _UNARY[type(x.op)])(), expression=e(x.operand))
        if kind is ast.BoolOp:  # `a and b and c` nests to the left
            operator = getattr(make, _BOOLEAN[type(x.op)])
            node = e(x.values[0])
            for value in x.values[1:]:
                node = make.BooleanOperation(left=node, operator=operator(), right=e(value))
            return node
        if kind is ast.Compare:
            return make.Comparison(left=e(x.left), comparisons=[
                make.ComparisonTarget(operator=getattr(make, _COMPARE[type(op)])(), comparator=e(c))
                for op, c in zip(x.ops, x.comparators)])
        if kind is ast.Subscript:
            return make.Subscript(value=e(x.value), slice=self.subscript(x.slice))
        if kind is ast.Tuple:
            return make.Tuple(elements=self.elements(x.elts))
        if kind is ast.List:
            return make.List(elements=self.elements(x.elts))
        if kind is ast.Set:
            return make.Set(elements=self.elements(x.elts))
        if kind is ast.Dict:
            return make.Dict(elements=[make.StarredDictElement(value=e(v)) if k is None else make.DictElement(key=e(k), value=e(v))
                                       for k, v in zip(x.keys, x.values)])
        if kind is ast.IfExp:
            return make.IfExp(test=e(x.test), body=e(x.body), orelse=e(x.orelse))
        if kind is ast.Lambda:
            return make.Lambda(params=self.parameters(x.args), body=e(x.body))
        if kind in (ast.ListComp, ast.SetComp, ast.GeneratorExp):
            name = {ast.ListComp: "ListComp", ast.SetComp: "SetComp", ast.GeneratorExp: "GeneratorExp"}[kind]
            return getattr(make, name)(elt=e(x.elt), for_in=self.comprehension(x.generators))
        if kind is ast.DictComp:
            return make.DictComp(key=e(x.key), value=e(x.value), for_in=self.comprehension(x.generators))
        if kind is ast.Await:
            return make.Await(expression=e(x.value))
        if kind is ast.Yield:
            return make.Yield(value=self.maybe(x.value))
        if kind is ast.YieldFrom:
            return make.Yield(value=make.From(item=e(x.value)))
        if kind is ast.NamedExpr:
            return make.NamedExpr(target=e(x.target), value=e(x.value))
        if kind is ast.JoinedStr:
            return self.string(x)
        raise Unsupported(kind.__name__)

    def literal(self, token: str, at: int) -> cst.BaseExpression:
        """One literal at offset `at`. An f-string's parts come from libcst's own parser, on the
        literal alone; their places from its positions, moved to where the literal is."""
        prefix = token[:len(token) - len(token.lstrip("rRbBuUfF"))].lower()
        if "f" not in prefix:
            return make.SimpleString(value=token)
        alone = _libcst_parse(token)
        node = alone.body[0].body[0].value
        if type(node) is not cst.FormattedString:
            raise Unsupported("f-string")
        self.formatted.append((at, alone, token))
        return node

    @cached_property
    def placed(self) -> dict[int, tuple[int, cst.Module, str]]:
        """id(node inside an f-string) -> (the literal's offset, the literal parsed alone, its
        text), worked out when a position inside one is first asked for."""
        from loopcheck.lint.positions import register_source
        from loopcheck.lint.syntax import module_nodes

        found = {}
        for at, alone, token in self.formatted:
            register_source(alone, token)
            found.update((id(inner), (at, alone, token)) for inner in module_nodes(alone)[0]
                         if isinstance(inner, cst.BaseExpression))
        return found

    def subscript(self, s: ast.expr) -> list[cst.SubscriptElement]:
        """`x[a, b:c]` has one element per index; `x[(a, b)]` one, a tuple."""
        if type(s) is ast.Tuple and s.elts and not _parenthesized(self.text(s)):
            return [make.SubscriptElement(slice=self.index(x)) for x in s.elts]
        return [make.SubscriptElement(slice=self.index(s))]

    def index(self, s: ast.expr) -> cst.BaseSlice:
        if type(s) is ast.Slice:
            return make.Slice(lower=self.maybe(s.lower), upper=self.maybe(s.upper), step=self.maybe(s.step))
        if type(s) is ast.Starred:
            return make.Index(value=self.expr(s.value), star="*")
        return make.Index(value=self.expr(s))

    def constant(self, x: ast.Constant) -> cst.BaseExpression:
        value = x.value
        if value is None or value is True or value is False:
            return make.Name(value=repr(value))
        if value is Ellipsis:
            return make.Ellipsis()
        if isinstance(value, (str, bytes)):
            return self.string(x)
        text = self.text(x)
        if isinstance(value, complex):
            return make.Imaginary(value=text)
        if isinstance(value, float):
            return make.Float(value=text)
        return make.Integer(value=text)

    def string(self, x: ast.expr) -> cst.BaseExpression:
        """A literal as written; adjacent literals (`"a" "b"`) nest to the right in libcst."""
        base = self.offset(x.lineno, x.col_offset)
        parts = [self.literal(token, base + at) for at, token in _string_tokens(self.text(x))]
        node = parts[-1]
        for left in reversed(parts[:-1]):
            node = make.ConcatenatedString(left=left, right=node)
        return node




def _string_tokens(text: str) -> list[tuple[int, str]]:
    """The literals of one string expression's source (adjacent ones, with comments and line
    breaks between them), each with its offset in `text`."""
    out: list[tuple[int, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n\\()":
            i += 1
            continue
        if c == "#":
            end = text.find("\n", i)
            i = n if end == -1 else end
            continue
        start = i
        while i < n and text[i] in "rRbBuUfF":
            i += 1
        if i >= n or text[i] not in "'\"":
            raise Unsupported("string")
        quote = text[i] * 3 if text.startswith(text[i] * 3, i) else text[i]
        j = i + len(quote)
        while not text.startswith(quote, j):
            if j >= n:
                raise Unsupported("string")
            j += 2 if text[j] == "\\" else 1
        out.append((start, text[start:j + len(quote)]))
        i = j + len(quote)
    if not out:
        raise Unsupported("string")
    return out


def _parenthesized(text: str) -> bool:
    """Whether `text` is wholly inside one pair of parentheses (strings are not looked into: a
    subscript's tuple of plain indexes)."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, c in enumerate(text):
        depth += (c in "([{") - (c in ")]}")
        if depth == 0:
            return i == len(text) - 1
    return False


def _after(a: ast.AST, b: ast.AST) -> bool:
    return (a.lineno, a.col_offset) > (b.lineno, b.col_offset)


def _dotted(name: str) -> cst.BaseExpression:
    first, *rest = name.split(".")
    node: cst.BaseExpression = make.Name(value=first)
    for part in rest:
        node = make.Attribute(value=node, attr=make.Name(value=part))
    return node


# Comparing trees ----------------------------------------------------------------------------------
_TRIVIA = {"lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after_decorators", "header", "footer",
           "newline", "indent", "trailing_whitespace", "equal", "colon", "second_colon", "lbracket", "rbracket",
           "lbrace", "rbrace", "dot", "encoding", "default_indent", "default_newline", "has_trailing_newline",
           "arrow"}
_COMPARED: dict[type, list[str]] = {}


def _compared(node: cst.CSTNode) -> list[str]:
    """The fields of a node's class that trees are compared on: all but whitespace and punctuation."""
    names = _COMPARED.get(type(node))
    if names is None:
        names = _COMPARED[type(node)] = [f.name for f in dataclasses.fields(node)
                                         if f.name not in _TRIVIA and "whitespace" not in f.name]
    return names


def difference(a: Any, b: Any) -> str | None:
    """Where two trees differ in a node type or a field other than whitespace and punctuation,
    as a path from the module; None when they do not."""
    stack = [(a, b, "module")]
    while stack:
        a, b, path = stack.pop()
        sequences = isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
        if type(a) is not type(b) and not sequences:
            return f"{path}: {type(a).__name__} against {type(b).__name__}"
        if isinstance(a, cst.CSTNode):
            stack.extend((getattr(a, name), getattr(b, name), f"{path}.{name}") for name in reversed(_compared(a)))
        elif sequences:
            if len(a) != len(b):
                return f"{path}: {len(a)} items against {len(b)}"
            stack.extend((x, y, f"{path}[{i}]") for i, (x, y) in reversed(list(enumerate(zip(a, b)))))
        elif a != b:
            return f"{path}: {a!r} against {b!r}"
    return None


def pairs(a: Any, b: Any) -> Iterable[tuple[cst.CSTNode, cst.CSTNode]]:
    """The nodes of two trees of the same shape (`difference` finds none), side by side."""
    stack = [(a, b)]
    while stack:
        a, b = stack.pop()
        if isinstance(a, cst.CSTNode):
            yield a, b
            stack.extend((getattr(a, name), getattr(b, name)) for name in _compared(a))
        elif isinstance(a, (list, tuple)):
            stack.extend(zip(a, b))


def translated(value: Any, nodes: dict[int, Any], done: dict[int, Any] | None = None) -> Any:
    """A copy of `value` (a loop model, or any part of one) in which each node that `nodes`
    maps (by id) is replaced by its counterpart; shared and cyclic parts stay shared."""
    import copy
    import enum

    done = {} if done is None else done
    key = id(value)
    if key in nodes:
        return nodes[key]
    if key in done:
        return done[key]
    if value is None or isinstance(value, (str, int, float, bool, bytes, enum.Enum, type, cst.CSTNode)):
        return value
    out: Any
    if isinstance(value, list):
        out = done[key] = []
        out.extend(translated(x, nodes, done) for x in value)
        return out
    if isinstance(value, dict):
        out = done[key] = {}
        out.update((translated(k, nodes, done), translated(v, nodes, done)) for k, v in value.items())
        return out
    if isinstance(value, (tuple, set, frozenset)):
        made = [translated(x, nodes, done) for x in value]
        out = done[key] = type(value)(made) if not hasattr(value, "_fields") else type(value)(*made)
        return out
    if callable(value) and not hasattr(value, "__dict__") and not hasattr(value, "__slots__"):
        return value
    try:
        out = done[key] = copy.copy(value)
    except Exception:  # noqa: BLE001 - left as it is
        return value
    names = list(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        names.extend(n for n in getattr(cls, "__slots__", ()) if isinstance(n, str))
    for name in dict.fromkeys(names):
        if name.startswith("__") or not hasattr(value, name):
            continue
        try:
            object.__setattr__(out, name, translated(getattr(value, name), nodes, done))
        except (AttributeError, TypeError):
            pass
    return out


# Measuring ----------------------------------------------------------------------------------------
def _sources(tree: Path) -> list[tuple[Path, str]]:
    found = []
    for path in sorted(tree.rglob("*.py")):
        try:
            found.append((path, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return found


def fidelity(sources: Iterable[tuple[Path, str]], shown: int = 5) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """How many sources build a tree equal to libcst's, differ, or fall back to libcst; and the
    sources libcst parses (what it cannot parse is not compared)."""
    same, fallback, differ, parsed = 0, 0, [], []
    for path, text in sources:
        try:
            module = _libcst_parse(text)
        except (cst.ParserSyntaxError, SyntaxError, RecursionError, ValueError):
            continue
        parsed.append((path, text))
        built = build(text)
        if built is None:
            fallback += 1
            continue
        where = difference(module, built)
        if where is None:
            same += 1
        else:
            differ.append(f"{path}: {where}")
    return {"same": same, "fallback": fallback, "differ": len(differ), "examples": differ[:shown]}, parsed


def parse_times(sources: list[tuple[Path, str]], repeat: int) -> tuple[float, float]:
    """Medians of libcst's parse and of building from `ast` (libcst where it falls back), over
    the same sources, interleaved, with the collector paused as the engine pauses it."""
    def native() -> None:
        for _, text in sources:
            _libcst_parse(text)

    def built() -> None:
        for _, text in sources:
            if build(text) is None:
                _libcst_parse(text)
    times: dict[str, list[float]] = {"native": [], "built": []}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for name, run in (("native", native), ("built", built)):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
                gc.collect()
    finally:
        if enabled:
            gc.enable()
    return statistics.median(times["native"]), statistics.median(times["built"])


def lint_times(tree: Path, jobs: int, repeat: int, shown: int = 5) -> tuple[float, float, dict[str, int]]:
    """Medians of `check_paths` on `tree` as the engine is, and with every parse built from
    `ast` (positions and texts from the spans), interleaved; and of the findings as it is, how
    many the built run has too, to the column and the message, and with the same fix. The first
    findings and errors that differ are printed."""
    from loopcheck.lint import positions, syntax
    from loopcheck.lint.engine import check_paths
    from loopcheck.lint.memo import facts

    from loopcheck.lint import fixes
    from loopcheck.lint.context import FileContext

    native, register, render = syntax.parse_module, positions.register_source, cst.Module.code_for_node
    attach = fixes.attach_fixes
    built_positions: dict[int, SpanPositions] = {}  # id(built node) -> its tree's positions (one run)

    def attach_fixes(findings: list, ctx: FileContext) -> list:
        """Fixes edit a tree that renders the source: libcst's parse of the file, with the loop
        model's nodes of this file mapped onto it (the trees have the same shape)."""
        if id(ctx.module) not in built_positions or not any(f.code in fixes.FIXERS for f in findings):
            return attach(findings, ctx)
        parsed = native(ctx.source)
        register(parsed, ctx.source)
        nodes = {id(made): node for node, made in pairs(parsed, ctx.module)}
        mapped = FileContext(ctx.path, ctx.source, parsed, ctx.project)
        mapped.__dict__["model"] = translated(ctx.model, nodes)
        return attach(findings, mapped)

    def from_ast(source: str | bytes) -> cst.Module:
        text = source.decode("utf-8") if isinstance(source, bytes) else source
        made = build_with_positions(text)
        if made is None:
            return native(source)
        module, where = made
        facts(module)["positions.source"] = where
        built_positions.update(dict.fromkeys(where.origin, where))
        built_positions[id(module)] = where
        return module

    def register_source(module: cst.Module, source: str) -> None:
        if id(module) not in built_positions:
            register(module, source)

    def code_for_node(self: cst.Module, node: cst.CSTNode) -> str:
        where = built_positions.get(id(node))
        if where is not None:
            try:
                return where.render(node)
            except LookupError:
                pass
        return render(self, node)
    times: dict[str, list[float]] = {"native": [], "built": []}
    found: dict[str, list] = {"native": [], "built": []}
    failed: dict[str, list[str]] = {"native": [], "built": []}
    for _ in range(repeat):
        for name in ("native", "built"):
            if name == "built":  # the engine and the project import these from there at each use
                syntax.parse_module, positions.register_source, cst.Module.code_for_node = from_ast, register_source, code_for_node
                fixes.attach_fixes = attach_fixes
            try:
                start = time.perf_counter()
                report = check_paths([tree], jobs=jobs)
                times[name].append(time.perf_counter() - start)
            finally:
                syntax.parse_module, positions.register_source, cst.Module.code_for_node = native, register, render
                fixes.attach_fixes = attach
                built_positions.clear()
            found[name] = sorted((f.path, f.line, f.column, f.end_line, f.end_column, f.code, f.message, repr(f.fix))
                                 for f in report.findings)
            failed[name] = [f"{e.path}: {e.message}" for e in report.errors]
    located = len({f[:7] for f in found["native"]} & {f[:7] for f in found["built"]})
    fixed = len(set(found["native"]) & set(found["built"]))
    for f in sorted({f[:7] for f in found["native"]} - {f[:7] for f in found["built"]})[:shown]:
        print(f"  only as it is: {f[0]}:{f[1]}:{f[2]} {f[5]} {f[6][:90]}")
    for f in sorted({f[:7] for f in found["built"]} - {f[:7] for f in found["native"]})[:shown]:
        print(f"  only built:    {f[0]}:{f[1]}:{f[2]} {f[5]} {f[6][:90]}")
    for error in sorted(set(failed["built"]) - set(failed["native"]))[:shown]:
        print(f"  error built:   {error[:200]}")
    return (statistics.median(times["native"]), statistics.median(times["built"]),
            {"findings": len(found["native"]), "located": located, "fixed": fixed})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, nargs="+", default=[REPO / "fixtures"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lint", type=Path, nargs="*", default=[], help="also time check_paths on these trees")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    for tree in [*args.tree, *args.lint]:
        if not tree.is_dir():
            parser.error(f"{tree}: not a directory")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for tree in args.tree:
        found, sources = fidelity(_sources(tree))
        native, built = parse_times(sources, args.repeat)
        print(f"{tree}: {len(sources)} files; {found['same']} built equal to libcst's parse, {found['differ']} "
              f"different, {found['fallback']} parsed by libcst instead")
        for example in found["examples"]:
            print(f"  differs: {example}")
        print(f"  parse: libcst {native:.2f} s, built from ast {built:.2f} s: {native / built:.2f}x faster "
              f"(medians of {args.repeat})")
    for tree in args.lint:
        native, built, same = lint_times(tree, args.jobs, args.repeat)
        print(f"{tree}: check_paths, {args.jobs} worker(s): as it is {native:.2f} s, parses built from ast "
              f"{built:.2f} s: {native / built:.2f}x (medians of {args.repeat}); of its {same['findings']} findings "
              f"{same['located']} the same to the column and the message, {same['fixed']} with the same fix too")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
