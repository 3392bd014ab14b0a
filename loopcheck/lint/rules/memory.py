"""Memory and loss rules (LC601-LC603): loss tensors kept across iterations, and activations
applied twice (softmax before cross-entropy, sigmoid before BCE-with-logits).

These rules need a fact the loop model does not hold: what a value *is* (a criterion output, the
probabilities of a softmax, the instance of a project class). `Flow` answers that from the syntax
of one module and of the project modules it imports: reaching assignments, constructor calls,
`forward` return values and loss wrappers, each followed a bounded number of hops. Anything it
cannot establish comes back as None, and the rules then say nothing.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import EventKind, Role
from loopcheck.lint.positions import node_span
from loopcheck.lint.rules.base import FileContext, Rule

_DEPTH = 8  # hops followed through assignments, calls and modules

# ---------------------------------------------------------------------------------------------
# torch vocabulary
# ---------------------------------------------------------------------------------------------

_ACTIVATION_FUNCS = {"softmax": "softmax", "log_softmax": "log_softmax", "sigmoid": "sigmoid", "expit": "sigmoid"}
_ACTIVATION_LAYERS = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Sigmoid": "sigmoid"}
_LOSS_CLASSES = {"CrossEntropyLoss": "ce", "NLLLoss": "nll", "BCEWithLogitsLoss": "bce_logits", "BCELoss": "bce"}
_LOSS_FUNCS = {
    "cross_entropy": "ce",
    "nll_loss": "nll",
    "binary_cross_entropy_with_logits": "bce_logits",
    "binary_cross_entropy": "bce",
}
# methods that return the same kind of tensor (a reshaped softmax is still probabilities)
_SAME_TENSOR = frozenset(
    {
        "view", "reshape", "squeeze", "unsqueeze", "flatten", "permute", "transpose", "contiguous",
        "float", "double", "half", "bfloat16", "to", "type", "cuda", "cpu", "clamp", "clamp_min",
        "clip", "view_as", "reshape_as", "t",
    }
)
# wrappers whose forward is the wrapped module's forward
_MODULE_WRAPPERS = frozenset({"DistributedDataParallel", "DataParallel", "DDP", "compile", "FullyShardedDataParallel"})
_MODULE_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "float", "half", "double", "requires_grad_"})


def _is_torch(qualified: str) -> bool:
    """A dotted name from torch, or left unresolved (`nn.X`, `F.x` in a snippet without imports)."""
    head = qualified.rpartition(".")[0]
    return not head or head.startswith("torch") or head in ("nn", "F", "functional", "nn.functional")


def _torch_name(qualified: str | None, table: dict[str, str]) -> str | None:
    """The kind of a torch name (`torch.nn.CrossEntropyLoss` -> "ce") from `table`, by last part."""
    if not qualified or not _is_torch(qualified):
        return None
    return table.get(qualified.rpartition(".")[2])


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def first_arg(call: cst.Call, index: int = 0, keyword: str | None = None) -> cst.BaseExpression | None:
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if keyword:
        for a in call.args:
            if a.keyword is not None and a.keyword.value == keyword:
                return a.value
    if index < len(positional):
        return positional[index].value
    return None


def keyword_arg(call: cst.Call, name: str) -> cst.Arg | None:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a
    return None


# ---------------------------------------------------------------------------------------------
# one module's syntax facts
# ---------------------------------------------------------------------------------------------


_SCOPE_TYPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_NOTED = frozenset(
    {
        cst.Call, cst.ClassDef, cst.FunctionDef, cst.Import, cst.ImportFrom, cst.Assign, cst.AnnAssign,
        cst.AugAssign, cst.NamedExpr, cst.For, cst.CompFor, cst.WithItem,
    }
)
# fields that hold only whitespace and punctuation
_LAYOUT = (
    "whitespace", "lpar", "rpar", "leading_lines", "lines_after_decorators", "header", "footer",
    "comma", "dot", "equal", "semicolon", "colon", "newline", "indent", "trailing_whitespace",
    "asynchronous", "first_line", "empty_lines", "lbracket", "rbracket", "lbrace", "rbrace",
)
_FIELDS: dict[type, tuple[str, ...]] = {}
_IS_NODE: dict[type, bool] = {}


def _fields_of(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The child nodes of `node` that carry meaning, in source order."""
    kind = type(node)
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(
            f.name for f in dataclasses.fields(node) if not f.name.startswith(_LAYOUT)
        )
    out: list[cst.CSTNode] = []
    for name in names:
        value = getattr(node, name)
        if type(value) in (list, tuple):
            out.extend(v for v in value if _node(v))
        elif _node(value):
            out.append(value)
    return out


def _node(value: object) -> bool:
    kind = type(value)
    found = _IS_NODE.get(kind)
    if found is None:
        found = _IS_NODE[kind] = isinstance(value, cst.CSTNode)
    return found


@dataclass(frozen=True)
class Assignment:
    order: int
    value: cst.BaseExpression | None  # None: bound by something we do not follow (for target, aug-assign)
    position: int | None  # index in a tuple target
    node: cst.CSTNode


