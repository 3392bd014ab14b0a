"""Data-order rules (LC701-LC702): the training DataLoader's sampler and shuffling.

"The training loader" is the loader a batch loop of the model iterates (a loop that calls
backward). Its constructor comes from the loader's binding; the sampler and the dataset passed to
it are read from that call, following names with `values.Flow` (which also resolves dataset
classes defined in other modules of the project).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import Binding, EventKind, Loop, LoopKind, Role
from loopcheck.lint.loopmodel.facts import _Placed
from loopcheck.lint.positions import node_code
from loopcheck.lint.project import parse_path
from loopcheck.lint.rules._display import at as cited, shown
from loopcheck.lint.rules.base import FileContext, Rule
from loopcheck.lint.values import Flow, ModuleIndex, Where, dotted, first_arg, index_for, keyword_arg

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...)
_SHUFFLE_AT, _SAMPLER_AT, _BATCH_SAMPLER_AT = 2, 3, 4
_SHUFFLES = re.compile(r"\brandom\.shuffle\(")
_OWN_SHUFFLE = re.compile(r"\bshuffle=(?!False\b)")
_STREAMING = re.compile(r"iterable|stream|webdataset|\bwds\b|datapipe|IterDataPipe", re.I)


def _training_loops(ctx: FileContext) -> Iterator[Loop]:
    for loop in ctx.model.walk_loops():
        if loop.kind is LoopKind.BATCH:
            yield loop


def _loader_name(flow: Flow, loop: Loop) -> str | None:
    """The loader a batch loop iterates: the model's, or `next(it)` with `it = iter(loader)` (also
    through a generator of the project that loops over it, `it = infinite(loader)`)."""
    binding = flow.ctx.model.bindings.get(loop.loader or "")
    if loop.loader and binding is not None and binding.role is Role.LOADER:
        return loop.loader
    # `for step in pbar:` with the batches drawn by next(): the loader is the one next() reads
    index = flow.main
    if id(loop.node) not in index.order:
        return loop.loader
    names = set()
    for node in index.scoped(loop.node.body):
        if isinstance(node, cst.Call) and dotted(node.func) == "next" and node.args:
            arg = node.args[0].value
            if isinstance(arg, cst.Name):
                values = flow.values_of(index, arg, node)
                arg = values[0][1] if len(values) == 1 and values[0][3] is None else arg
            if isinstance(arg, cst.Call) and dotted(arg.func) == "iter" and arg.args:
                arg = arg.args[0].value
                names.add(dotted(_generator_source(flow, index, arg) or arg))
            elif isinstance(arg, cst.Call) and arg.args:
                names.add(dotted(_generator_source(flow, index, arg)))
    names.discard(None)
    return names.pop() if len(names) == 1 else loop.loader


def _generator_source(flow: Flow, index: ModuleIndex, expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`infinite(loader)` for a generator function of the project that loops over its first
    parameter and yields (`while True: for batch in loader: yield batch`): the loader it is handed."""
    call = expr
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name) or not call.args:
        return None
    if call.args[0].keyword is not None or call.args[0].star:
        return None
    found = flow.definition(index, call.func)
    if found is None or type(found.node) is not cst.FunctionDef:
        return None
    params = found.node.params.params
    if not params:
        return None
    first = params[0].name.value
    nodes = list(found.index.scoped(found.node))
    if not any(isinstance(n, cst.Yield) for n in nodes):
        return None
    loops_over = any(
        isinstance(n, cst.For) and first in {node_code(n.iter), node_code(n.iter).removeprefix("iter(").removesuffix(")")}
        for n in nodes
    )
    return call.args[0].value if loops_over else None


@dataclass(frozen=True)
class _Loader:
    name: str
    index: ModuleIndex  # the module holding the constructor call
    call: cst.Call


