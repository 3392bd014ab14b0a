"""Small questions about libcst nodes that the builder asks everywhere, and the builder's bounds."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Iterator

import libcst as cst

from loopcheck.lint.loopmodel.torch_api import _MOVE_METHODS
from loopcheck.lint.positions import node_code
from loopcheck.lint.syntax import child_nodes, classes_of, walk, walk_pruned
from loopcheck.lint.values import dotted, string_value

if TYPE_CHECKING:
    from loopcheck.lint.loopmodel.units import _Unit


_MAX_DEPTH = 4  # inlined call depth
_MAX_PATHS = 64  # traces per loop iteration
_MAX_INLINED = 3000  # inlined calls per file: helpers calling helpers many times stay bounded
_SKIP_ENTRY_METHODS = frozenset({"forward", "__repr__", "__str__", "extra_repr", "__len__", "__getitem__"})


# the children of an expression that can hold calls (decided once per node type: isinstance on
# libcst's abstract base classes is slow)
_EXPRESSION_PARTS = (
    cst.BaseExpression, cst.Arg, cst.BaseElement, cst.BaseDictElement, cst.CompFor, cst.CompIf,
    cst.SubscriptElement, cst.BaseSlice, cst.ComparisonTarget, cst.FormattedStringExpression,
)
_EXPRESSION_PART: dict[type, bool] = {}
# nodes whose text is their `value` when they have no parentheses
_ATOMS = frozenset({cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.Imaginary})
# expressions without calls to visit (literals and names), or whose calls run later (definitions)
_OPAQUE_EXPRESSIONS = frozenset({
    cst.Name, cst.SimpleString, cst.Integer, cst.Float, cst.Ellipsis, cst.Imaginary,
    cst.Lambda, cst.FunctionDef, cst.ClassDef,
})


_dotted = dotted


def _body(node: cst.BaseSuite) -> list:
    return list(node.body)


# the canonical name of a parameter an inlined call bound to a string literal, before its value
STRING_ARGUMENT = "str:"
# what a name holds when it is a plain function (a nested `def` a helper hands back): no network
FUNCTION_VALUE = "<function>"


_string = string_value


def _kw(call: cst.Call, name: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def _positional(call: cst.Call, index: int) -> cst.BaseExpression | None:
    i = 0
    for arg in call.args:
        if arg.keyword is None and not arg.star:
            if i == index:
                return arg.value
            i += 1
    return None


def _literal_bool(node: cst.BaseExpression | None) -> bool | None:
    if type(node) is cst.Name and node.value in ("True", "False"):
        return node.value == "True"
    return None


# what `_walk_statements` enters: statements and suites, and the other nodes with a body that are
# not expressions (`with` items' and `match` cases' holders, `except*` handlers)
_STATEMENT_PARTS = classes_of((cst.BaseSuite, cst.BaseStatement, cst.If, cst.Else, cst.ExceptHandler, cst.Finally)) | frozenset(
    kind for kind in classes_of(cst.CSTNode)
    if "body" in getattr(kind, "__dataclass_fields__", ()) and kind not in classes_of(cst.BaseExpression))


def _walk_statements(stmt: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Statements nested in compound statements (not into functions or classes)."""
    stack = [stmt]
    parts = _STATEMENT_PARTS
    while stack:
        node = stack.pop()
        yield node
        if type(node) in (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine):
            continue
        stack.extend(child for child in child_nodes(node) if type(child) in parts)


def _is_none(node: cst.CSTNode | None) -> bool:
    return type(node) is cst.Name and node.value == "None"


def _index(node: cst.Subscript) -> cst.BaseExpression | None:
    if len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index:
        return node.slice[0].slice.value
    return None


def _target_names(node: cst.CSTNode) -> list[str]:
    if type(node) is cst.Name:
        return [node.value]
    if type(node) in (cst.Tuple, cst.List):
        out: list[str] = []
        for el in node.elements:
            out.extend(_target_names(el.value))
        return out
    if type(node) is cst.StarredElement:
        return _target_names(node.value)
    return []


