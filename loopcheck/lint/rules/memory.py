"""Memory and loss rules (LC601-LC603): loss tensors kept across iterations, and activations
applied twice (softmax before cross-entropy, sigmoid before BCE-with-logits).

These rules need a fact the loop model does not hold: what a value *is* (a criterion output, the
probabilities of a softmax, the instance of a project class). `LossFlow` extends the value tracing
of `loopcheck.lint.values` with activations and losses: which activation a tensor holds, and which
argument of a call (a torch loss, or a project wrapper around one) is the loss input. Anything it
cannot establish comes back as None, and the rules then say nothing.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.memo import fact
from loopcheck.lint.loopmodel import EventKind, Role
from loopcheck.lint.positions import node_code
from loopcheck.lint.rules._shared import classes_of, nodes_of
from loopcheck.lint.rules.base import FileContext, Rule
from loopcheck.lint.syntax import walk
from loopcheck.lint.values import (
    ACTIVATION_FUNCS,
    ACTIVATION_LAYERS,
    DEPTH,
    LOSS_CLASSES,
    LOSS_FUNCS,
    Flow,
    ModuleIndex,
    Obj,
    Where,
    dotted,
    first_arg,
    is_torch,
    param_index,
    string_value,
    torch_name,
)


# methods that return the same kind of tensor (a reshaped softmax is still probabilities)
_SAME_TENSOR = frozenset(
    {
        "view", "reshape", "squeeze", "unsqueeze", "flatten", "permute", "transpose", "contiguous",
        "float", "double", "half", "bfloat16", "to", "type", "cuda", "cpu", "clamp", "clamp_min",
        "clip", "view_as", "reshape_as", "t",
    }
)


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


class LossFlow(Flow):
    """Value tracing plus activations and losses."""

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._sinks: dict[tuple[int, int], Sink | None] = {}
        self._graph_losses: dict[int, bool] = {}
        self._numbers: dict[int, bool] = {}

    # -- activations ------------------------------------------------------------------------

    def activation(
        self, index: ModuleIndex, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, position: int | None = None
    ) -> Activation | None:
        """The activation whose output `expr` holds (softmax, log_softmax, sigmoid), if certain."""
        if depth > DEPTH:
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
            if torch_name(index.qualify(func), ACTIVATION_FUNCS) is None:  # a tensor method, not torch.softmax
                if method in ACTIVATION_FUNCS:
                    return Activation(ACTIVATION_FUNCS[method], Where(index, expr)) if position is None else None
                if method in _SAME_TENSOR:
                    return self.activation(index, func.value, at, depth + 1, position=position)
        qualified = index.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        act = torch_name(qualified, ACTIVATION_FUNCS)
        if act is not None:
            return Activation(act, Where(index, expr)) if position is None else None
        if qualified and qualified.rpartition(".")[2] in ("clamp", "clip") and is_torch(qualified):
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

    def returns_graph_loss(self, func: Where) -> bool:
        """True when every return of `func` is a loss it called backward() on (not `.item()`).
        The answer for a function of another project module is kept with that module."""
        known = self._graph_losses if func.index is self.main else fact(func.index.module, "memory.graph_losses", dict)
        found = known.get(id(func.node))
        if found is None:
            calls = (n for n in func.index.scoped(func.node) if type(n) is cst.Call)
            targets = {_key(e) for call in calls for e in _backward_inputs(call)}
            returns = self.returns(func)
            found = known[id(func.node)] = bool(returns) and bool(targets) and all(_key(r) in targets for r in returns)
        return found

    def returns_number(self, func: Where) -> bool:
        """True when every return of `func` is a plain number: literals, `.item()`, `float(...)`,
        `len(...)`, locals only ever assigned such values, and arithmetic on them
        (`return total / len(loader.dataset)` after `total += loss.item()`)."""
        known = self._numbers if func.index is self.main else fact(func.index.module, "memory.numbers", dict)
        found = known.get(id(func.node))
        if found is None:
            returns = self.returns(func)
            found = known[id(func.node)] = bool(returns) and all(
                _number(func.index, func.node, r, set()) for r in returns)
        return found

    def sink(self, index: ModuleIndex, call: cst.Call, depth: int = 0) -> Sink | None:
        """The loss computed by `call`, and which argument is its input. A call in another
        project module means the same for every file that reaches it: its answer is kept with
        that module for the rest of the run."""
        sinks = self._sinks if index is self.main else fact(index.module, "memory.sinks", dict)
        key = (id(index), id(call))
        if key not in sinks:
            callee = self.obj(index, call.func, call, depth)
            sinks[key] = self.sink_of(callee, depth) if callee is not None else None
        return sinks[key]

    def sink_of(self, callee: Obj, depth: int) -> Sink | None:
        if callee.kind == "loss" and callee.loss:
            return Sink(callee.loss, callee.where, 0, "input")
        if callee.kind not in ("class", "function") or depth > DEPTH:
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
        for call in func.index.calls_in(fnode):
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


def _number(index: ModuleIndex, scope: cst.CSTNode, expr: cst.BaseExpression | None, seen: set[str]) -> bool:
    """`expr`, in the function `scope`, is a plain number (see `LossFlow.returns_number`)."""
    kind = type(expr)
    if kind in (cst.Integer, cst.Float) or (kind is cst.Call and _detaches(expr) and not _tensor_detach(expr)):
        return True
    if kind is cst.BinaryOperation:
        return _number(index, scope, expr.left, seen) and _number(index, scope, expr.right, seen)
    if kind is cst.UnaryOperation:
        return _number(index, scope, expr.expression, seen)
    if kind is cst.Name and expr.value not in seen:
        seen.add(expr.value)
        bound = index.assigns.get((id(scope), expr.value), ())
        # `total += x.item()` is noted without its value: the statement holds it
        return bool(bound) and all(a.position is None and _number(
            index, scope, a.node.value if type(a.node) is cst.AugAssign else a.value, seen) for a in bound)
    return False


def _tensor_detach(call: cst.Call) -> bool:
    """`x.detach()` / `x.detach_()` / `x.data`: no graph, but still a tensor."""
    return type(call.func) is cst.Attribute and call.func.attr.value in ("detach", "detach_")


def _same_activation(found: list[Activation | None]) -> Activation | None:
    if not found or any(f is None for f in found) or len({f.act for f in found}) != 1:  # type: ignore[union-attr]
        return None
    return found[0]


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
            is_param = isinstance(scope, cst.FunctionDef) and param_index(scope, expr.value) is not None
            return expr.value if is_param else None
        if found.value is None or found.position is not None:
            return None
        return _param_through(index, found.value, found.node, hops + 1)
    return None


# ---------------------------------------------------------------------------------------------
# LC602 / LC603: an activation applied before a loss that applies it itself
# ---------------------------------------------------------------------------------------------

class _ActivationIntoLoss(Rule):
    """Shared check: a loss call whose input holds the output of `act`."""

    act: str
    sinks: frozenset[str]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not (_may_reach(ctx, _ACTIVATION_WORDS[self.act]) and _may_reach(ctx, _loss_words(self.sinks))):
            return
        flow = ctx.derived(LossFlow)  # one tracing per file, shared by LC601, LC602 and LC603
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
            yield self.finding(ctx, call, self.message(ctx, node_code(arg), found, sink))

    def message(self, ctx: FileContext, arg: str, found: Activation, sink: Sink) -> str:
        raise NotImplementedError


# per activation, the names that produce it, in lower case: no activation without one of them
_ACTIVATION_WORDS = {
    act: tuple(sorted({
        name.lower() for table in (ACTIVATION_FUNCS, ACTIVATION_LAYERS) for name, made in table.items() if made == act
    }))
    for act in ("softmax", "sigmoid")
}


def _loss_words(sinks: frozenset[str]) -> tuple[str, ...]:
    """The names of the losses of these kinds, in lower case: no such loss without one of them."""
    return tuple(sorted({name.lower() for table in (LOSS_CLASSES, LOSS_FUNCS) for name, kind in table.items() if kind in sinks}))


def _may_reach(ctx: FileContext, words: tuple[str, ...]) -> bool:
    """Whether value tracing from this file may meet one of `words` (in any case): in the file
    itself, or in a project module its imports reach, which tracing may follow. A cheap necessary
    test from the modules' summaries: most files name no activation at all."""
    if _names_any(ctx.source, words):
        return True
    project = ctx.project
    if project is None or ctx.path.startswith("<") or not hasattr(project, "reach_mentions"):
        return False
    return project.reach_mentions(Path(ctx.path), words)


