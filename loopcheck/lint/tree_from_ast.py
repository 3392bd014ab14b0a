"""libcst trees built from Python's `ast`: the lint's parse (`read_module`).

libcst's parser is native code and still the largest single cost of a lint run; Python's own `ast`
parser is several times faster. `build` makes, from the `ast` tree and the source text, the tree
`libcst.parse_module` gives: the same node types and every field but whitespace and punctuation,
which are default ones shared per class. Nodes are made by constructors generated per class that
set the fields directly: libcst's dataclass machinery and default-whitespace factories cost more
than the node itself. Constructs it does not make (`match`, `except*`) and sources it cannot
reproduce (a BOM, identifiers `ast` normalises, an encoding other than UTF-8) make it answer None,
and the caller parses with libcst.

A built tree does not render back to its source, so the positions and texts of its nodes come from
the `ast` spans (`span_positions.SpanPositions`, held by the `BuiltModule`), and fixes, which edit
a tree and render it, are made on libcst's parse: of the one statement a local fix edits
(`fixes.fragment`), else of the whole file with the loop model mapped onto it
(`FileContext.on_parsed_tree`).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import unicodedata
from functools import cached_property
from typing import Any, Callable, TypeVar

import libcst as cst
from libcst import MaybeSentinel

from loopcheck.lint.positions import line_starts, register_source
from loopcheck.lint.span_positions import SpanPositions, parenthesized
from loopcheck.lint.summary import ast_tree
from loopcheck.lint.syntax import module_nodes, parse_module

T = TypeVar("T")

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


def _maker(cls: type) -> Callable[..., Any]:
    """A constructor of `cls` nodes taking its fields as keywords, without the dataclass machinery:
    the fields are set directly, and the defaults (whitespace, punctuation) are one shared instance
    per class instead of new ones from each node's default factories (nodes are never changed in
    place, so sharing is safe)."""
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
    return env["make"]


class _Makers:
    """`make.Call(func=..., args=...)`: the constructor of `cst.Call` (see `_maker`), made on first use."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        found = _maker(getattr(cst, name))
        setattr(self, name, found)
        return found


make = _Makers()


class BuiltModule(cst.Module):
    """A `cst.Module` built from `ast`; `positions` answers where its nodes are and their text."""

    __slots__ = ("positions",)

    positions: "SpanPositions"


_make_module = _maker(BuiltModule)


class Unsupported(Exception):
    """A construct the builder does not make: the caller parses with libcst."""


# PEP 263: a coding declaration on one of the first two lines
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_UTF8 = {"utf-8", "utf8", "utf_8", "u8"}


def _declares_other_encoding(source: str | bytes) -> bool:
    """Whether the first two lines declare an encoding other than UTF-8 (libcst then keeps the
    encoding in the module, and bytes must be decoded with it)."""
    head = source[:1024]
    lines = head.split(b"\n" if isinstance(head, bytes) else "\n", 2)[:2]
    for line in lines:
        text = line.decode("latin-1") if isinstance(line, bytes) else line
        declared = _CODING.match(text)
        if declared is not None:
            return declared.group(1).lower() not in _UTF8
    return False


def build(source: str | bytes) -> BuiltModule | None:
    """The libcst tree of `source` built from `ast`, with the positions of its nodes; None where
    libcst must parse it (which also reports what Python cannot parse)."""
    if _declares_other_encoding(source):
        return None
    if isinstance(source, bytes):
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if source.startswith("\ufeff"):
        return None
    tree = ast_tree(source)
    if tree is None:
        return None
    try:
        builder = _Builder(source)
        if not builder.ascii and _identifier_changes(source):
            builder.check_identifiers(tree)
        module = builder.module(tree)
    except (Unsupported, ValueError, RecursionError):
        return None
    object.__setattr__(module, "positions", SpanPositions(module, builder))
    return module


# Whether `read_module` builds trees from `ast` (the benchmark and the tests compare both ways).
FROM_AST = True


def read_module(source: str | bytes) -> cst.Module:
    """The libcst tree of a module's source, as the lint reads it: built from Python's `ast`
    with the positions of its nodes, or libcst's parse where the builder does not reproduce the
    source (which also raises libcst's errors)."""
    if FROM_AST:
        built = build(source)
        if built is not None:
            return built
    return parse_module(source)


def _identifier_changes(source: str) -> bool:
    """Whether `source` holds a character that NFKC changes and an identifier may contain (a
    full-width letter, a half-width kana): full-width punctuation in comments is not one."""
    return any(not c.isascii() and ("a" + c).isidentifier() and unicodedata.normalize("NFKC", c) != c
               for c in set(source))