def _loader(ctx: FileContext, flow: Flow, loop: Loop) -> _Loader | None:
    """The `DataLoader(...)` call behind the loader a batch loop iterates."""
    name = _loader_name(flow, loop)
    if not name:
        return _one_of_loaders(flow, loop)
    binding = ctx.model.bindings.get(name)
    if binding is not None and binding.role is Role.LOADER and binding.call is not None:
        if binding.cls != "DataLoader":
            return None
        index = _index_of(ctx, flow, binding)
        return _Loader(name, index, binding.call) if index is not None else None
    if id(loop.node) not in flow.main.order:
        return None
    try:  # the name as written at the loop (`loader@train` is the `loader` of `train`)
        expr = cst.parse_expression(shown(name))
    except cst.ParserSyntaxError:
        return None
    obj = flow.obj(flow.main, expr, loop.node)
    if obj is None or obj.kind != "call" or obj.name.rpartition(".")[2] != "DataLoader":
        return None
    return _Loader(name, obj.where.index, obj.where.node)  # type: ignore[arg-type]


def _one_of_loaders(flow: Flow, loop: Loop) -> _Loader | None:
    """`for x, y in loaders[phase]:` over a dict of loaders built by one comprehension
    (`{s: DataLoader(sets[s], ...) for s in ["train", "val"]}`): that DataLoader call."""
    node = loop.node
    if id(node) not in flow.main.order or not isinstance(node, cst.For) or not isinstance(node.iter, cst.Subscript):
        return None
    expr, index, at = node.iter.value, flow.main, node
    for _ in range(4):  # through names and the parameters the loaders are handed as
        if isinstance(expr, cst.DictComp):
            value = expr.value
            if isinstance(value, cst.Call) and (dotted(value.func) or "").rpartition(".")[2] == "DataLoader":
                return _Loader(node_code(node.iter), index, value)
            return None
        values = flow.values_of(index, expr, at) if isinstance(expr, (cst.Name, cst.Attribute)) else []
        if len(values) != 1 or values[0][3] is not None:
            return None
        index, expr, at, _ = values[0]
    return None


def _arg(call: cst.Call, name: str, position: int) -> cst.Arg | None:
    found = keyword_arg(call, name)
    if found is not None:
        return found
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position] if position < len(positional) else None


def _is_none(arg: cst.Arg | None) -> bool:
    return arg is None or (isinstance(arg.value, cst.Name) and arg.value.value == "None")


def _may_be_none(flow: Flow, index: ModuleIndex, arg: cst.Arg | None, at: cst.CSTNode) -> bool:
    """No sampler, or a name bound to None on some path: `sampler = None` (single process) or
    `DistributedSampler(ds) if distributed else None`; then the loader's own shuffle decides."""
    if _is_none(arg):
        return True
    assert arg is not None
    values = flow.values_of(index, arg.value, at) if isinstance(arg.value, cst.Name) else []
    if len(values) != 1 or values[0][3] is not None:
        return False
    value = values[0][1]
    sides = (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,)
    return any(isinstance(v, cst.Name) and v.value == "None" for v in sides)


def _bool(arg: cst.Arg | None) -> bool | None:
    """The literal value of a boolean argument (None: absent, or not a literal)."""
    if arg is not None and isinstance(arg.value, cst.Name) and arg.value.value in ("True", "False"):
        return arg.value.value == "True"
    return None


def _has_star(call: cst.Call) -> bool:
    return any(a.star for a in call.args)


def _index_of(ctx: FileContext, flow: Flow, binding: Binding) -> ModuleIndex | None:
    """The index of the module holding the binding's constructor call."""
    if not binding.path or binding.path == ctx.path:
        index = flow.main
    else:
        parsed = parse_path(Path(binding.path), ctx.project)
        if parsed is None:
            return None
        index = index_for(parsed.path, parsed.module)
    return index if id(binding.call) in index.order else None


def _inside(index: ModuleIndex, node: cst.CSTNode, loop: Loop) -> bool:
    current = index.parent.get(id(node))
    while current is not None:
        if current is loop.node:
            return True
        current = index.parent.get(id(current))
    return False


@dataclass(frozen=True)
class _Built(_Placed):
    """A constructor call in another module of the project, where a finding about it goes."""

    path: str
    node: cst.CSTNode
    module: cst.Module | None


def _report_at(flow: Flow, loop: Loop, index: ModuleIndex, node: cst.CSTNode) -> list[cst.CSTNode | _Built]:
    """Where a finding about a constructor goes: `node` when it is in the linted file; else the
    call in its own module (the defect is there, and linting that module shows it) and the batch
    loop when the linted file holds it."""
    if index is flow.main:
        return [node]
    places: list[cst.CSTNode | _Built] = [_Built(index.path, node, index.module)]
    if id(loop.node) in flow.main.order:
        places.append(loop.node)
    return places