def _names_any(text: str, words: tuple[str, ...]) -> bool:
    text = text.lower()
    return any(word in text for word in words)


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
    # `type(...) is`: the common case decided without a slow ABC isinstance (no subclasses)
    if type(func) is not cst.Attribute or func.attr.value not in ("backward", "manual_backward"):  # type: ignore
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
    return dotted(expr) or node_code(expr)


def _index_text(expr: cst.Subscript) -> str | None:
    """`0` for `loss[0]`, `'total'` for `out["total"]`: a single literal index, else None."""
    if len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index:
        return None
    value = expr.slice[0].slice.value
    if type(value) is cst.Integer:
        return value.value
    text = string_value(value)
    return repr(text) if text is not None else None


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

    def __init__(self, flow: LossFlow, index: ModuleIndex, targets: set[str]) -> None:
        self.flow = flow
        self.index = index
        self.targets = targets  # what backward() is called on here: always a tensor with a graph
        self.losses: set[str] = set(targets)
        # `loss = loss[0]` before the backward: the name held a tuple whose item 0 is the loss (the
        # others are counts, logs): container name -> the index of the loss
        self.picked: dict[str, str] = {}

    def carries(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression | None:
        """The part of `expr` that holds a loss, as a tensor still attached to its graph (a name or
        a loss call; None: a number, detached, or not known to be a loss). Its text (`_key`) is
        what a finding names: it is only made then."""
        if isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript)):
            return self.held(expr)
        if isinstance(expr, cst.BinaryOperation):
            return self.carries(expr.left, at) or self.carries(expr.right, at)
        if isinstance(expr, cst.UnaryOperation):
            return self.carries(expr.expression, at)
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
            for element in expr.elements:
                found = self.carries(element.value, at)
                if found is not None:
                    return found
            return None
        if isinstance(expr, cst.Dict):
            for element in expr.elements:
                if isinstance(element, cst.DictElement):
                    found = self.carries(element.value, at)
                    if found is not None:
                        return found
            return None
        if isinstance(expr, cst.Call):
            if _detaches(expr):
                return None
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _KEEPS_GRAPH:
                return self.carries(func.value, at)
            if self.is_loss_call(expr):
                return expr
        return None

    def held(self, expr: cst.Name | cst.Attribute | cst.Subscript) -> cst.BaseExpression | None:
        if _key(expr) in self.losses:
            return expr
        if isinstance(expr, cst.Subscript) and _root(expr) in self.losses:
            picked = self.picked.get(_key(expr.value))
            if picked is not None and _index_text(expr) != picked:
                return None  # another item of the tuple the loss came in (`average_over += loss[1]`)
            return expr
        return None

    def is_loss_call(self, call: cst.Call) -> bool:
        """A criterion call, or a project helper that returns a loss it back-propagated (not one
        that computes a loss and returns a number: `eval_loss` summing `.item()`s)."""
        callee = self.flow.obj(self.index, call.func, call)
        function = callee is not None and callee.kind == "function"
        if function and self.flow.returns_number(callee.where):
            return False
        if self.flow.sink(self.index, call) is not None:
            return True
        name = dotted(call.func)
        if name and self.index is self.flow.main and self.flow.ctx.model.role(name) is Role.CRITERION:
            return True  # `criterion` / `self.loss_fn` passed in from elsewhere
        return function and self.flow.returns_graph_loss(callee.where)