class _Builder:
    """Makes the libcst nodes of one source from its `ast` tree, remembering where each came from."""

    def __init__(self, source: str) -> None:
        self.source = source
        # lines as `ast` counts them (`str.splitlines` also breaks at form feeds and other separators)
        self.starts = line_starts(source)
        self.lines = [source[a:b] for a, b in zip(self.starts, [*self.starts[1:], len(source)])]
        self.ascii = source.isascii()
        self.origin: dict[int, ast.AST] = {}  # id(built node) -> the ast node it was built from
        self.spans: dict[int, tuple[int, int]] = {}  # id(built node) -> its offsets, for nodes with no ast node
        self.groups: list[int] = []  # ids of lines and blocks of statements (placed from their statements)
        self.chains: dict[int, tuple[ast.BoolOp, ast.expr]] = {}  # id(inner link of `a or b or c`) -> (chain, its last value)
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
        return _make_module(body=self.statements(tree.body))

    def statements(self, body: list[ast.stmt]) -> list[cst.BaseStatement]:
        """Compound statements as they are; small ones grouped into lines (`a = 1; b = 2`)."""
        out: list[cst.BaseStatement] = []
        line: list[cst.BaseSmallStatement] = []
        for stmt in body:
            if isinstance(stmt, _COMPOUND):
                if line:
                    out.append(self.grouped(make.SimpleStatementLine(body=line)))
                    line = []
                node = self.compound(stmt)
                self.origin[id(node)] = stmt
                out.append(node)
                continue
            if line and not self.before(stmt).rstrip().endswith(";"):
                out.append(self.grouped(make.SimpleStatementLine(body=line)))
                line = []
            small = self.small(stmt)
            self.origin[id(small)] = stmt
            line.append(small)
        if line:
            out.append(self.grouped(make.SimpleStatementLine(body=line)))
        return out

    def grouped(self, node: T) -> T:
        self.groups.append(id(node))
        return node

    def suite(self, body: list[ast.stmt]) -> cst.BaseSuite:
        """`if x: return` keeps its body on the header's line; otherwise an indented block."""
        if not isinstance(body[0], _COMPOUND) and self.before(body[0]).strip():
            smalls = [self.small(s) for s in body]
            self.origin.update((id(n), s) for n, s in zip(smalls, body))
            return self.grouped(make.SimpleStatementSuite(body=smalls))
        return self.grouped(make.IndentedBlock(body=self.statements(body)))

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
            if len(s.targets) == 1:
                target = e(s.targets[0])
            else:  # `del a, b`: a tuple with no parentheses, from the first target to the last
                target = make.Tuple(elements=self.elements(s.targets))
                first, last = s.targets[0], s.targets[-1]
                self.spans[id(target)] = (self.offset(first.lineno, first.col_offset),
                                          self.offset(last.end_lineno, last.end_col_offset))
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
                                   relative=[make.Dot() for _ in range(s.level)])
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
            node = make.Arg(value=self.expr(x.value), star="*")
            self.origin[id(node)] = x  # `*rest`, the star included
            return node
        return make.Arg(value=self.expr(x))

    def keyword(self, k: ast.keyword) -> cst.Arg:
        if k.arg is None:
            node = make.Arg(value=self.expr(k.value), star="**")
        else:
            node = make.Arg(value=self.expr(k.value), keyword=make.Name(value=k.arg))
        self.origin[id(node)] = k  # `key=value` or `**kwargs`
        return node

    def arguments(self, x: ast.Call) -> list[cst.Arg]:
        """In source order: `f(a, key=1, *rest)` puts a starred argument after a keyword."""
        if x.args and x.keywords and _after(x.args[-1], x.keywords[0]):
            both = sorted([(a.lineno, a.col_offset, a) for a in x.args] + [(k.lineno, k.col_offset, k) for k in x.keywords],
                          key=lambda t: t[:2])
            return [self.keyword(n) if type(n) is ast.keyword else self.argument(n) for _, _, n in both]
        return [self.argument(a) for a in x.args] + [self.keyword(k) for k in x.keywords]

    def elements(self, elts: list[ast.expr]) -> list[cst.BaseElement]:
        out: list[cst.BaseElement] = []
        for x in elts:
            if type(x) is ast.Starred:
                node = make.StarredElement(value=self.expr(x.value))
                self.origin[id(node)] = x
                out.append(node)
            else:
                out.append(make.Element(value=self.expr(x)))
        return out

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
            for k in range(1, len(x.values)):
                if k > 1:  # `node` links values[0] to values[k - 1]: placed from the chain
                    self.chains[id(node)] = (x, x.values[k - 1])
                node = make.BooleanOperation(left=node, operator=operator(), right=e(x.values[k]))
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
        alone = parse_module(token)
        node = alone.body[0].body[0].value
        if type(node) is not cst.FormattedString:
            raise Unsupported("f-string")
        self.formatted.append((at, alone, token))
        return node

    @cached_property
    def placed(self) -> dict[int, tuple[int, cst.Module, str]]:
        """id(node inside an f-string) -> (the literal's offset, the literal parsed alone, its
        text), worked out when a position inside one is first asked for."""
        found = {}
        for at, alone, token in self.formatted:
            register_source(alone, token)
            found.update((id(inner), (at, alone, token)) for inner in module_nodes(alone)[0]
                         if isinstance(inner, cst.BaseExpression))
        return found

    def subscript(self, s: ast.expr) -> list[cst.SubscriptElement]:
        """`x[a, b:c]` has one element per index; `x[(a, b)]` one, a tuple."""
        if type(s) is ast.Tuple and s.elts and not parenthesized(self.text(s)):
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
        tokens = _string_tokens(self.text(x))
        parts = [self.literal(token, base + at) for at, token in tokens]
        node = parts[-1]
        if len(parts) > 1:
            end = base + tokens[-1][0] + len(tokens[-1][1])
            for (at, token), part in zip(tokens, parts):
                self.spans[id(part)] = (base + at, base + at + len(token))
            for (at, _), left in zip(reversed(tokens[:-1]), reversed(parts[:-1])):
                node = make.ConcatenatedString(left=left, right=node)
                self.spans[id(node)] = (base + at, end)
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


def _after(a: ast.AST, b: ast.AST) -> bool:
    return (a.lineno, a.col_offset) > (b.lineno, b.col_offset)


def _dotted(name: str) -> cst.BaseExpression:
    first, *rest = name.split(".")
    node: cst.BaseExpression = make.Name(value=first)
    for part in rest:
        node = make.Attribute(value=node, attr=make.Name(value=part))
    return node
