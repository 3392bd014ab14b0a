"""Value tracing over the syntax of one module and of the project modules it imports: what a
name or `self.x` was last bound to, which project class or function an expression names (through
relative and absolute imports), what a call constructs, and what a parameter receives at its call
sites. Each question is followed a bounded number of hops; anything that cannot be established
comes back as None (or []), and the rules built on it then say nothing.

`ModuleIndex` holds one module's facts (imports, definitions, assignments, parents, source order);
`Flow` answers questions across modules. Nothing here knows a rule code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import libcst as cst

from loopcheck.lint.citations import placed
from loopcheck.lint.memo import facts, known
from loopcheck.lint.positions import node_span
from loopcheck.lint.summary import MODULE_PART
from loopcheck.lint.syntax import CLOSED_KINDS, module_walk

if TYPE_CHECKING:
    from loopcheck.lint.context import FileContext

DEPTH = 8  # hops followed through assignments, calls and modules

# ---------------------------------------------------------------------------------------------
# torch vocabulary
# ---------------------------------------------------------------------------------------------

ACTIVATION_FUNCS = {"softmax": "softmax", "log_softmax": "log_softmax", "sigmoid": "sigmoid", "expit": "sigmoid"}
ACTIVATION_LAYERS = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Sigmoid": "sigmoid"}
LOSS_CLASSES = {"CrossEntropyLoss": "ce", "NLLLoss": "nll", "BCEWithLogitsLoss": "bce_logits", "BCELoss": "bce"}
LOSS_FUNCS = {
    "cross_entropy": "ce",
    "nll_loss": "nll",
    "binary_cross_entropy_with_logits": "bce_logits",
    "binary_cross_entropy": "bce",
}
# wrappers whose forward is the wrapped module's forward
_MODULE_WRAPPERS = frozenset({"DistributedDataParallel", "DataParallel", "DDP", "compile", "FullyShardedDataParallel"})
_MODULE_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "float", "half", "double", "requires_grad_"})


def is_torch(qualified: str) -> bool:
    """A dotted name from torch, or left unresolved (`nn.X`, `F.x` in a snippet without imports)."""
    head = qualified.rpartition(".")[0]
    return not head or head.startswith("torch") or head in ("nn", "F", "functional", "nn.functional")


def torch_name(qualified: str | None, table: dict[str, str]) -> str | None:
    """The kind of a torch name (`torch.nn.CrossEntropyLoss` -> "ce") from `table`, by last part."""
    if not qualified or not is_torch(qualified):
        return None
    return table.get(qualified.rpartition(".")[2])


# ---------------------------------------------------------------------------------------------
# small syntax helpers
# ---------------------------------------------------------------------------------------------


def dotted(expr: cst.CSTNode | None) -> str | None:
    """`a.b.c` for a Name / Attribute chain, else None."""
    kind = type(expr)
    if kind is cst.Name:  # exact types: isinstance against libcst's ABCs is slow
        return expr.value  # type: ignore[union-attr]
    if kind is cst.Attribute and type(expr.value) is cst.Name:  # `a.b`, the usual chain, without a list
        return f"{expr.value.value}.{expr.attr.value}"  # type: ignore[union-attr]
    parts = name_chain(expr)
    return ".".join(parts) if parts is not None else None


def name_chain(expr: cst.CSTNode | None) -> list[str] | None:
    """`["a", "b", "c"]` for `a.b.c` (a Name / Attribute chain), else None."""
    kind = type(expr)
    if kind is cst.Name:
        return [expr.value]  # type: ignore[union-attr]
    if kind is not cst.Attribute:
        return None
    if type(expr.value) is cst.Name:  # type: ignore[union-attr]
        return [expr.value.value, expr.attr.value]  # type: ignore[union-attr]
    parts = [expr.attr.value]  # type: ignore[union-attr]
    node = expr.value  # type: ignore[union-attr]
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    parts.reverse()
    return parts


def string_value(node: cst.CSTNode | None) -> str | None:
    """The value of a string literal (implicitly concatenated ones too), else None."""
    if type(node) is cst.SimpleString:
        text = node.value
        quote = text[0]
        # most literals are plain quotes around text with no escapes: their value is that text
        # (`evaluated_value` compiles each literal with `ast`)
        if quote in "'\"" and len(text) >= 2 and "\\" not in text and "\r" not in text:
            return text[3:-3] if text.startswith(quote * 3) and len(text) >= 6 else text[1:-1]
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd literals are simply not understood
            return None
        return value if isinstance(value, str) else None
    return None


def first_arg(call: cst.Call, index: int = 0, keyword: str | None = None) -> cst.BaseExpression | None:
    """The value passed as `keyword=`, else the `index`-th positional argument, else None."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if keyword:
        for a in call.args:
            if a.keyword is not None and a.keyword.value == keyword:
                return a.value
    if index < len(positional):
        return positional[index].value
    return None