def _divides(node: cst.CSTNode) -> bool:
    """Is a loss expression divided (by an accumulation count or anything else)?"""
    if type(node) is cst.BinaryOperation:
        if type(node.operator) in (cst.Divide, cst.FloorDivide):
            return True
        if type(node.operator) is cst.Multiply:
            return _is_fraction(node.left) or _is_fraction(node.right) or _divides(node.left) or _divides(node.right)
        return _divides(node.left) and _divides(node.right)
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in ("div", "div_"):
        return True
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "mean":
        # the mean over micro-batch losses: torch.stack(losses).mean()
        inner = node.func.value
        return type(inner) is cst.Call and (_dotted(inner.func) or "").rsplit(".", 1)[-1] in ("stack", "cat", "tensor")
    if type(node) is cst.Call and (_dotted(node.func) or "").rsplit(".", 1)[-1] == "mean":
        return bool(node.args) and type(node.args[0].value) in (cst.List, cst.ListComp, cst.Call)
    return False


def _is_fraction(node: cst.CSTNode) -> bool:
    if type(node) is cst.Float:
        try:
            return float(node.value) < 1.0
        except ValueError:
            return False
    return type(node) is cst.BinaryOperation and type(node.operator) is cst.Divide


_SCOPE_SUFFIX = re.compile(r"@[^.]*")


def _in_scope(name: str, scope: str) -> str:
    """`name` of `scope`'s own object: `loader@train` (no dot in the suffix: messages drop it,
    see `rules._display.user_names`)."""
    return f"{name}@{scope.replace('.', ':')}"


def written(name: str) -> str:
    """A canonical name as the code writes it: `model@train` -> `model`, `fabric@fit.backward` ->
    `fabric.backward` (a scope's own object, see `_in_scope`). What a name says about
    its object (`opt`, `train_loader`, `fabric`) is read from this."""
    return _SCOPE_SUFFIX.sub("", name) if "@" in name else name


def _split_of(name: str) -> str | None:
    last = written(name).rsplit(".", 1)[-1].lower()
    if re.search(r"val|valid|eval|test|dev|holdout", last):
        return "eval"
    if "train" in last:
        return "train"
    return None


def _recv_name(func: cst.BaseExpression) -> str | None:
    if type(func) is cst.Attribute:
        return _dotted(func.value)
    return None


def _text_or(unit: _Unit, node: cst.CSTNode | None) -> str:
    return unit.text(node) if node is not None else ""


def _is_ema_helper(fdef: cst.FunctionDef) -> bool:
    """A project helper like `update_ema(ema, model, decay)` that averages weights."""
    name = fdef.name.value.lower()
    if not re.search(r"(^|_)(ema|swa|moving_average|average)(_|$)|ema$|^ema", name):
        return False
    code = node_code(fdef.body)
    if re.search(r"\.grad\b(?!_)", code):
        return False  # `average_gradients(model, n)`: scales gradients, averages no weights
    return bool(re.search(r"\.(lerp_|mul_|add_|copy_)\(|\blerp\(", code))


_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)  # nested code runs elsewhere


def _yielded_param(fdef: cst.FunctionDef) -> int | None:
    """The index of the parameter a generator hands on item by item (`yield from dl`, or
    `for b in dl: yield b`), else None."""
    names = [p.name.value for p in (*fdef.params.posonly_params, *fdef.params.params)]
    for node in walk_pruned(fdef.body, _SCOPES):
        if type(node) is cst.Yield and type(node.value) is cst.From:
            inner = node.value.item
            if type(inner) is cst.Name and inner.value in names:
                return names.index(inner.value)
        if type(node) is cst.For and type(node.iter) is cst.Name and node.iter.value in names:
            if any(type(n) is cst.Yield for n in walk_pruned(node.body, _SCOPES)):
                return names.index(node.iter.value)
    return None