def _outer(loop: Loop) -> Loop | None:
    """The loop around the batch loop (an epoch loop, or a `while step < max_steps`)."""
    return loop.parent


_SET_EPOCH_CALL = re.compile(r"\.set_epoch\s*\(")
_SAMPLER_ATTRS = (".sampler", ".batch_sampler")


def _set_epoch_targets(ctx: FileContext) -> list[str] | None:
    """The objects `set_epoch` is called on, as the model names them; None when some call is not
    one the model resolved (a helper it did not follow, an unknown receiver)."""
    events = [e for e in ctx.model.events if e.kind is EventKind.SET_EPOCH]
    if any(not e.target for e in events):
        return None
    seen = {(e.path, e.line) for e in events}
    calls = ctx.count(_SET_EPOCH_CALL)
    if calls is None or calls > len(seen):
        return None
    return [e.target for e in events]  # type: ignore[misc]


class SamplerSetEpochMissing(Rule):
    code = "LC701"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        targets = _set_epoch_targets(ctx)
        if targets is None:
            return  # a set_epoch call the model cannot place: which sampler it reaches is not guessed
        flow = Flow(ctx)
        samplers = self._samplers_of_loaders(ctx)
        reported: set[int] = set()
        for loop in _training_loops(ctx):
            epoch = _outer(loop)
            loader = _loader(ctx, flow, loop) if epoch is not None else None
            if loader is None or _inside(loader.index, loader.call, epoch):
                continue
            arg = _arg(loader.call, "sampler", _SAMPLER_AT)
            if arg is None or _is_none(arg):
                arg = _arg(loader.call, "batch_sampler", _BATCH_SAMPLER_AT)  # `BatchSampler(DistributedSampler(...))`
            if arg is None or _is_none(arg):
                continue
            binding = ctx.model.bindings.get(loader.name)
            canonical = binding.detail.get("sampler") if binding is not None and binding.role is Role.LOADER else None
            if not self._all_elsewhere(targets, loader.name, {dotted(arg.value), node_code(arg.value)}, samplers,
                                       canonical if isinstance(canonical, str) and canonical in ctx.model.bindings else None):
                continue
            sampler = self._distributed_sampler(flow, loader.index, arg.value, loader.call)
            if sampler is None or {id(sampler.node), id(loader.call)} & reported or _inside(sampler.index, sampler.node, epoch):
                continue
            shuffle = keyword_arg(sampler.node, "shuffle") if isinstance(sampler.node, cst.Call) else None
            if shuffle is not None and _bool(shuffle) is not True:
                continue  # shuffle=False: the order does not depend on the epoch; unknown: say nothing
            own = sampler.index is loader.index and sampler.index.scope_of(sampler.node) is loader.index.scope_of(loader.call)
            places = _report_at(flow, loop, sampler.index, sampler.node) if own else []
            if places:
                reported.add(id(sampler.node))
            else:  # built by a helper: the loader's line
                places = _report_at(flow, loop, loader.index, loader.call)
                reported.add(id(loader.call))
            name, wrapped = _sampler_name(flow, loader.index, arg.value, loader.call)
            visible = name and loader.index is flow.main  # a sampler named in another module is reached through its loader
            advice = (f"call `{name}.set_epoch(epoch)`" if visible else "call `set_epoch(epoch)` on that sampler"
                      if wrapped else f"call `{shown(loader.name)}.sampler.set_epoch(epoch)`")
            lines = sorted({e.line for e in ctx.model.events if e.kind is EventKind.SET_EPOCH and e.path == ctx.path})
            others = f" (the `set_epoch` at line {', '.join(map(str, lines))} reaches another loader's sampler)" if lines else ""
            for at in places:
                yield self.finding(
                    ctx,
                    at,
                    f"the DistributedSampler of `{shown(loader.name)}` (iterated at {cited(loop)}, epochs "
                    f"looped at {cited(epoch)}) never gets `set_epoch`{others}: every epoch replays the "
                    f"same order on every rank; {advice} at the top of each epoch",
                )

    @staticmethod
    def _samplers_of_loaders(ctx: FileContext) -> dict[str, str]:
        """Sampler name -> the loader it was given to, for the loaders the model knows."""
        out: dict[str, str] = {}
        for name, binding in ctx.model.bindings.items():
            if binding.role is Role.LOADER and binding.call is not None:
                arg = _arg(binding.call, "sampler", _SAMPLER_AT)
                if arg is not None and not _is_none(arg):
                    # the model names `loader.sampler` by the sampler's expression
                    for text in (dotted(arg.value), node_code(arg.value)):
                        if text:
                            out[text] = name
        return out

    @staticmethod
    def _all_elsewhere(targets: list[str], loader: str, sampler: set[str | None], samplers: dict[str, str],
                       canonical: str | None = None) -> bool:
        """Does every `set_epoch` call provably reach another loader's sampler than this one?
        `canonical`: the model's name of this loader's sampler, when it knows it."""
        for target in targets:
            if target == canonical or target == loader or target.startswith(loader + "."):
                return False
            if canonical and target != canonical and "@" in canonical + target:
                # two functions' own samplers (`sampler` of `train_images`, `sampler@train_text`)
                continue
            if target in sampler:
                return False
            base = next((target[: -len(a)] for a in _SAMPLER_ATTRS if target.endswith(a)), None)
            if base is not None and base in samplers.values():
                continue  # `val_loader.sampler.set_epoch(...)`: another loader
            if target in samplers and samplers[target] != loader:
                continue  # the sampler handed to another loader
            return False  # an object the rule cannot relate: assume it is this sampler
        return True

    @staticmethod
    def _distributed_sampler(flow: Flow, index: ModuleIndex, expr, at, depth: int = 0) -> Where | None:
        """The call that builds the DistributedSampler (or a project subclass of it) `expr` refers to,
        directly or through the samplers that wrap it (`BatchSampler(sampler, ...)`, a project
        sampler that iterates the one it is given)."""
        found_index, call = _built_by(flow, index, expr, at)
        if call is not None and _builds_distributed_sampler(flow, found_index, call):
            return Where(found_index, call)
        inner = _wrapped_sampler(flow, found_index, call) if call is not None and depth < 3 else None
        if inner is not None:
            return SamplerSetEpochMissing._distributed_sampler(flow, found_index, inner, call, depth + 1)
        if call is not None and isinstance(call.func, (cst.Name, cst.Attribute)):
            helper = flow.definition(found_index, call.func)  # `make_sampler(dataset)` returning one
            if helper is not None and type(helper.node) is cst.FunctionDef:
                returned = flow.returns(helper)
                if len(returned) == 1 and isinstance(returned[0], cst.Call):
                    if _builds_distributed_sampler(flow, helper.index, returned[0]):
                        return Where(helper.index, returned[0])
        obj = flow.obj(index, expr, at)  # a helper that returns one
        if obj is None or obj.kind != "call" or not isinstance(obj.where.node, cst.Call):
            return None
        if not _builds_distributed_sampler(flow, obj.where.index, obj.where.node):
            return None
        return Where(obj.where.index, obj.where.node)