class _AnyLoss(_LossTracker):
    """Takes every name and every call that does not detach for a loss: `carries` then tells
    whether an expression *may* hold one, from its shape alone (no value tracing). An expression
    it clears cannot carry a loss for any tracker."""

    def __init__(self) -> None:
        pass

    def held(self, expr: cst.Name | cst.Attribute | cst.Subscript) -> cst.BaseExpression | None:
        return expr

    def is_loss_call(self, call: cst.Call) -> bool:
        return True


_SHAPE = _AnyLoss()


class LossRetainsGraph(Rule):
    code = "LC601"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        flow = ctx.derived(LossFlow)  # one tracing per file, shared by LC601, LC602 and LC603
        index = flow.main
        reported: set[int] = set()
        names: dict[tuple[str, int], set[str]] = {}  # per function, shared by its loops
        loops = _training_loops(ctx, index)
        keeping = _keeping(ctx, index, loops) if loops else set()
        for loop in loops:
            if id(loop) not in keeping:
                continue  # nothing in the loop can hold on to a loss: skip tracing the losses
            few = _few_iterations(index, loop)
            for node, holder, loss in _kept_losses(flow, index, loop, names):
                if id(node) in reported or few and "." not in holder:
                    continue
                reported.add(id(node))
                yield self.finding(
                    ctx,
                    node,
                    f"`{holder}` keeps the loss tensor `{loss}` and its autograd graph alive across "
                    f"iterations, so memory grows every step: store `{loss}.item()` or `{loss}.detach()`",
                )