def keyword_arg(call: cst.Call, name: str) -> cst.Arg | None:
    """The `name=` argument of a call, or None."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a
    return None


# ---------------------------------------------------------------------------------------------
# one module's syntax facts
# ---------------------------------------------------------------------------------------------


_SCOPE_TYPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_FUNCTION_TYPES = frozenset({cst.FunctionDef, cst.Lambda})


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
        self.imports: dict[str, tuple[str, int, str | None]] = {}
        self.classes: dict[str, cst.ClassDef] = {}
        self.functions: dict[str, cst.FunctionDef] = {}
        self.assigns: dict[tuple[int, str], list[Assignment]] = {}
        self.calls: list[cst.Call] = []
        self._scopes: dict[int, cst.CSTNode] = {}
        self._calls_by_scope: dict[int, list[cst.Call]] | None = None
        self._calls_by_callee: dict[tuple[str, str], list[cst.Call]] | None = None
        self.parent: dict[int, cst.CSTNode]
        self.order: dict[int, int]  # source order of every node
        self.kids: dict[int, list[cst.CSTNode]]
        self._walk(module)

    # -- building ---------------------------------------------------------------------------

    def _walk(self, module: cst.Module) -> None:
        # The shared walk reads the nodes' fields directly: libcst's visitor rebuilds every node,
        # which costs more than the whole analysis. Bindings get their order after their value,
        # so a name used in its own assignment (`x = f(x)`) sees the previous binding.
        walk = module_walk(module)
        self.parent, self.order, self.kids = walk.parents, walk.order, walk.kids
        note = self._note
        for node, done in walk.closed:
            note(node, done)

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
        if kind not in CLOSED_KINDS:
            return
        if type(node) is cst.Call:
            self.calls.append(node)
        elif type(node) is cst.ClassDef:
            if self.scope_of(node) is self.module:
                self.classes.setdefault(node.name.value, node)
        elif type(node) is cst.FunctionDef:
            if self.scope_of(node) is self.module and not isinstance(self.parent.get(id(node)), cst.ClassDef):
                self.functions.setdefault(node.name.value, node)
        elif type(node) is cst.Import:
            for alias in node.names:
                full = dotted(alias.name) or ""
                if alias.asname is not None and type(alias.asname.name) is cst.Name:
                    self.imports[alias.asname.name.value] = (full, 0, None)
                else:
                    head = full.split(".")[0]
                    self.imports[head] = (head, 0, None)
        elif type(node) is cst.ImportFrom:
            if type(node.names) is cst.ImportStar:
                return
            mod = dotted(node.module) if node.module is not None else ""
            level = len(node.relative)
            for alias in node.names:
                name = alias.name.value if type(alias.name) is cst.Name else dotted(alias.name)
                local = name
                if alias.asname is not None and type(alias.asname.name) is cst.Name:
                    local = alias.asname.name.value
                if local:
                    self.imports[local] = (mod or "", level, name)
        elif type(node) is cst.Assign:
            for target in node.targets:
                self._bind(target.target, node.value, node, done)
        elif type(node) is cst.AnnAssign and node.value is not None:
            self._bind(node.target, node.value, node, done)
        elif type(node) is cst.AugAssign:
            self._bind(node.target, None, node, done)
        elif type(node) is cst.NamedExpr:
            self._bind(node.target, node.value, node, done)
        elif isinstance(node, (cst.For, cst.CompFor)):  # bound from the first iteration on
            self._bind(node.target, None, node, self.order[id(node)])
        elif type(node) is cst.WithItem and node.asname is not None:
            self._bind(node.asname.name, None, node, done)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None, node: cst.CSTNode,
              order: int) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.elements):
                if type(element) is cst.StarredElement:
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
        found = self._scopes.get(id(node))
        if found is not None:
            return found
        found = self.module
        current = self.parent.get(id(node))
        while current is not None:
            if type(current) in _FUNCTION_TYPES:
                found = current
                break
            current = self.parent.get(id(current))
        if id(node) in self.parent:  # a node of this module (ids of others may be reused)
            self._scopes[id(node)] = found
        return found

    def calls_in(self, scope: cst.CSTNode) -> list[cst.Call]:
        """The calls whose innermost function is `scope` (the module: calls outside functions),
        in the order of `calls`."""
        if self._calls_by_scope is None:
            self._calls_by_scope = {}
            for call in self.calls:
                self._calls_by_scope.setdefault(id(self.scope_of(call)), []).append(call)
        return self._calls_by_scope.get(id(scope), [])

    def calls_to(self, form: str, name: str) -> list[cst.Call]:
        """Calls of `name(...)` (form "name") or of `<anything>.name(...)` (form "attr"), in the
        order of `calls`."""
        if self._calls_by_callee is None:
            self._calls_by_callee = {}
            for call in self.calls:
                func = call.func
                if type(func) is cst.Name:
                    self._calls_by_callee.setdefault(("name", func.value), []).append(call)
                elif type(func) is cst.Attribute:
                    self._calls_by_callee.setdefault(("attr", func.attr.value), []).append(call)
        return self._calls_by_callee.get((form, name), [])

    def enclosing(self, node: cst.CSTNode, kind: type) -> cst.CSTNode | None:
        current = self.parent.get(id(node))
        while current is not None:
            if isinstance(current, kind):
                return current
            current = self.parent.get(id(current))
        return None

    def class_of(self, func: cst.CSTNode) -> cst.ClassDef | None:
        parent = self.parent.get(id(func))
        if type(parent) is cst.IndentedBlock:
            parent = self.parent.get(id(parent))
        return parent if type(parent) is cst.ClassDef else None

    def methods(self, cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
        body = cls.body.body if type(cls.body) is cst.IndentedBlock else ()
        return {s.name.value: s for s in body if type(s) is cst.FunctionDef}

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

    def imported_names(self) -> dict[str, str]:
        """Local name -> qualified origin of every import (`th` -> `torch`, `autocast` ->
        `torch.cuda.amp.autocast`; a relative import keeps its leading dots)."""
        return {local: self.qualify(cst.Name(local)) or local for local in self.imports}

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
        line = self.index.line(self.node)
        return placed(f"{path}:{line}", self.index.path, line)


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


class Flow:
    """Answers questions about values, following assignments, calls and local imports."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.project = ctx.project  # None: the file is analysed on its own, imports not followed
        self.main = index_for(ctx.path, ctx.module)
        self._busy: set[tuple] = set()
        self._readers: dict[int, Callable[[str], None]] = {}  # id of another module's index -> `Project.part_reader`

    # -- modules and definitions ------------------------------------------------------------

    def load(self, index: ModuleIndex, module: str, level: int) -> ModuleIndex | None:
        """Another module of the project. The analysis depends on the parts of it the tracing
        reads (`_read`): the definitions looked up by name, its module-level statements, all of
        it for a search of its call sites."""
        if self.project is None:
            return None
        if not hasattr(self.project, "part_reader"):
            parsed = self.project.load(index.path, module, level)
            return index_for(parsed.path, parsed.module) if parsed is not None else None
        parsed = self.project.load(index.path, module, level, whole=False)
        if parsed is None:
            return None
        other = index_for(parsed.path, parsed.module)
        if id(other) not in self._readers:
            self._readers[id(other)] = self.project.part_reader(parsed)
        self._readers[id(other)](MODULE_PART)
        return other

    def _read(self, index: ModuleIndex, part: str) -> None:
        note = self._readers.get(id(index))
        if note is not None:
            note(part)

    def _read_calls(self, index: ModuleIndex, form: str, name: str) -> None:
        """The tracing searched the call sites of `name` in another module: it depends on which
        parts of it hold one and on those parts (all of it when that cannot be told)."""
        note = self._readers.get(id(index))
        if note is None:
            return
        parts = self.project.calling_parts(index.path, form, name)
        for part in parts if parts is not None else ("*",):
            note(part)

    def definition(self, index: ModuleIndex, node: cst.BaseExpression, hops: int = 0) -> Where | None:
        """The project class or function a Name/Attribute refers to."""
        if hops > 3:
            return None
        if type(node) is cst.Name:
            name = node.value
            self._read(index, name)
            if name in index.classes:
                self._read(index, f"{name}.*")  # traced through its methods: every one of them counts
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
        if type(node) is cst.Attribute and type(node.value) is cst.Name:
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
        if not (type(expr) is cst.Attribute and dotted(expr.value) == "self"):
            return None
        scope = index.scope_of(at)
        cls = index.class_of(scope) if type(scope) is cst.FunctionDef else None
        if cls is None:
            return None
        return self.method(Where(index, cls), expr.attr.value)

    def bases(self, where: Where) -> list[Where]:
        """The class and its project base classes, nearest first."""
        out, todo = [], [where]
        while todo and len(out) < 6:
            current = todo.pop(0)
            out.append(current)
            assert type(current.node) is cst.ClassDef
            for base in current.node.bases:
                found = self.definition(current.index, base.value)
                if found is not None and type(found.node) is cst.ClassDef:
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
        if depth > DEPTH:
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
        if type(expr) is cst.Call:
            return self._constructed(index, expr, at, depth)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            qualified = index.qualify(expr)
            loss = torch_name(qualified, LOSS_FUNCS)
            last = (qualified or "").rpartition(".")[2]
            if loss is None and (last.endswith("_loss") or last == "kl_div") and is_torch(qualified or ""):
                loss = "other"
            if loss is not None and last == qualified and self.definition(index, expr) is not None:
                loss = None  # `eval_loss(model, loader)` defined here: not torch's, whatever its name
            if loss is not None:
                return Obj("loss", Where(index, expr), name=qualified or "", loss=loss)
            act = torch_name(qualified, ACTIVATION_FUNCS)
            if act is not None:
                return Obj("layer", Where(index, expr), name=qualified or "", act=act)
            found = self.definition(index, expr) or self._own_method(index, expr, at)
            if found is not None and type(found.node) is cst.FunctionDef:
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
            if type(element) is cst.Element:
                return self.obj(index, element.value, at, depth)
        if type(expr) is cst.Call:
            func = self.obj(index, expr.func, at, depth)
            if func is not None and func.kind == "function":
                returns = self.returns(func.where)
                objs = [self._element(func.where.index, r, r, position, depth + 1) for r in returns]
                return _same(objs)
        return None

    def _constructed(self, index: ModuleIndex, call: cst.Call, at, depth) -> Obj | None:
        func = call.func
        if type(func) is cst.Attribute and func.attr.value in _MODULE_SELF:
            return self.obj(index, func.value, at, depth + 1)
        qualified = index.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        last = qualified.rpartition(".")[2] if qualified else None
        if last in _MODULE_WRAPPERS and call.args:
            inner = first_arg(call) or first_arg(call, keyword="module")
            return self.obj(index, inner, at, depth + 1) if inner is not None else None
        found = self.definition(index, func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if found is not None:
            if type(found.node) is cst.ClassDef:
                return Obj("class", found, name=found.node.name.value)
            returns = self.returns(found)
            return _same([self.obj(found.index, r, r, depth + 1) for r in returns])
        if qualified:
            loss = torch_name(qualified, LOSS_CLASSES)
            if loss is not None:
                return Obj("loss", Where(index, call), name=qualified, loss=loss)
            act = torch_name(qualified, ACTIVATION_LAYERS)
            if act is not None:
                return Obj("layer", Where(index, call), name=qualified, act=act)
            if last == "Sequential" and is_torch(qualified):
                return Obj("sequential", Where(index, call), name=qualified)
            if last and last.endswith("Loss") and is_torch(qualified):
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
        if type(scope) is cst.FunctionDef:
            if key.startswith("self.") and key.count(".") == 1:
                return self._attribute(index, scope, key)
            param = param_index(scope, key)
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
            if param < offset:
                return []  # `self` itself (`DataLoader(self, ...)` in a dataset's method): no call site passes it
        fname = func.name.value
        out = []
        if cls is not None and fname == "__init__":
            form, called = "name", cls.name.value
        else:
            form, called = ("attr" if cls is not None else "name"), fname
        self._read_calls(index, form, called)
        candidates = index.calls_to(form, called)
        for call in candidates:
            callee = call.func
            if cls is not None and fname == "__init__":
                hit = type(callee) is cst.Name and callee.value == cls.name.value
            elif cls is not None:
                hit = (type(callee) is cst.Attribute and callee.attr.value == fname
                       and dotted(callee.value) == "self")
            else:
                hit = type(callee) is cst.Name and callee.value == fname
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
        for ret in (n for n in where.index.scoped(where.node) if type(n) is cst.Return):
            if ret.value is None:
                return []
            out.append(ret.value)
        return out


def _same(objs: list[Obj | None]) -> Obj | None:
    if not objs or any(o is None for o in objs):
        return None
    first = objs[0]
    if all(o.kind == first.kind and o.where.node is first.where.node for o in objs):  # type: ignore[union-attr]
        return first
    return None


def param_index(func: cst.FunctionDef, name: str) -> int | None:
    names = [p.name.value for p in (*func.params.posonly_params, *func.params.params)]
    return names.index(name) if name in names else None


def index_for(path: str, module: cst.Module) -> ModuleIndex:
    """The index of a parsed module (built once per module object, kept with its facts)."""
    found = known(module, "values.index")
    if found is None or found.path != path:
        found = facts(module)["values.index"] = ModuleIndex(path, module)
    return found