def _ignores_index(getitem: cst.CSTNode) -> bool:
    """`def __getitem__(self, index)` whose body never reads `index`."""
    if not isinstance(getitem, cst.FunctionDef):
        return False
    params = list(getitem.params.params)
    if len(params) != 2:
        return False
    name = params[1].name.value
    return re.search(rf"\b{re.escape(name)}\b", node_code(getitem.body)) is None


def _wrapped_sampler(flow: Flow, index: ModuleIndex, call: cst.Call) -> cst.BaseExpression | None:
    """The sampler a sampler wrapper is built around: torch's `BatchSampler(sampler, ...)`, or a
    sampler class of the project whose `__iter__` draws from the one it is handed and that has no
    epoch of its own to pass on (no `set_epoch` in its code: one that forwards it is called on)."""
    if not isinstance(call.func, (cst.Name, cst.Attribute)):
        return None
    inner = first_arg(call, 0, keyword="sampler")
    if inner is None:
        return None
    if (index.qualify(call.func) or "").rpartition(".")[2] == "BatchSampler":
        return inner
    found = flow.definition(index, call.func)
    if found is None or type(found.node) is not cst.ClassDef:
        return None
    classes = flow.bases(found)
    methods = {name: method for current in reversed(classes)  # the nearest definition wins
               for name, method in current.index.methods(current.node).items()}  # type: ignore[arg-type]
    if "__iter__" not in methods or any("set_epoch" in node_code(c.node) for c in classes):
        return None
    return inner if "sampler" in node_code(methods["__iter__"]) else None