_FEW_ITERATIONS = 64


def _few_iterations(index: ModuleIndex, loop: cst.For | cst.While) -> bool:
    """`for _ in range(5):` with no loop around it in its function (a test's mini training run):
    a local list keeps at most that many graphs, freed when the function returns."""
    it = loop.iter if type(loop) is cst.For else None
    if type(it) is not cst.Call or dotted(it.func) != "range" or not 1 <= len(it.args) <= 2:
        return False
    bounds = [a.value.evaluated_value if type(a.value) is cst.Integer and a.keyword is None else None for a in it.args]
    if None in bounds or bounds[-1] - (bounds[0] if len(bounds) == 2 else 0) > _FEW_ITERATIONS:
        return False
    current = index.parent.get(id(loop))
    while current is not None and type(current) not in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
        if type(current) in (cst.For, cst.While):
            return False
        current = index.parent.get(id(current))
    return True


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


def _keeping(ctx: FileContext, index: ModuleIndex, loops: list[cst.For | cst.While]) -> set[int]:
    """The ids of the `loops` whose body (nested functions and classes left out) holds a statement
    `_may_keep` admits."""
    wanted = {id(loop) for loop in loops}
    found: set[int] = set()
    parent = index.parent
    for node in nodes_of(ctx.module, (cst.Assign, cst.AugAssign, cst.Call)):
        if type(node) is cst.Call and not (type(node.func) is cst.Attribute and node.func.attr.value in _KEEP_METHODS):
            continue
        holders = []
        child, current = node, parent.get(id(node))
        while current is not None and type(current) not in _SCOPES:
            if id(current) in wanted and current.body is child:  # type: ignore[attr-defined]
                holders.append(id(current))
            child, current = current, parent.get(id(current))
        if holders and not found.issuperset(holders) and _may_keep(index, node):
            found.update(holders)
    return found


_SCOPES = classes_of((cst.FunctionDef, cst.Lambda, cst.ClassDef))
# the nodes of a loop body `_kept_losses` and `_rebound` read
_BODY = classes_of((cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Call, cst.For, cst.Del))