def _uncast(node: cst.BaseExpression) -> cst.BaseExpression:
    """`cast(torch.Tensor, x)` -> `x`: `typing.cast` hands back its value."""
    while (type(node) is cst.Call and len(node.args) == 2 and node.args[1].keyword is None
           and (_dotted(node.func) or "").rsplit(".", 1)[-1] == "cast"):
        node = node.args[1].value
    return node


def _scale_call(node: cst.BaseExpression) -> cst.Call | None:
    """`scaler.scale(loss)` (through `cast`): the loss multiplied by a GradScaler's scale."""
    node = _uncast(node)
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "scale" and node.args:
        return node
    return None


def _unmoved(node: cst.BaseExpression) -> cst.BaseExpression:
    """`Net(...).to(device).cuda()` -> `Net(...)`: a move hands back the object it is called on."""
    while type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _MOVE_METHODS:
        node = node.func.value
    return node


NO_GRAD_WORDS = ("no_grad", "inference_mode")


def stops_recording_with(node: cst.With, text: "Callable[[cst.CSTNode], str]") -> bool:
    """`with torch.no_grad():` / `with torch.inference_mode(), ...:` (as `text` renders its items)."""
    return any(w in text(item.item) for item in node.items for w in NO_GRAD_WORDS)


def returns_by_grad_mode(fdef: cst.FunctionDef, text: "Callable[[cst.CSTNode], str]") -> tuple[int, int]:
    """(the `return`s of `fdef` itself, those inside a `with` that turns recording off), nested
    functions and classes left out; `text` renders a node of the function's file."""
    returns = off_returns = 0
    stack: list[tuple[cst.CSTNode, bool]] = [(stmt, False) for stmt in _body(fdef.body)]
    while stack:
        node, off = stack.pop()
        if type(node) is cst.SimpleStatementLine:
            for small in node.body:
                if type(small) is cst.Return:
                    returns += 1
                    off_returns += off
            continue
        if type(node) in (cst.FunctionDef, cst.ClassDef):
            continue
        if type(node) is cst.With:
            off = off or stops_recording_with(node, text)
        stack.extend((child, off) for child in child_nodes(node) if type(child) in _STATEMENT_PARTS)
    return returns, off_returns


def _feeds_back(body: cst.BaseSuite) -> bool:
    """A name handed to a call in the loop before the loop's body binds it, and bound there from a
    call: each iteration's call reads what the previous one produced (`output, state =
    model(input, state)`, `ids = torch.cat([ids, next_id], 1)`), so its graph chains from one
    iteration to the next."""
    assigned: set[str] = set()  # bound earlier in the iteration, in source order
    carried: set[str] = set()
    from_calls: set[str] = set()  # bound from a call's result (`x = mean + std * noise` after `mean = f(x)`)
    for node, _ in walk(body):
        kind = type(node)
        if kind is cst.Expr:
            carried |= _passed(node.value) - assigned  # type: ignore[attr-defined]
        elif kind in (cst.Assign, cst.AugAssign, cst.AnnAssign) and node.value is not None:  # type: ignore[attr-defined]
            value = node.value  # type: ignore[attr-defined]
            carried |= _passed(value) - assigned
            targets = [t.target for t in node.targets] if kind is cst.Assign else [node.target]  # type: ignore[attr-defined]
            bound = {name for t in targets for name in _target_names(t)}
            if type(value) is cst.Call or from_calls & {n.value for n, _ in walk(value) if type(n) is cst.Name}:
                from_calls |= bound
            assigned |= bound
    return bool(carried & from_calls)


def _passed(expr: cst.BaseExpression) -> set[str]:
    """The names handed to the calls of `expr`, alone or in a literal tuple or list."""
    found: set[str] = set()
    for node, _ in walk(expr):
        if type(node) is cst.Arg:
            value = node.value
            if type(value) is cst.Name:
                found.add(value.value)
            elif type(value) in (cst.List, cst.Tuple):
                found.update(e.value.value for e in value.elements if type(e.value) is cst.Name)  # type: ignore[attr-defined]
    return found