def _sampler_name(flow: Flow, index: ModuleIndex, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[str | None, bool]:
    """The name of the sampler to call `set_epoch` on, `expr` or the one its wrappers wrap (None:
    built where it is passed), and whether it is wrapped."""
    name, wrapped = dotted(expr), False
    for _ in range(3):
        index, call = _built_by(flow, index, expr, at)
        inner = _wrapped_sampler(flow, index, call) if call is not None else None
        if inner is None:
            break
        expr, name, wrapped = inner, dotted(inner), True
    return name, wrapped


def _built_by(flow: Flow, index: ModuleIndex, expr: cst.BaseExpression,
              at: cst.CSTNode) -> tuple[ModuleIndex, cst.Call | None]:
    """The call that builds what `expr` holds, written there or the one value of the name it is
    (`DistributedSampler(ds) if distributed else None`: the side that builds one), with the
    module it is written in; None when it is not one known call."""
    if isinstance(expr, cst.Call):
        return index, expr
    if isinstance(expr, cst.IfExp):
        return index, _built_one_way(expr)
    values = flow.values_of(index, expr, at) if isinstance(expr, (cst.Name, cst.Attribute)) else []
    if len(values) == 1 and values[0][3] is None:
        value = values[0][1]
        if isinstance(value, cst.Call):
            return values[0][0], value
        if isinstance(value, cst.IfExp):
            return values[0][0], _built_one_way(value)
    return index, None


def _built_one_way(choice: cst.IfExp) -> cst.Call | None:
    """`DistributedSampler(ds) if distributed else None`: the call of the side that builds one."""
    calls = [side for side in (choice.body, choice.orelse) if isinstance(side, cst.Call)]
    return calls[0] if len(calls) == 1 else None


def _builds_distributed_sampler(flow: Flow, index: ModuleIndex, call: cst.Call) -> bool:
    """`DistributedSampler(...)` under any import alias, or a project subclass of it that keeps its
    epoch-seeded order (no `__iter__` of its own, or one that reads `self.epoch`)."""
    if not isinstance(call.func, (cst.Name, cst.Attribute)):
        return False
    qualified = index.qualify(call.func) or ""
    if qualified.rpartition(".")[2] == "DistributedSampler":
        return True
    found = flow.definition(index, call.func)
    if found is None or type(found.node) is not cst.ClassDef:
        return False
    classes = flow.bases(found)
    if not any(
        (current.index.qualify(base.value) or node_code(base.value)).rpartition(".")[2] == "DistributedSampler"
        for current in classes
        for base in current.node.bases  # type: ignore[attr-defined]
        if isinstance(base.value, (cst.Name, cst.Attribute))
    ):
        return False
    for current in classes:
        methods = current.index.methods(current.node)  # type: ignore[arg-type]
        if "set_epoch" in methods:
            return False  # its own epoch handling: not guessed
        if "__iter__" in methods:
            return "self.epoch" in node_code(methods["__iter__"])
    return True


class TrainLoaderNotShuffled(Rule):
    code = "LC702"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        flow = Flow(ctx)
        reported: set[int] = set()
        for loop in _training_loops(ctx):
            loader = _loader(ctx, flow, loop)
            if loader is None or id(loader.call) in reported:
                continue
            call = loader.call
            if _has_star(call):
                continue
            if not _may_be_none(flow, loader.index, _arg(call, "sampler", _SAMPLER_AT), call):
                continue
            if not _is_none(_arg(call, "batch_sampler", _BATCH_SAMPLER_AT)):
                continue
            shuffle = _arg(call, "shuffle", _SHUFFLE_AT)
            if shuffle is not None and _bool(shuffle) is not False:
                continue  # shuffle=True, or shuffle=<expression>: unknown here
            if shuffle is None and _may_shuffle_itself(flow, loader.index, call):
                continue
            dataset = first_arg(call, 0, keyword="dataset")
            if dataset is None or self._not_shufflable(flow, loader.index, dataset, call):
                continue
            reported.add(id(call))
            how = "shuffle=False" if shuffle is not None else "no shuffle"
            sampler = _arg(call, "sampler", _SAMPLER_AT)
            none = "no sampler" if _is_none(sampler) else f"its sampler `{node_code(sampler.value)}` can be None"  # type: ignore[union-attr]
            for at in _report_at(flow, loop, loader.index, call):
                where = "" if at is call else (
                    f" (iterated at {cited(loop)})" if isinstance(at, _Built) else f" (built at {Where(loader.index, call).label(ctx.path)})")
                yield self.finding(
                    ctx,
                    at,
                    f"the training loader `{loader.name}`{where} has {how} and {none}: every epoch "
                    "sees the same batches in the same order (one class at a time if the data is stored "
                    "sorted); pass shuffle=True",
                )

    @staticmethod
    def _not_shufflable(flow: Flow, index: ModuleIndex, dataset: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Iterable, streaming, or already shuffled datasets: the loader cannot (or need not) shuffle."""
        seen: list[cst.CSTNode] = [dataset]
        expr, where_index, node = dataset, index, at
        for _ in range(6):  # follow the dataset through names, keeping every expression met
            values = flow.values_of(where_index, expr, node) if isinstance(expr, (cst.Name, cst.Attribute)) else []
            if len(values) != 1 or values[0][3] is not None:
                break
            where_index, expr, node, _ = values[0]
            seen.append(expr)
        for expr in seen:
            text = node_code(expr)
            compact = text.replace(" ", "")
            # (a dataset built with its own `shuffle=` argument orders its items itself)
            if _STREAMING.search(text) or ".shuffle(" in text or "streaming=True" in compact or _OWN_SHUFFLE.search(compact):
                return True
        obj = flow.obj(index, dataset, at)
        if obj is None:
            return False
        if obj.kind == "class":
            return _orders_itself(flow, obj.where)
        return obj.kind == "call" and bool(_STREAMING.search(obj.name))


def _may_shuffle_itself(flow: Flow, index: ModuleIndex, call: cst.Call) -> bool:
    """A loader class of the project that may shuffle when not told: its `__init__` takes a
    `shuffle` whose default is not `False`, or it takes none and its code speaks of shuffling or
    samplers (`super().__init__(..., shuffle=True)`)."""
    found = flow.definition(index, call.func) if isinstance(call.func, (cst.Name, cst.Attribute)) else None
    if found is None or type(found.node) is not cst.ClassDef:
        return False  # torch's own: no shuffle unless asked
    init = found.index.methods(found.node).get("__init__")  # type: ignore[arg-type]
    params = [*init.params.params, *init.params.kwonly_params] if init is not None else []
    declared = next((p for p in params if p.name.value == "shuffle"), None)
    if declared is not None:
        return not (isinstance(declared.default, cst.Name) and declared.default.value == "False")
    code = node_code(found.node)
    return "shuffle" in code or "sampler" in code


def _orders_itself(flow: Flow, cls: Where) -> bool:
    """A dataset class that decides its own order: iterable-style (`__iter__` and no
    `__getitem__`: a map-style dataset that also iterates over itself, as graph libraries'
    datasets do, is still shuffled by index), streaming, one that shuffles its sample list itself
    (`np.random.shuffle(self.samples)`), or one whose `__getitem__` ignores the index it is given
    (a random window of a long text per item)."""
    iterates = indexes = False
    for current in flow.bases(cls):
        node = current.node
        assert isinstance(node, cst.ClassDef)
        methods = current.index.methods(node)
        if any(_SHUFFLES.search(node_code(m)) for m in methods.values()):
            return True
        if "__getitem__" in methods and not indexes and _ignores_index(methods["__getitem__"]):
            return True  # the `__getitem__` instances use (a base's is overridden)
        iterates = iterates or "__iter__" in methods
        indexes = indexes or "__getitem__" in methods
        for base in node.bases:
            if _STREAMING.search(node_code(base.value)):
                return True
    return iterates and not indexes