def _kept_losses(
    flow: LossFlow, index: ModuleIndex, loop: cst.For | cst.While, names: dict[tuple[str, int], set[str]]
) -> Iterator[tuple[cst.CSTNode, str, str]]:
    # node classes are compared with `type(n) is` (none of these has subclasses): on these hot
    # paths libcst's ABC isinstance checks cost more than the rest of the work
    body = [n for n in index.scoped(loop.body) if type(n) in _BODY]
    targets = {_key(e) for n in body if type(n) is cst.Call for e in _backward_inputs(n)}
    targets.discard("")
    targets |= _back_propagated_aliases(body, targets) if targets else set()
    tracker = _LossTracker(flow, index, targets)
    for n in body:
        if type(n) is cst.Assign and len(n.targets) == 1 and type(n.value) is cst.Subscript:
            name, item = _key(n.targets[0].target), _index_text(n.value)
            if item is not None and name in targets and _key(n.value.value) == name:
                tracker.picked[name] = item
    spared: set[str] | None = None

    def kept_on_purpose(name: str) -> bool:
        nonlocal spared
        if spared is None:  # only asked once a loss is known to be kept: most loops never need it
            spared = _spared(index, loop, body, names)
        return name in spared

    for n in body:
        kind = type(n)
        if kind is cst.Assign and len(n.targets) == 1:
            target = n.targets[0].target
            name = dotted(target)
            if name is None:
                continue
            loss = None if _under_no_grad(index, n, loop) else tracker.carries(n.value, n)
            if loss is not None and name in _names_in(index, n.value):  # running = 0.9 * running + 0.1 * loss
                tracker.losses.add(name)
                if not kept_on_purpose(name):
                    yield n, name, _key(loss)
                continue
            if _detaches(n.value):
                tracker.losses.discard(name)
            elif name in targets or loss is not None:
                tracker.losses.add(name)
            else:
                tracker.losses.discard(name)
        elif kind is cst.AugAssign and type(n.operator) in (cst.AddAssign, cst.SubtractAssign):
            root = _root(n.target)
            loss = None if _under_no_grad(index, n, loop) or _one_iteration(index, n) else tracker.carries(n.value, n)
            if loss is not None and root and not kept_on_purpose(root):
                yield n, _key(n.target), _key(loss)
        elif kind is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value in _KEEP_METHODS:
            holder = n.func.value
            root = _root(holder)
            if root is None or not _may_keep(index, n) or _under_no_grad(index, n, loop) or kept_on_purpose(root):
                continue
            if _one_iteration(index, n):
                continue  # `if step == 0: outputs.append(y)`: kept once, for a comparison later
            if _stores_detached(flow, index, n):
                continue
            for arg in n.args:
                loss = tracker.carries(arg.value, n)
                if loss is not None:
                    yield n, _key(holder), _key(loss)
                    break


def _back_propagated_aliases(body: list[cst.CSTNode], targets: set[str]) -> set[str]:
    """`loss = out["loss"]; loss.backward()`: `out["loss"]` is the loss too. Only what a name
    holds when backward runs on it counts: `loss = val_loss` after the backward (the number early
    stopping compares) makes no loss of `val_loss`. `body` is in source order; every value assigned
    since the previous backward on the name counts (the branches of an `if` before it)."""
    pending: dict[str, list[str]] = {}
    found: set[str] = set()
    for n in body:
        if type(n) is cst.Assign and len(n.targets) == 1:
            name = _key(n.targets[0].target)
            if name in targets and isinstance(n.value, (cst.Name, cst.Attribute, cst.Subscript)):
                pending.setdefault(name, []).append(_key(n.value))
        elif type(n) is cst.Call:
            for tensor in _backward_inputs(n):
                found.update(pending.pop(_key(tensor), ()))
    return found


_DETACHED_TEXT = re.compile(r"\.data\b|\.item\(\)|\.detach\(\)|\.tolist\(\)|\bfloat\(")


def _stores_detached(flow: LossFlow, index: ModuleIndex, call: cst.Call) -> bool:
    """`meter.add(loss)` where `meter` is a project class whose `add` keeps `v.data`,
    `v.item()` or `v.detach()`: the graph is not kept."""
    func = call.func
    assert isinstance(func, cst.Attribute)
    holder = flow.obj(index, func.value, call)
    if holder is None or holder.kind != "class":
        return False
    method = flow.method(holder.where, func.attr.value)
    if method is None:
        return False
    known = fact(method.index.module, "memory.stores_detached", dict)  # rendering the method is the cost
    found = known.get(id(method.node))
    if found is None:
        found = known[id(method.node)] = bool(_DETACHED_TEXT.search(node_code(method.node, method.index.module)))
    return found