class ModuleIndex:
    """Imports, definitions, assignments, parents and source order of one parsed module."""

    def __init__(self, path: str, module: cst.Module) -> None:
        self.path = path
        self.module = module
        self.parent: dict[int, cst.CSTNode] = {}
        self.order: dict[int, int] = {}
        self.imports: dict[str, tuple[str, int, str | None]] = {}
        self.classes: dict[str, cst.ClassDef] = {}
        self.functions: dict[str, cst.FunctionDef] = {}
        self.assigns: dict[tuple[int, str], list[Assignment]] = {}
        self.calls: list[cst.Call] = []
        self.kids: dict[int, list[cst.CSTNode]] = {}
        self._walk(module)

    # -- building ---------------------------------------------------------------------------

    def _walk(self, module: cst.Module) -> None:
        # A hand-written walk over the nodes' fields: libcst's visitor rebuilds every node, which
        # costs more than the whole analysis. Bindings get their order after their value, so a
        # name used in its own assignment (`x = f(x)`) sees the previous binding.
        order, kids, parent = self.order, self.kids, self.parent
        stack: list[tuple[cst.CSTNode, bool]] = [(module, False)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                self._note(node, len(order))
                continue
            order[id(node)] = len(order)
            children = _fields_of(node)
            kids[id(node)] = children
            for child in children:
                parent[id(child)] = node
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children))

    def children(self, node: cst.CSTNode) -> list[cst.CSTNode] | tuple[cst.CSTNode, ...]:
        found = self.kids.get(id(node))
        return found if found is not None else node.children

    def scoped(self, root: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Every node under `root` in source order, nested functions and classes left out."""
        stack = list(reversed(self.children(root)))
        while stack:
            node = stack.pop()
            yield node
            if type(node) in _SCOPE_TYPES:
                continue
            stack.extend(reversed(self.children(node)))

    def _note(self, node: cst.CSTNode, done: int) -> None:
        kind = type(node)
        if kind not in _NOTED:
            return
        if isinstance(node, cst.Call):
            self.calls.append(node)
        elif isinstance(node, cst.ClassDef):
            if self.scope_of(node) is self.module:
                self.classes.setdefault(node.name.value, node)
        elif isinstance(node, cst.FunctionDef):
            if self.scope_of(node) is self.module and not isinstance(self.parent.get(id(node)), cst.ClassDef):
                self.functions.setdefault(node.name.value, node)
        elif isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self.imports[alias.asname.name.value] = (full, 0, None)
                else:
                    head = full.split(".")[0]
                    self.imports[head] = (head, 0, None)
        elif isinstance(node, cst.ImportFrom):
            if isinstance(node.names, cst.ImportStar):
                return
            mod = dotted(node.module) if node.module is not None else ""
            level = len(node.relative)
            for alias in node.names:
                name = alias.name.value if isinstance(alias.name, cst.Name) else dotted(alias.name)
                local = name
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                if local:
                    self.imports[local] = (mod or "", level, name)
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                self._bind(target.target, node.value, node, done)
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self._bind(node.target, node.value, node, done)
        elif isinstance(node, cst.AugAssign):
            self._bind(node.target, None, node, done)
        elif isinstance(node, cst.NamedExpr):
            self._bind(node.target, node.value, node, done)
        elif isinstance(node, (cst.For, cst.CompFor)):  # bound from the first iteration on
            self._bind(node.target, None, node, self.order[id(node)])
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            self._bind(node.asname.name, None, node, done)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None, node: cst.CSTNode,
              order: int) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.elements):
                if isinstance(element, cst.StarredElement):
                    return
                self._bind_one(element.value, value, i, node, order)
        else:
            self._bind_one(target, value, None, node, order)

    def _bind_one(self, target: cst.BaseExpression, value, position, node, order: int) -> None:
        key = dotted(target)
        if key is None:
            return
        scope = self.scope_of(node)
        self.assigns.setdefault((id(scope), key), []).append(Assignment(order, value, position, node))

    # -- queries ----------------------------------------------------------------------------

    def scope_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The innermost function (or the module) whose body holds `node`."""
        current = self.parent.get(id(node))
        while current is not None:
            if isinstance(current, (cst.FunctionDef, cst.Lambda)):
                return current
            current = self.parent.get(id(current))
        return self.module

    def enclosing(self, node: cst.CSTNode, kind: type) -> cst.CSTNode | None:
        current = self.parent.get(id(node))
        while current is not None:
            if isinstance(current, kind):
                return current
            current = self.parent.get(id(current))
        return None

    def class_of(self, func: cst.CSTNode) -> cst.ClassDef | None:
        parent = self.parent.get(id(func))
        if isinstance(parent, cst.IndentedBlock):
            parent = self.parent.get(id(parent))
        return parent if isinstance(parent, cst.ClassDef) else None

    def methods(self, cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        return {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}

    def reaching(self, scope: cst.CSTNode, key: str, before: int) -> Assignment | None:
        found = [a for a in self.assigns.get((id(scope), key), ()) if a.order < before]
        return max(found, key=lambda a: a.order) if found else None

    def qualify(self, node: cst.BaseExpression) -> str | None:
        """A dotted name with its first part replaced by what the import bound it to."""
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.imports:
            mod, level, attr = self.imports[head]
            base = ".".join(p for p in ("." * level + mod if level else mod, attr) if p)
            return f"{base}.{rest}" if rest else base
        return name

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        return node_span(self.module, node)

    def line(self, node: cst.CSTNode) -> int:
        return self.span(node)[0]


# ---------------------------------------------------------------------------------------------
# what a value is
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """A node of some module of the project."""

    index: ModuleIndex
    node: cst.CSTNode

    def label(self, relative_to: str) -> str:
        """`file:line`; the file by its name alone when it sits next to the linted file."""
        path = self.index.path
        if not path.startswith("<"):
            if os.path.dirname(os.path.abspath(path)) == os.path.dirname(os.path.abspath(relative_to)):
                path = os.path.basename(path)
            elif os.path.isabs(path) and path.startswith(os.getcwd() + os.sep):
                path = os.path.relpath(path)
        return f"{path}:{self.index.line(self.node)}"


@dataclass(frozen=True)
class Obj:
    """What an object expression refers to.

    kind: "class" (instance of a project class: node is the ClassDef), "function" (a project
    function: node is the FunctionDef), "sequential" (an nn.Sequential call), "layer" (an activation
    module or function; act says which), "loss" (a torch loss module or function; loss says which),
    "call" (what another call returns: node is the Call, name its qualified callee).
    """

    kind: str
    where: Where
    name: str = ""
    act: str | None = None
    loss: str | None = None


@dataclass(frozen=True)
class Activation:
    act: str  # "softmax" | "log_softmax" | "sigmoid"
    where: Where


@dataclass(frozen=True)
class Sink:
    """A loss that receives its input at parameter `param` of the called object."""

    loss: str  # "ce" | "nll" | "bce_logits" | "bce" | "other"
    built: Where  # the loss module's constructor, or the functional call
    param: int = 0
    param_name: str | None = None


class Flow:
    """Answers questions about values, following assignments, calls and local imports."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.project = ctx.project  # None: the file is analysed on its own, imports not followed
        self.main = index_for(ctx.path, ctx.module)
        self._busy: set[tuple] = set()
        self._sinks: dict[tuple[int, int], Sink | None] = {}

    # -- modules and definitions ------------------------------------------------------------

    def load(self, index: ModuleIndex, module: str, level: int) -> ModuleIndex | None:
        if self.project is None:
            return None
        parsed = self.project.load(index.path, module, level)
        return index_for(parsed.path, parsed.module) if parsed is not None else None

    def definition(self, index: ModuleIndex, node: cst.BaseExpression, hops: int = 0) -> Where | None:
        """The project class or function a Name/Attribute refers to."""
        if hops > 3:
            return None
        if isinstance(node, cst.Name):
            name = node.value
            if name in index.classes:
                return Where(index, index.classes[name])
            if name in index.functions:
                return Where(index, index.functions[name])
            if name in index.imports:
                mod, level, attr = index.imports[name]
                if attr is None:
                    return None
                other = self.load(index, mod, level)
                if other is None:
                    return None
                return self.definition(other, cst.Name(attr), hops + 1)
            return None
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
            head = node.value.value
            if head in index.imports:
                mod, level, attr = index.imports[head]
                target = ".".join(p for p in (mod, attr) if p) if attr else mod
                other = self.load(index, target, level) if target or level else None
                if other is not None:
                    return self.definition(other, cst.Name(node.attr.value), hops + 1)
        return None

    def _own_method(self, index: ModuleIndex, expr: cst.BaseExpression, at: cst.CSTNode) -> Where | None:
        """`self.train_step` inside a method of the class that defines `train_step`."""
        if not (isinstance(expr, cst.Attribute) and dotted(expr.value) == "self"):
            return None
        scope = index.scope_of(at)
        cls = index.class_of(scope) if isinstance(scope, cst.FunctionDef) else None
        if cls is None:
            return None
        return self.method(Where(index, cls), expr.attr.value)

    def bases(self, where: Where) -> list[Where]:
        """The class and its project base classes, nearest first."""
        out, todo = [], [where]
        while todo and len(out) < 6:
            current = todo.pop(0)
            out.append(current)
            assert isinstance(current.node, cst.ClassDef)
            for base in current.node.bases:
                found = self.definition(current.index, base.value)
                if found is not None and isinstance(found.node, cst.ClassDef):
                    todo.append(found)
        return out

    def method(self, where: Where, name: str) -> Where | None:
        for cls in self.bases(where):
            found = cls.index.methods(cls.node).get(name)  # type: ignore[arg-type]
            if found is not None:
                return Where(cls.index, found)
        return None

    # -- objects ----------------------------------------------------------------------------

    def obj(self, index: ModuleIndex, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> Obj | None:
        """What the object `expr` (evaluated at node `at`) refers to."""
        if depth > _DEPTH:
            return None
        key = ("obj", id(index), id(expr), id(at))
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            return self._obj(index, expr, at, depth)
        finally:
            self._busy.discard(key)

    def _obj(self, index: ModuleIndex, expr, at, depth) -> Obj | None:
        if isinstance(expr, cst.Call):
            return self._constructed(index, expr, at, depth)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            qualified = index.qualify(expr)
            loss = _torch_name(qualified, _LOSS_FUNCS)
            last = (qualified or "").rpartition(".")[2]
            if loss is None and (last.endswith("_loss") or last == "kl_div") and _is_torch(qualified or ""):
                loss = "other"
            if loss is not None:
                return Obj("loss", Where(index, expr), name=qualified or "", loss=loss)
            act = _torch_name(qualified, _ACTIVATION_FUNCS)
            if act is not None:
                return Obj("layer", Where(index, expr), name=qualified or "", act=act)
            found = self.definition(index, expr) or self._own_method(index, expr, at)
            if found is not None and isinstance(found.node, cst.FunctionDef):
                return Obj("function", found)
            values = self.values_of(index, expr, at)
            return _same(
                [
                    self.obj(i, v, a, depth + 1) if pos is None else self._element(i, v, a, pos, depth + 1)
                    for i, v, a, pos in values
                ]
            )
        return None

    def _element(self, index, expr, at, position, depth) -> Obj | None:
        if isinstance(expr, (cst.Tuple, cst.List)) and position < len(expr.elements):
            element = expr.elements[position]
            if isinstance(element, cst.Element):
                return self.obj(index, element.value, at, depth)
        if isinstance(expr, cst.Call):
            func = self.obj(index, expr.func, at, depth)
            if func is not None and func.kind == "function":
                returns = self.returns(func.where)
                objs = [self._element(func.where.index, r, r, position, depth + 1) for r in returns]
                return _same(objs)
        return None

    def _constructed(self, index: ModuleIndex, call: cst.Call, at, depth) -> Obj | None:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in _MODULE_SELF:
            return self.obj(index, func.value, at, depth + 1)
        qualified = index.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        last = qualified.rpartition(".")[2] if qualified else None
        if last in _MODULE_WRAPPERS and call.args:
            inner = first_arg(call) or first_arg(call, keyword="module")
            return self.obj(index, inner, at, depth + 1) if inner is not None else None
        found = self.definition(index, func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if found is not None:
            if isinstance(found.node, cst.ClassDef):
                return Obj("class", found, name=found.node.name.value)
            returns = self.returns(found)
            return _same([self.obj(found.index, r, r, depth + 1) for r in returns])
        if qualified:
            loss = _torch_name(qualified, _LOSS_CLASSES)
            if loss is not None:
                return Obj("loss", Where(index, call), name=qualified, loss=loss)
            act = _torch_name(qualified, _ACTIVATION_LAYERS)
            if act is not None:
                return Obj("layer", Where(index, call), name=qualified, act=act)
            if last == "Sequential" and _is_torch(qualified):
                return Obj("sequential", Where(index, call), name=qualified)
            if last and last.endswith("Loss") and _is_torch(qualified):
                return Obj("loss", Where(index, call), name=qualified, loss="other")
            return Obj("call", Where(index, call), name=qualified)
        return None

    def values_of(self, index: ModuleIndex, expr: cst.BaseExpression, at: cst.CSTNode) -> list[tuple]:
        """What `expr` (a Name or `self.attr`) was last bound to, evaluated at node `at`: a list of
        (index, value, node, tuple position), one per call site for a parameter; [] when unknown."""
        key = dotted(expr)
        if key is None:
            return []
        scope = index.scope_of(at)
        found = index.reaching(scope, key, index.order.get(id(at), 0))
        if found is not None:
            return [] if found.value is None else [(index, found.value, found.node, found.position)]
        if isinstance(scope, cst.FunctionDef):
            if key.startswith("self.") and key.count(".") == 1:
                return self._attribute(index, scope, key)
            param = _param_index(scope, key)
            if param is not None:
                return self._arguments(index, scope, param, key)
        if "." not in key:  # a global
            found = index.reaching(index.module, key, len(index.order) + 1)
            if found is not None and found.value is not None:
                return [(index, found.value, found.node, found.position)]
        return []

    def _attribute(self, index: ModuleIndex, method: cst.FunctionDef, key: str) -> list[tuple]:
        """`self.x` in a method: the one assignment to it in the class's methods."""
        cls = index.class_of(method)
        if cls is None:
            return []
        found = [a for m in index.methods(cls).values() for a in index.assigns.get((id(m), key), ())]
        if len(found) != 1 or found[0].value is None:
            return []
        return [(index, found[0].value, found[0].node, found[0].position)]

    def _arguments(self, index: ModuleIndex, func: cst.FunctionDef, param: int, name: str) -> list[tuple]:
        """What each call site in this module passes for a parameter ([] if any site is unclear)."""
        cls = index.class_of(func)
        offset = 0
        if cls is not None:
            if not func.params.params or func.params.params[0].name.value != "self":
                return []
            offset = 1
        fname = func.name.value
        out = []
        for call in index.calls:
            callee = call.func
            if cls is not None and fname == "__init__":
                hit = isinstance(callee, cst.Name) and callee.value == cls.name.value
            elif cls is not None:
                hit = (isinstance(callee, cst.Attribute) and callee.attr.value == fname
                       and dotted(callee.value) == "self")
            else:
                hit = isinstance(callee, cst.Name) and callee.value == fname
            if not hit:
                continue
            arg = first_arg(call, param - offset, keyword=name)
            if arg is None or any(a.star for a in call.args):
                return []
            out.append((index, arg, call, None))
        return out

    def returns(self, where: Where) -> list[cst.BaseExpression]:
        """The returned expressions of a function (empty when one returns nothing)."""
        out: list[cst.BaseExpression] = []
        for ret in (n for n in where.index.scoped(where.node) if isinstance(n, cst.Return)):
            if ret.value is None:
                return []
            out.append(ret.value)
        return out

    # -- activations ------------------------------------------------------------------------

    def activation(
        self, index: ModuleIndex, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, position: int | None = None
    ) -> Activation | None:
        """The activation whose output `expr` holds (softmax, log_softmax, sigmoid), if certain."""
        if depth > _DEPTH:
            return None
        key = ("act", id(index), id(expr), id(at), position)
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            return self._activation(index, expr, at, depth, position)
        finally:
            self._busy.discard(key)

    def _activation(self, index, expr, at, depth, position) -> Activation | None:
        if isinstance(expr, cst.Subscript):
            sub = _int_index(expr)
            if sub is not None and position is None:
                return self.activation(index, expr.value, at, depth + 1, position=sub)
            if position is None:  # a slice or mask of a probability tensor is still probabilities
                return self.activation(index, expr.value, at, depth + 1)
            return None
        if isinstance(expr, (cst.Tuple, cst.List)):
            if position is not None and position < len(expr.elements):
                element = expr.elements[position]
                if isinstance(element, cst.Element):
                    return self.activation(index, element.value, at, depth + 1)
            return None
        if isinstance(expr, (cst.Name, cst.Attribute)):
            values = self.values_of(index, expr, at)
            found = []
            for v_index, v_expr, v_at, v_pos in values:
                if v_pos is not None and position is not None:
                    return None
                pos = v_pos if v_pos is not None else position
                found.append(self.activation(v_index, v_expr, v_at, depth + 1, position=pos))
            return _same_activation(found)
        if not isinstance(expr, cst.Call):
            return None
        func = expr.func
        if isinstance(func, cst.Attribute) and not _self_attribute(func):
            method = func.attr.value
            if _torch_name(index.qualify(func), _ACTIVATION_FUNCS) is None:  # a tensor method, not torch.softmax
                if method in _ACTIVATION_FUNCS:
                    return Activation(_ACTIVATION_FUNCS[method], Where(index, expr)) if position is None else None
                if method in _SAME_TENSOR:
                    return self.activation(index, func.value, at, depth + 1, position=position)
        qualified = index.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        act = _torch_name(qualified, _ACTIVATION_FUNCS)
        if act is not None:
            return Activation(act, Where(index, expr)) if position is None else None
        if qualified and qualified.rpartition(".")[2] in ("clamp", "clip") and _is_torch(qualified):
            inner = first_arg(expr)
            return self.activation(index, inner, at, depth + 1, position=position) if inner is not None else None
        callee = self.obj(index, func, at, depth + 1)
        if callee is None:
            return None
        if callee.kind == "layer":  # report where the layer is applied, not where it is built
            return Activation(callee.act, Where(index, expr)) if position is None and callee.act else None
        return self.output_of(callee, position, depth + 1)

    def output_of(self, callee: Obj, position: int | None, depth: int) -> Activation | None:
        """The activation a call of `callee` returns (a module's forward, a function)."""
        if callee.kind == "layer":
            return Activation(callee.act, callee.where) if position is None and callee.act else None
        if callee.kind == "sequential":
            call = callee.where.node
            assert isinstance(call, cst.Call)
            layers = [a for a in call.args if a.keyword is None and not a.star]
            if not layers or any(a.star for a in call.args):
                return None
            last = self.obj(callee.where.index, layers[-1].value, layers[-1].value, depth + 1)
            return self.output_of(last, position, depth + 1) if last is not None else None
        if callee.kind in ("class", "function"):
            if callee.kind == "class":
                forward = self.method(callee.where, "forward") or self.method(callee.where, "__call__")
            else:
                forward = callee.where
            if forward is None:
                return None
            returns = self.returns(forward)
            if not returns:
                return None
            found = [self.activation(forward.index, r, r, depth + 1, position=position) for r in returns]
            return _same_activation(found)
        return None

    # -- losses -----------------------------------------------------------------------------

    def sink(self, index: ModuleIndex, call: cst.Call, depth: int = 0) -> Sink | None:
        """The loss computed by `call`, and which argument is its input."""
        key = (id(index), id(call))
        if key not in self._sinks:
            callee = self.obj(index, call.func, call, depth)
            self._sinks[key] = self.sink_of(callee, depth) if callee is not None else None
        return self._sinks[key]

    def sink_of(self, callee: Obj, depth: int) -> Sink | None:
        if callee.kind == "loss" and callee.loss:
            return Sink(callee.loss, callee.where, 0, "input")
        if callee.kind not in ("class", "function") or depth > _DEPTH:
            return None
        key = ("sink", id(callee.where.node))
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            if callee.kind == "class":
                func = self.method(callee.where, "forward") or self.method(callee.where, "__call__")
            else:
                func = callee.where
            if func is None:
                return None
            return self._wrapper(func, depth)
        finally:
            self._busy.discard(key)

    def _wrapper(self, func: Where, depth: int) -> Sink | None:
        """A project function or forward that hands one of its parameters to a torch loss."""
        fnode = func.node
        assert isinstance(fnode, cst.FunctionDef)
        params = [p.name.value for p in fnode.params.params]
        skip = 1 if params and params[0] == "self" else 0
        found: list[Sink] = []
        for call in func.index.calls:
            if func.index.scope_of(call) is not fnode:
                continue
            inner = self.sink(func.index, call, depth + 1)
            if inner is None or inner.loss == "other":
                continue
            arg = first_arg(call, inner.param, keyword=inner.param_name)
            name = _param_through(func.index, arg, call) if arg is not None else None
            if name in params[skip:]:
                found.append(Sink(inner.loss, inner.built, params.index(name) - skip, name))
        if len({(s.loss, s.param) for s in found}) == 1:
            return found[0]
        return None


def _same(objs: list[Obj | None]) -> Obj | None:
    if not objs or any(o is None for o in objs):
        return None
    first = objs[0]
    if all(o.kind == first.kind and o.where.node is first.where.node for o in objs):  # type: ignore[union-attr]
        return first
    return None


def _same_activation(found: list[Activation | None]) -> Activation | None:
    if not found or any(f is None for f in found) or len({f.act for f in found}) != 1:  # type: ignore[union-attr]
        return None
    return found[0]


def _param_index(func: cst.FunctionDef, name: str) -> int | None:
    names = [p.name.value for p in (*func.params.posonly_params, *func.params.params)]
    return names.index(name) if name in names else None


def _int_index(sub: cst.Subscript) -> int | None:
    if len(sub.slice) != 1:
        return None
    inner = sub.slice[0].slice
    if isinstance(inner, cst.Index) and isinstance(inner.value, cst.Integer):
        return int(inner.value.value)
    return None


def _self_attribute(func: cst.Attribute) -> bool:
    """`self.softmax(x)` calls a submodule; `logits.softmax(1)` is a tensor method."""
    return dotted(func.value) == "self"


def _param_through(index: ModuleIndex, expr: cst.BaseExpression, at: cst.CSTNode, hops: int = 0) -> str | None:
    """The parameter name `expr` is, directly or through reshapes and local names."""
    if hops > 6:
        return None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _SAME_TENSOR:
        return _param_through(index, expr.func.value, at, hops + 1)
    if isinstance(expr, cst.Name):
        scope = index.scope_of(at)
        found = index.reaching(scope, expr.value, index.order.get(id(at), 0))
        if found is None:
            is_param = isinstance(scope, cst.FunctionDef) and _param_index(scope, expr.value) is not None
            return expr.value if is_param else None
        if found.value is None or found.position is not None:
            return None
        return _param_through(index, found.value, found.node, hops + 1)
    return None


_INDEXES: dict[int, ModuleIndex] = {}


def index_for(path: str, module: cst.Module) -> ModuleIndex:
    """The index of a parsed module (built once per module object)."""
    found = _INDEXES.get(id(module))
    if found is not None and found.module is module and found.path == path:
        return found
    if len(_INDEXES) > 64:
        _INDEXES.clear()
    built = ModuleIndex(path, module)
    _INDEXES[id(module)] = built
    return built


# ---------------------------------------------------------------------------------------------
# LC602 / LC603: an activation applied before a loss that applies it itself
# ---------------------------------------------------------------------------------------------

class _ActivationIntoLoss(Rule):
    """Shared check: a loss call whose input holds the output of `act`."""

    act: str
    sinks: frozenset[str]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        flow = Flow(ctx)
        index = flow.main
        for call in index.calls:
            sink = flow.sink(index, call)
            if sink is None or sink.loss not in self.sinks:
                continue
            arg = first_arg(call, sink.param, keyword=sink.param_name)
            if arg is None:
                continue
            found = flow.activation(index, arg, call)
            if found is None or found.act != self.act:
                continue
            yield self.finding(ctx, call, self.message(ctx, code_of(arg), found, sink))

    def message(self, ctx: FileContext, arg: str, found: Activation, sink: Sink) -> str:
        raise NotImplementedError


class SoftmaxBeforeCrossEntropy(_ActivationIntoLoss):
    code = "LC602"
    act = "softmax"
    sinks = frozenset({"ce", "nll"})

    def message(self, ctx: FileContext, arg: str, found: Activation, sink: Sink) -> str:
        where = found.where.label(ctx.path)
        built = sink.built.label(ctx.path)
        if sink.loss == "nll":
            return (
                f"`{arg}` holds softmax probabilities (softmax at {where}) and goes into NLLLoss "
                f"(built at {built}), which expects log-probabilities: use log_softmax instead of softmax"
            )
        return (
            f"`{arg}` holds softmax probabilities (softmax at {where}) and goes into cross-entropy "
            f"(built at {built}), which applies log_softmax itself: pass the logits"
        )


class SigmoidBeforeBCEWithLogits(_ActivationIntoLoss):
    code = "LC603"
    act = "sigmoid"
    sinks = frozenset({"bce_logits"})

    def message(self, ctx: FileContext, arg: str, found: Activation, sink: Sink) -> str:
        return (
            f"`{arg}` holds sigmoid outputs (sigmoid at {found.where.label(ctx.path)}) and goes into "
            f"BCEWithLogitsLoss (built at {sink.built.label(ctx.path)}), which applies the sigmoid "
            "itself: pass the logits"
        )


# ---------------------------------------------------------------------------------------------
# LC601: a loss tensor kept across iterations
# ---------------------------------------------------------------------------------------------

_KEEP_METHODS = frozenset({"append", "extend", "insert", "appendleft", "add"})
_DETACH_METHODS = frozenset({"item", "detach", "tolist", "numpy", "detach_"})
_NUMBER_FUNCS = frozenset({"float", "int", "round", "str", "bool", "len", "repr", "format"})
_KEEPS_GRAPH = frozenset(
    {
        "cpu", "to", "cuda", "clone", "mean", "sum", "squeeze", "unsqueeze", "view", "reshape",
        "float", "double", "half", "flatten", "abs", "sqrt", "exp", "log",
    }
)
_NO_GRAD = frozenset({"no_grad", "inference_mode"})


_BACKWARD_OWNERS = frozenset({"torch.autograd", "autograd", "accelerator", "self.accelerator", "fabric", "self.fabric"})


def _backward_inputs(call: cst.Call) -> list[cst.BaseExpression]:
    """The tensors a backward call differentiates: `x.backward()`, `scaler.scale(x).backward()`,
    `(x / k).backward()`, `accelerator.backward(x)`, `torch.autograd.backward(x)`."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value in ("backward", "manual_backward")):
        return []
    if func.attr.value == "manual_backward" or (call.args and dotted(func.value) in _BACKWARD_OWNERS):
        arg = first_arg(call)
        return _operands(arg) if arg is not None else []
    return _operands(func.value)


def _operands(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(expr, cst.BinaryOperation):
        return _operands(expr.left) + _operands(expr.right)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "scale":
        arg = first_arg(expr)
        return _operands(arg) if arg is not None else []
    return [expr]


def _names_in(index: ModuleIndex, expr: cst.CSTNode) -> set[str]:
    out = set()
    for node in [expr, *index.scoped(expr)]:
        if isinstance(node, (cst.Name, cst.Attribute)):
            text = dotted(node)
            if text:
                out.add(text)
    return out


def _key(expr: cst.BaseExpression) -> str:
    return dotted(expr) or code_of(expr)


def _root(expr: cst.BaseExpression) -> str | None:
    """`history` for `history["train"]`, `self.losses` for `self.losses`, None for calls."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return dotted(expr)


def _detaches(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in _DETACH_METHODS:
            return True
        if isinstance(func, cst.Name) and func.value in _NUMBER_FUNCS:
            return True
    return isinstance(expr, cst.Attribute) and expr.attr.value == "data"


class _LossTracker:
    """Which expressions of one loop body hold a loss tensor with its graph."""

    def __init__(self, flow: Flow, index: ModuleIndex, targets: set[str]) -> None:
        self.flow = flow
        self.index = index
        self.targets = targets  # what backward() is called on here: always a tensor with a graph
        self.losses: set[str] = set(targets)

    def carries(self, expr: cst.BaseExpression, at: cst.CSTNode) -> str | None:
        """The loss `expr` holds, as a tensor still attached to its graph (None: a number, detached,
        or not known to be a loss)."""
        if isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript)):
            key = _key(expr)
            if key in self.losses:
                return key
            if isinstance(expr, cst.Subscript) and _root(expr) in self.losses:
                return _key(expr)
            return None
        if isinstance(expr, cst.BinaryOperation):
            return self.carries(expr.left, at) or self.carries(expr.right, at)
        if isinstance(expr, cst.UnaryOperation):
            return self.carries(expr.expression, at)
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
            for element in expr.elements:
                found = self.carries(element.value, at)
                if found:
                    return found
            return None
        if isinstance(expr, cst.Dict):
            for element in expr.elements:
                if isinstance(element, cst.DictElement):
                    found = self.carries(element.value, at)
                    if found:
                        return found
            return None
        if isinstance(expr, cst.Call):
            if _detaches(expr):
                return None
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _KEEPS_GRAPH:
                return self.carries(func.value, at)
            if self.is_loss_call(expr):
                return code_of(expr)
        return None

    def is_loss_call(self, call: cst.Call) -> bool:
        """A criterion call, or a project helper that returns a loss it back-propagated."""
        if self.flow.sink(self.index, call) is not None:
            return True
        name = dotted(call.func)
        if name and self.index is self.flow.main and self.flow.ctx.model.role(name) is Role.CRITERION:
            return True  # `criterion` / `self.loss_fn` passed in from elsewhere
        callee = self.flow.obj(self.index, call.func, call)
        if callee is None or callee.kind != "function":
            return False
        return _returns_graph_loss(self.flow, callee.where)


def _returns_graph_loss(flow: Flow, func: Where) -> bool:
    """True when every return of `func` is a loss it called backward() on (not `.item()`)."""
    calls = (n for n in func.index.scoped(func.node) if isinstance(n, cst.Call))
    targets = {_key(e) for call in calls for e in _backward_inputs(call)}
    returns = flow.returns(func)
    return bool(returns) and bool(targets) and all(_key(r) in targets for r in returns)


class LossRetainsGraph(Rule):
    code = "LC601"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        flow = Flow(ctx)
        index = flow.main
        reported: set[int] = set()
        for loop in _training_loops(ctx, index):
            for node, holder, loss in _kept_losses(flow, index, loop):
                if id(node) in reported:
                    continue
                reported.add(id(node))
                yield self.finding(
                    ctx,
                    node,
                    f"`{holder}` keeps the loss tensor `{loss}` and its autograd graph alive across "
                    f"iterations, so memory grows every step: store `{loss}.item()` or `{loss}.detach()`",
                )


def _training_loops(ctx: FileContext, index: ModuleIndex) -> list[cst.For | cst.While]:
    """Loops of this file whose iteration calls backward (directly or through helpers)."""
    found: dict[int, cst.For | cst.While] = {}
    for loop in ctx.model.walk_loops():
        if id(loop.node) in index.order and any(e.kind is EventKind.BACKWARD for e in loop.all_events()):
            found[id(loop.node)] = loop.node
    for node_id, node in _loops_with_backward(index):
        found.setdefault(node_id, node)
    return sorted(found.values(), key=lambda n: index.order[id(n)])


def _loops_with_backward(index: ModuleIndex) -> Iterator[tuple[int, cst.For | cst.While]]:
    for call in index.calls:
        if not _backward_inputs(call):
            continue
        current = index.parent.get(id(call))
        while current is not None and not isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            if isinstance(current, (cst.For, cst.While)):
                yield id(current), current
            current = index.parent.get(id(current))


def _kept_losses(flow: Flow, index: ModuleIndex, loop: cst.For | cst.While) -> Iterator[tuple[cst.CSTNode, str, str]]:
    body = list(index.scoped(loop.body))
    targets = {_key(e) for n in body if isinstance(n, cst.Call) for e in _backward_inputs(n)}
    targets.discard("")
    # `loss = out["loss"]; loss.backward()`: `out["loss"]` is the loss too
    for n in body:
        if isinstance(n, cst.Assign) and len(n.targets) == 1 and _key(n.targets[0].target) in targets:
            if isinstance(n.value, (cst.Name, cst.Attribute, cst.Subscript)):
                targets.add(_key(n.value))
    tracker = _LossTracker(flow, index, targets)
    rebound = _rebound(index, body)
    scope = index.scope_of(loop)
    wanted = _backpropagated_names(index, scope)
    cls = index.class_of(scope) if isinstance(scope, cst.FunctionDef) else None
    if cls is not None:  # `self.buffer` filled here, reset or back-propagated in another method
        for name, method in index.methods(cls).items():
            wanted |= {n for n in _backpropagated_names(index, method) if n.startswith("self.")}
            if name != "__init__" and method is not scope:
                rebound |= {n for n in _rebound(index, list(index.scoped(method))) if n.startswith("self.")}
    for n in body:
        if isinstance(n, cst.Assign) and len(n.targets) == 1:
            target = n.targets[0].target
            name = dotted(target)
            if name is None:
                continue
            loss = None if _under_no_grad(index, n, loop) else tracker.carries(n.value, n)
            if loss and name in _names_in(index, n.value):  # running = 0.9 * running + 0.1 * loss
                tracker.losses.add(name)
                if name not in rebound and name not in wanted:
                    yield n, name, loss
                continue
            if _detaches(n.value):
                tracker.losses.discard(name)
            elif name in targets or loss:
                tracker.losses.add(name)
            else:
                tracker.losses.discard(name)
        elif isinstance(n, cst.AugAssign) and isinstance(n.operator, (cst.AddAssign, cst.SubtractAssign)):
            root = _root(n.target)
            loss = None if _under_no_grad(index, n, loop) else tracker.carries(n.value, n)
            if loss and root and root not in rebound and root not in wanted:
                yield n, _key(n.target), loss
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _KEEP_METHODS:
            holder = n.func.value
            root = _root(holder)
            if root is None or root in rebound or root in wanted or _under_no_grad(index, n, loop):
                continue
            for arg in n.args:
                loss = tracker.carries(arg.value, n)
                if loss:
                    yield n, _key(holder), loss
                    break


def _rebound(index: ModuleIndex, body: list[cst.CSTNode]) -> set[str]:
    """Names and attributes given a fresh value inside the loop body (a list reset per iteration)."""
    out: set[str] = set()
    for n in body:
        if isinstance(n, cst.Assign):
            for t in n.targets:
                for target in _flat_targets(t.target):
                    name = dotted(target)
                    if name and name not in _names_in(index, n.value):
                        out.add(name)
        elif isinstance(n, (cst.AnnAssign,)) and n.value is not None:
            name = dotted(n.target)
            if name:
                out.add(name)
        elif isinstance(n, cst.For):
            out |= {dotted(e) for e in _flat_targets(n.target)} - {None}  # type: ignore[operator]
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "clear":
            name = dotted(n.func.value)
            if name:
                out.add(name)
        elif isinstance(n, cst.Del):
            for node in index.scoped(n):
                name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
                if name:
                    out.add(name)
    return out


def _flat_targets(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [x for e in target.elements for x in _flat_targets(e.value)]
    return [target]


def _backpropagated_names(index: ModuleIndex, scope: cst.CSTNode) -> set[str]:
    """Names that feed a backward() in this function: an accumulated list that is stacked and
    back-propagated is kept on purpose."""
    nodes = list(index.scoped(scope))
    inputs = [e for n in nodes if isinstance(n, cst.Call) for e in _backward_inputs(n)]
    keys = {_key(e) for e in inputs}
    out: set[str] = set()
    for e in inputs:
        out |= _names_in(index, e)
    for n in nodes:
        if isinstance(n, cst.Assign) and any(_key(t.target) in keys for t in n.targets):
            out |= _names_in(index, n.value)
    return out


def _under_no_grad(index: ModuleIndex, node: cst.CSTNode, stop: cst.CSTNode) -> bool:
    current = index.parent.get(id(node))
    while current is not None and current is not stop:
        if isinstance(current, cst.With):
            for item in current.items:
                call = item.item
                if isinstance(call, cst.Call):
                    name = (index.qualify(call.func) or "").rpartition(".")[2]
                    if name in _NO_GRAD:
                        return True
                    if name == "set_grad_enabled":
                        arg = first_arg(call)
                        if isinstance(arg, cst.Name) and arg.value == "False":
                            return True
        current = index.parent.get(id(current))
    return False