def _spared(
    index: ModuleIndex, loop: cst.For | cst.While, body: list[cst.CSTNode], names: dict[tuple[str, int], set[str]]
) -> set[str]:
    """Names a loop may keep losses in on purpose: rebound every iteration, or fed to a backward."""
    spared = _rebound(index, body)
    scope = index.scope_of(loop)
    spared |= _per_function(names, "wanted", scope, lambda f: _backpropagated_names(index, f))
    cls = index.class_of(scope) if isinstance(scope, cst.FunctionDef) else None
    if cls is not None:  # `self.buffer` filled here, reset or back-propagated in another method
        for name, method in index.methods(cls).items():
            fed = _per_function(names, "wanted", method, lambda f: _backpropagated_names(index, f))
            spared |= {n for n in fed if n.startswith("self.")}
            if name != "__init__" and method is not scope:
                fresh = _per_function(names, "rebound", method, lambda f: _rebound(index, list(index.scoped(f))))
                spared |= {n for n in fresh if n.startswith("self.")}
    return spared


def _per_function(names: dict[tuple[str, int], set[str]], kind: str, func: cst.CSTNode, compute) -> set[str]:
    """`compute(func)`, computed once per function for all the loops of one file (do not modify)."""
    key = (kind, id(func))
    found = names.get(key)
    if found is None:
        found = names[key] = compute(func)
    return found


def _may_keep(index: ModuleIndex, n: cst.CSTNode) -> bool:
    """Whether `n` has the shape of a statement `_kept_losses` can report, with a value that may
    carry a loss (a cheap necessary test: no value tracing)."""
    if isinstance(n, cst.Call):
        func = n.func
        return (
            isinstance(func, cst.Attribute)
            and func.attr.value in _KEEP_METHODS
            and any(_SHAPE.carries(arg.value, n) is not None for arg in n.args)
        )
    if isinstance(n, cst.AugAssign):
        return (
            isinstance(n.operator, (cst.AddAssign, cst.SubtractAssign))
            and bool(_root(n.target))
            and _SHAPE.carries(n.value, n) is not None
        )
    if isinstance(n, cst.Assign) and len(n.targets) == 1:
        name = dotted(n.targets[0].target)
        return name is not None and _SHAPE.carries(n.value, n) is not None and name in _names_in(index, n.value)
    return False


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
    inputs = [e for n in nodes if type(n) is cst.Call for e in _backward_inputs(n)]
    if not inputs:
        return set()
    keys = {_key(e) for e in inputs}
    out: set[str] = set()
    for e in inputs:
        out |= _names_in(index, e)
    for n in nodes:
        if isinstance(n, cst.Assign) and any(_key(t.target) in keys for t in n.targets):
            out |= _names_in(index, n.value)
    return out


def _one_iteration(index: ModuleIndex, node: cst.CSTNode) -> bool:
    """`node` runs under `if step == 0:` where `step` counts a loop around it (in its function):
    in one iteration of that loop only, so what it keeps does not grow with the run."""
    counters: set[str] = set()
    tests: list[cst.BaseExpression] = []
    child, current = node, index.parent.get(id(node))
    while current is not None and type(current) not in _SCOPES:
        if type(current) is cst.If and current.body is child:
            tests.append(current.test)
        elif type(current) is cst.For:
            counters.update(n.value for n, _ in walk(current.target) if type(n) is cst.Name)
        child, current = current, index.parent.get(id(current))
    for test in tests:
        if type(test) is cst.Comparison and len(test.comparisons) == 1 \
                and type(test.comparisons[0].operator) is cst.Equal:
            sides = (test.left, test.comparisons[0].comparator)
            if any(type(a) is cst.Name and a.value in counters and type(b) is cst.Integer for a, b in (sides, sides[::-1])):
                return True
    return False


def _under_no_grad(index: ModuleIndex, node: cst.CSTNode, stop: cst.CSTNode) -> bool:
    current = index.parent.get(id(node))
    while current is not None and current is not stop:
        if type(current) is cst.With:
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
