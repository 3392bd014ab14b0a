"""Checkpoint rules (LC501-LC510): what a training checkpoint must hold to resume a run, what the
resume restores from it and how it reads the epoch back, and how checkpoints are saved and loaded.

A save is read through the model's SAVE event (its dict's keys, their values' source text and the
objects whose `state_dict()` it holds), and each entry is classified by meaning: `optim`,
`opt_state` and `optimizer.state_dict()` under any key are all the optimizer state. A save is a
*training checkpoint* when it holds more than the model weights, or when it is the only save of a
script that trains and resumes from it; weights saved for inference are never checked.

A resume (LC510) is read from the other side: the checkpoint a `torch.load` returns is followed
through names, helper calls and returns, and the keys read from it are classified the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator
from weakref import WeakKeyDictionary

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import CallSite, Event, EventKind, Loop, LoopKind, ModuleModel, Role
from loopcheck.lint.positions import node_span
from loopcheck.lint.rules._shared import (
    Trace,
    code_of,
    dotted,
    enclosing,
    import_map,
    module_of,
    nodes_of,
    parents,
    resolve_call,
)
from loopcheck.lint.rules.base import FileContext, Rule

K = EventKind

# what a checkpoint entry can be
MODEL, OPTIMIZER, SCHEDULER, SCALER, PROGRESS, RNG, EMA = (
    "model", "optimizer", "scheduler", "scaler", "progress", "rng", "ema",
)
_TRAINING_STATE = frozenset({OPTIMIZER, SCHEDULER, SCALER, PROGRESS, RNG})
_ROLE_ITEM = {
    Role.OPTIMIZER: OPTIMIZER,
    Role.SCHEDULER: SCHEDULER,
    Role.SCALER: SCALER,
    Role.EMA: EMA,
    Role.MODEL: MODEL,
}

_PROGRESS_TOKENS = frozenset(
    {"epoch", "epochs", "step", "steps", "iteration", "iterations", "iter", "iters", "it", "update", "updates",
     "progress", "tick", "ticks", "samples", "seen", "tokens"}
)
_RNG_TOKENS = frozenset({"rng", "rngs", "random", "generator", "generators", "getstate"})
_EMA_TOKENS = frozenset({"ema", "emas", "shadow", "swa", "averaged", "average", "polyak"})
_RNG_CALL = re.compile(r"get_rng_state|\bgetstate\s*\(|\bget_state\s*\(|\brng\b|\brng_state", re.I)
_STATE_DICT = re.compile(r"([A-Za-z_][\w.]*(?:\[[^\]]*\])?)\s*\.\s*state_dict\s*\(")
_NESTED_KEY = re.compile(r"[\"'](\w+)[\"']\s*:")
_EXPORT_PATH = re.compile(r"best|final|export|weights|infer|deploy|release|pretrain|model_only|for_eval", re.I)


def _tokens(key: str) -> list[str]:
    """`optimizerG` -> [optimizer, g]; `global_step` -> [global, step]; `modelEma` -> [model, ema]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [t for t in re.split(r"[^a-z0-9]+", spaced.lower()) if t]


def _object_item(name: str, model: ModuleModel) -> str | None:
    """What `name.state_dict()` saves: from the name's role, else from how it is spelled."""
    role = model.role(name)
    if role in _ROLE_ITEM:
        return _ROLE_ITEM[role]
    last = name.split(".")[-1].split("[")[0]
    item = _key_item(last, "")
    return item if item in (OPTIMIZER, SCHEDULER, SCALER, EMA) else None


def _key_item(key: str, value: str) -> str | None:
    """What a dict key says its entry is (None when it says nothing we check)."""
    low = key.lower()
    tokens = _tokens(key)
    if "optim" in low:
        return OPTIMIZER
    if any(t in ("opt", "opts") for t in tokens):
        # `opt` is also argparse's options (`"opt": vars(opt)`): only a state dict counts
        return OPTIMIZER if "state_dict" in value else None
    if "sched" in low:
        return SCHEDULER
    if "scaler" in low or tokens == ["amp"] or low in ("amp_state", "amp_state_dict"):
        return SCALER
    if any(t in _EMA_TOKENS for t in tokens):
        return EMA
    if any(t in _RNG_TOKENS for t in tokens):
        return RNG
    if any(t in _PROGRESS_TOKENS or t.startswith(("epoch", "step", "iter")) for t in tokens):
        return PROGRESS
    if any(t in ("model", "net", "network", "weights", "params", "module") for t in tokens) or low == "state_dict":
        return MODEL
    return None


@dataclass
class Saved:
    """One `torch.save(...)` and what its checkpoint holds."""

    event: Event
    known: bool  # whether its content could be read at all
    items: set[str] = field(default_factory=set)
    path_text: str = ""
    whole_object: bool = False
    progress_in_path: bool = False  # `f"ckpt_epoch{epoch}.pt"`: the file name records the progress
    unit: tuple = ()
    joined: set[str] = field(default_factory=set)  # items of the component files saved next to it

    @property
    def training_state(self) -> set[str]:
        return self.items & _TRAINING_STATE

    @property
    def component(self) -> bool:
        """One piece of a checkpoint spread over several files (`optimizer.pt`, `rng_state.pth`):
        neither weights nor progress, only other state."""
        return self.known and not self.whole_object and bool(self.items) and not self.items & {MODEL, PROGRESS}

    def holds(self, item: str) -> bool:
        return item in self.items or item in self.joined

    @property
    def looks_exported(self) -> bool:
        return bool(_EXPORT_PATH.search(self.path_text))


def classify(event: Event, model: ModuleModel) -> Saved:
    detail = event.detail
    keys = detail.get("keys")
    values: dict = detail.get("values") or {}
    state_of = detail.get("state_of") or frozenset()
    obj_text = detail.get("obj_text") or ""
    saved = Saved(
        event,
        known=keys is not None or bool(state_of) or bool(_STATE_DICT.search(obj_text)),
        path_text=detail.get("path_text") or "",
        whole_object=bool(detail.get("whole_object")),
    )
    for name in state_of:
        item = _object_item(name, model)
        saved.items.add(item or MODEL)
    for key in keys or ():
        value = str(values.get(key, ""))
        item = _key_item(str(key), value)
        if item:
            saved.items.add(item)
    for text in [*(str(v) for v in values.values()), obj_text]:
        saved.items |= _text_items(text, model)
    saved.progress_in_path = _path_has_progress(saved.path_text)
    return saved


_STRING = re.compile(r"[rbuRBU]?([\"'])(?:\\.|(?!\1).)*\1")


def _path_has_progress(path_text: str) -> bool:
    """Whether a save path is built from an epoch / step variable (not just a literal name)."""
    fields = re.findall(r"\{([^{}]*)\}", path_text)  # f-string fields
    outside = _STRING.sub(" ", path_text)  # `"ckpt_%d.pt" % epoch`, `.format(step)`, `join(d, epoch)`
    for text in [*fields, outside]:
        for name in re.findall(r"[A-Za-z_]\w*", text):
            if _key_item(name, "") == PROGRESS:
                return True
    return False


def _text_items(text: str, model: ModuleModel) -> set[str]:
    """Entries visible in a value's source: `x.state_dict()` calls, RNG getters, nested keys."""
    items: set[str] = set()
    for match in _STATE_DICT.finditer(text):
        items.add(_object_item(match.group(1), model) or MODEL)
    if _RNG_CALL.search(text):
        items.add(RNG)
    for key in _NESTED_KEY.findall(text):
        item = _key_item(key, "")  # the value is not isolated: an ambiguous `opt` does not count
        if item:
            items.add(item)
    return items


class Facts:
    """What the whole file (its inlined helpers included) does, for the checkpoint rules."""

    @classmethod
    def of(cls, ctx: FileContext) -> "Facts":
        facts = _FACTS.get(ctx)
        if facts is None:
            facts = _FACTS[ctx] = cls(ctx)
        return facts

    def __init__(self, ctx: FileContext) -> None:
        model = ctx.model
        self.module = ctx.module  # not ctx itself: facts are cached per ctx in a weak-keyed dict
        self.model = model
        events = model.events
        kinds = {e.kind for e in events}
        self.trains = bool(kinds & {K.STEP, K.SCALER_STEP})
        self.uses_optimizer = self.trains or bool(model.names(Role.OPTIMIZER))
        self.uses_scheduler = K.SCHED_STEP in kinds
        self.uses_scaler = bool(kinds & {K.SCALER_STEP, K.SCALER_SCALE}) or any(
            e.kind is K.BACKWARD and e.detail.get("scaled") is True for e in events
        )
        self.uses_ema = K.EMA_UPDATE in kinds or any(
            b.role is Role.EMA and b.evidence == "constructor" for b in model.bindings.values()
        )
        self.saves: list[Saved] = []
        trace = Trace.of(ctx)
        seen: set[tuple] = set()
        for i, e in enumerate(trace.events):
            if e.kind is K.SAVE and Trace.remember(seen, e):
                saved = classify(e, model)
                saved.unit = trace.units[i]
                self.saves.append(saved)
        for saved in self.saves:
            for part in self.saves:
                if part.component and part.unit == saved.unit:
                    saved.joined |= part.items
        self.loads = [e for e in events if e.kind is K.LOAD]

    def resumes_from(self, saved: Saved) -> bool:
        """A load of the same file, or one on a resume path (`if args.resume:`)."""
        for load in self.loads:
            call = load.detail.get("call")
            path = _first_arg_text(call) if isinstance(call, cst.Call) else ""
            if path and saved.path_text and path == saved.path_text:
                return True
            texts = [path, *(g.text for g in load.guards)]
            if any(re.search(r"resume|restore|last", t or "", re.I) for t in texts):
                return True
        return False

    def training_checkpoints(self) -> Iterator[Saved]:
        weights_only = [s for s in self.saves if s.known and not s.whole_object and not s.training_state]
        if not self.trains:
            return
        for saved in self.saves:
            if not saved.known or saved.whole_object or saved.component:
                continue
            if saved.training_state:
                if saved.looks_exported and not saved.items & {OPTIMIZER, SCHEDULER, SCALER}:
                    continue  # `best.pt` with an epoch next to it: an inference artifact
                yield saved
            elif (
                len(self.saves) == 1
                and weights_only == [saved]
                and self.trains
                and not saved.looks_exported
                and self.resumes_from(saved)
            ):
                yield saved


_FACTS: "WeakKeyDictionary[FileContext, Facts]" = WeakKeyDictionary()


def _assigns_attribute(module: cst.Module, attr: str) -> bool:
    """Whether the module assigns `<something>.<attr> = ...` anywhere."""
    found = False

    class _Targets(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            nonlocal found
            if isinstance(node.target, cst.Attribute) and node.target.attr.value == attr:
                found = True

    module.visit(_Targets())
    return found


def _first_arg_text(call: cst.Call | None) -> str:
    if call is None or not call.args:
        return ""
    return code_of(call.args[0].value)


def _describe(saved: Saved) -> str:
    return "this checkpoint" if not saved.path_text else f"the checkpoint saved to `{saved.path_text}`"


class _CheckpointRule(Rule):
    """A training checkpoint lacks `item` while the script uses it."""

    item: str

    def needed(self, facts: Facts) -> bool:
        raise NotImplementedError

    def message(self, saved: Saved, facts: Facts) -> str:
        raise NotImplementedError

    def holds(self, saved: Saved) -> bool:
        return saved.holds(self.item)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        facts = Facts.of(ctx)
        if not self.needed(facts):
            return
        for saved in facts.training_checkpoints():
            if not self.holds(saved):
                yield self.finding(ctx, saved.event, self.message(saved, facts))


def _name_of(model: ModuleModel, role: Role, default: str) -> str:
    names = model.names(role)
    return names[0] if len(names) == 1 else default


class CheckpointMissingOptimizer(_CheckpointRule):
    code = "LC501"
    item = OPTIMIZER

    def needed(self, facts: Facts) -> bool:
        return facts.uses_optimizer

    def message(self, saved: Saved, facts: Facts) -> str:
        opt = _name_of(facts.model, Role.OPTIMIZER, "optimizer")
        return (
            f"{_describe(saved)} has no optimizer state: a resumed run restarts Adam's moments / SGD's "
            f"momentum from zero; add `\"optimizer\": {opt}.state_dict()`"
        )


class CheckpointMissingScheduler(_CheckpointRule):
    code = "LC502"
    item = SCHEDULER

    def needed(self, facts: Facts) -> bool:
        # `scheduler.last_epoch = start_epoch - 1` (YOLOv5): the position is restored by hand
        return facts.uses_scheduler and not _assigns_attribute(facts.module, "last_epoch")

    def message(self, saved: Saved, facts: Facts) -> str:
        sched = _name_of(facts.model, Role.SCHEDULER, "scheduler")
        return (
            f"{_describe(saved)} has no scheduler state: a resumed run restarts the learning-rate "
            f"schedule from its first value; add `\"scheduler\": {sched}.state_dict()`"
        )


class CheckpointMissingScaler(_CheckpointRule):
    code = "LC503"
    item = SCALER

    def needed(self, facts: Facts) -> bool:
        return facts.uses_scaler

    def message(self, saved: Saved, facts: Facts) -> str:
        scaler = _name_of(facts.model, Role.SCALER, "scaler")
        return (
            f"{_describe(saved)} has no GradScaler state: a resumed run restarts the loss scale at "
            f"65536 and skips steps until it backs off; add `\"scaler\": {scaler}.state_dict()`"
        )


class CheckpointMissingProgress(_CheckpointRule):
    code = "LC504"
    item = PROGRESS

    def needed(self, facts: Facts) -> bool:
        return True

    def holds(self, saved: Saved) -> bool:
        return saved.holds(PROGRESS) or saved.progress_in_path

    def message(self, saved: Saved, facts: Facts) -> str:
        return (
            f"{_describe(saved)} records no epoch or step: a resumed run starts counting from zero "
            f"and trains the whole schedule again; save the number of finished epochs (and the global step)"
        )


class CheckpointMissingRng(_CheckpointRule):
    code = "LC505"
    item = RNG

    def needed(self, facts: Facts) -> bool:
        return True

    def message(self, saved: Saved, facts: Facts) -> str:
        return (
            f"{_describe(saved)} holds no RNG state, so a resumed run draws other shuffles, "
            f"augmentations and dropout masks; save `torch.get_rng_state()`, "
            f"`torch.cuda.get_rng_state_all()`, `random.getstate()` and `np.random.get_state()`"
        )


class CheckpointMissingEma(_CheckpointRule):
    code = "LC506"
    item = EMA

    def needed(self, facts: Facts) -> bool:
        return facts.uses_ema

    def message(self, saved: Saved, facts: Facts) -> str:
        ema = _name_of(facts.model, Role.EMA, "ema")
        return (
            f"{_describe(saved)} has no EMA weights: a resumed run rebuilds the average from the raw "
            f"weights and loses thousands of steps of it; add `\"ema\": {ema}.state_dict()`"
        )


# --- LC508 / LC509 -----------------------------------------------------------------------------


class TorchLoadUnsafe(Rule):
    code = "LC508"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        names = import_map(ctx.module)
        calls: list[cst.Call] = []

        class _Loads(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                if resolve_call(names, node.func) == "torch.load":
                    calls.append(node)

        ctx.module.visit(_Loads())
        for call in calls:
            if any(a.star == "**" or (a.keyword is not None and a.keyword.value == "weights_only") for a in call.args):
                continue
            yield self.finding(
                ctx,
                call,
                "`torch.load` without `weights_only` unpickles arbitrary code before PyTorch 2.6 and "
                "refuses non-tensor objects after it; pass `weights_only=True` (or `weights_only=False` "
                "for your own trusted file)",
            )


class WholeModelPickled(Rule):
    code = "LC509"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        seen: set[tuple] = set()
        for e in model.events:
            if e.kind is not K.SAVE:
                continue
            pickled = _pickled_model(e, model)
            if pickled is None or not Trace.remember(seen, e):
                continue
            yield self.finding(
                ctx,
                e,
                f"`torch.save` pickles the module `{pickled}` itself, which only loads where the same "
                f"class is importable from the same path; save `{pickled}.state_dict()` instead",
            )


_UNWRAP = re.compile(r"\.(module|_orig_mod)$")


def _pickled_model(event: Event, model: ModuleModel) -> str | None:
    """The model a save pickles whole (`torch.save(model, ...)`, `{"model": model}`), if any."""
    detail = event.detail
    obj = (detail.get("obj_text") or "").strip()
    if detail.get("whole_object"):
        return obj or "model"
    candidates = [obj, *(str(v).strip() for v in (detail.get("values") or {}).values())]
    for text in candidates:
        if not re.fullmatch(r"[A-Za-z_][\w.]*", text or ""):
            continue
        if model.role(text) is Role.MODEL or model.role(_UNWRAP.sub("", text)) is Role.MODEL:
            return text
    return None


# --- LC507 -------------------------------------------------------------------------------------


class ResumeEpochOffByOne(Rule):
    code = "LC507"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        trace = Trace.of(ctx)
        seen: set[tuple] = set()
        for loop in model.walk_loops():
            start = _range_start(loop, ctx)
            if start is None:
                continue
            var, start_name = start
            keys = _finished_epoch_keys(loop, var, trace, ctx)
            if not keys:
                continue
            # `self.start_epoch` may be set by a resume method of the same class
            kind = cst.ClassDef if start_name.startswith("self.") else cst.FunctionDef
            scope = _enclosing(ctx, loop.node, kind)
            for assign, key in _epoch_reads(scope, start_name, keys, ctx.module):
                span = ctx.span(assign)
                if (span.line, span.column) in seen:
                    continue
                seen.add((span.line, span.column))
                yield self.finding(
                    ctx,
                    assign,
                    f"`{start_name}` resumes at the epoch the checkpoint recorded, but `\"{key}\"` was saved "
                    f"after that epoch had finished, so it is trained twice; start from "
                    f"`ckpt[\"{key}\"] + 1` or save `{var} + 1`",
                )


def _range_start(loop: Loop, ctx: FileContext) -> tuple[str, str] | None:
    """(loop variable, start name) of `for var in range(start, ...)` written in this file."""
    node = loop.node
    if loop.kind is LoopKind.EVAL or loop.path != ctx.path or not isinstance(node, cst.For):
        return None
    if not isinstance(node.target, cst.Name):
        return None
    it = node.iter
    if not (isinstance(it, cst.Call) and dotted(it.func) == "range" and len(it.args) >= 2):
        return None
    start = dotted(it.args[0].value)
    if start is None or it.args[0].keyword is not None:
        return None
    return node.target.value, start


def _finished_epoch_keys(loop: Loop, var: str, trace: Trace, ctx: FileContext) -> set[str]:
    """Keys under which a save at the end of this loop's iteration stores the loop variable as it is."""
    inside = {id(inner) for inner in loop.walk()}
    keys: set[str] = set()
    trained = False
    for e in trace.events:
        if e.loop is None or id(e.loop) not in inside:
            continue
        if e.kind in (K.BACKWARD, K.STEP, K.SCALER_STEP):
            trained = True
        elif e.kind is K.SAVE and e.loop is loop and trained:
            for key, value in (e.detail.get("values") or {}).items():
                text = _resolve_value(str(value).strip(), e, ctx)
                if text == var:
                    keys.add(str(key))
    return keys


def _resolve_value(text: str, event: Event, ctx: FileContext) -> str:
    """A saved value written as a helper's parameter, followed back through the call sites to the
    caller's argument text (`save_checkpoint(model, opt, epoch)` -> `epoch`)."""
    path, line = event.path, event.line
    for site in reversed(event.via):
        if not re.fullmatch(r"[A-Za-z_]\w*", text):
            break
        arg = _argument_for(text, site, path, line, ctx)
        if arg is None:
            break
        text, path, line = arg, site.path, site.line
    return text


def _argument_for(param: str, site: CallSite, path: str, line: int, ctx: FileContext) -> str | None:
    """The source of the argument the call at `site` passes for parameter `param` of the function
    it calls (the one in `path` around `line`)."""
    callee_module = module_of(path, ctx)
    caller_module = module_of(site.path, ctx)
    if callee_module is None or caller_module is None:
        return None
    short = site.callee.split(".")[-1]
    func = None
    for node in _functions(callee_module):
        if node.name.value != short:
            continue
        start, _, end, _ = node_span(callee_module, node)
        if start <= line <= end:
            func = node
            break
    if func is None:
        return None
    params = [p.name.value for p in func.params.params]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    call = None
    for node in nodes_of(caller_module, cst.Call):
        name = dotted(node.func) or ""
        if name.split(".")[-1] == short and node_span(caller_module, node)[0] == site.line:
            call = node
            break
    if call is None or any(a.star for a in call.args):
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == param:
            return caller_module.code_for_node(arg.value).strip()
    positional = [a for a in call.args if a.keyword is None]
    if param in params and params.index(param) < len(positional):
        return caller_module.code_for_node(positional[params.index(param)].value).strip()
    return None


def _functions(module: cst.Module) -> list[cst.FunctionDef]:
    return nodes_of(module, cst.FunctionDef)


def _enclosing(ctx: FileContext, node: cst.CSTNode, kind: type) -> cst.CSTNode:
    """The innermost function (or class) around `node`; the module when there is none."""
    line = ctx.span(node).line
    best: cst.CSTNode = ctx.module
    best_start = 0
    for outer in nodes_of(ctx.module, kind):
        span = ctx.span(outer)
        if span.line <= line <= span.end_line and span.line > best_start:
            best, best_start = outer, span.line
    return best


_CKPT_NAME = re.compile(r"ckpt|checkpoint|state|resume|snapshot|saved|loaded|restore", re.I)


def _epoch_reads(scope: cst.CSTNode, start: str, keys: set[str], module: cst.Module) -> list[tuple[cst.CSTNode, str]]:
    """Assignments in `scope` that set `start` from a checkpoint's finished-epoch entry, unless
    `start` is also adjusted there (`start += 1`, `start = start + 1`)."""
    reads: list[tuple[cst.CSTNode, str]] = []
    adjusted = False
    helpers = {f.name.value: f for f in _functions(module)}
    loaded = _loaded_names(scope)
    whole_class = isinstance(scope, cst.ClassDef)

    class _Assigns(cst.CSTVisitor):
        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            nonlocal adjusted
            if dotted(node.target) == start:
                adjusted = True

        def visit_Assign(self, node: cst.Assign) -> None:
            nonlocal adjusted
            for target in node.targets:
                index = _target_index(target.target, start)
                if index is None:
                    continue
                value: cst.BaseExpression | None = node.value
                if index >= 0 and isinstance(value, (cst.Tuple, cst.List)):
                    value = value.elements[index].value if index < len(value.elements) else None
                if value is None:
                    continue
                if start in _names_in(value):
                    adjusted = True
                    continue
                key = _checkpoint_key(value, keys, loaded, helpers, index)
                if key is not None:
                    reads.append((node, key))

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return whole_class or node is scope

    scope.visit(_Assigns())
    return [] if adjusted else reads


def _target_index(target: cst.BaseExpression, name: str) -> int | None:
    """-1 when `target` is `name`; its position when `target` is a tuple holding it; else None."""
    if dotted(target) == name:
        return -1
    if isinstance(target, (cst.Tuple, cst.List)):
        for i, el in enumerate(target.elements):
            if dotted(el.value) == name:
                return i
    return None


def _names_in(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> bool:
            text = dotted(n)
            if text:
                found.add(text)
            return True

        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

    node.visit(_Names())
    return found


def _subscript_key(node: cst.BaseExpression) -> tuple[str | None, str | None]:
    """(object, key) of `obj["key"]` or `obj.get("key", ...)`."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
            return dotted(node.value), index.value.evaluated_value
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "get":
        if node.args and isinstance(node.args[0].value, cst.SimpleString):
            return dotted(node.func.value), node.args[0].value.evaluated_value
    return None, None


def _checkpoint_key(
    value: cst.BaseExpression,
    keys: set[str],
    loaded: set[str],
    helpers: dict[str, cst.FunctionDef],
    index: int = -1,
    depth: int = 0,
) -> str | None:
    """The finished-epoch key `value` reads from a checkpoint as it is (no `+ 1`), else None.
    A call of a same-file helper is read through its returns (item `index` of a returned tuple)."""
    if isinstance(value, cst.Call) and dotted(value.func) in ("int", "float") and len(value.args) == 1:
        value = value.args[0].value
    obj, key = _subscript_key(value)
    if key is not None:
        if key in keys and obj is not None and (obj in loaded or _CKPT_NAME.search(obj)):
            return key
        return None
    if depth == 0 and isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
        helper = helpers.get(value.func.value)
        if helper is not None:
            return _helper_returns_key(helper, keys, helpers, index)
    return None


def _helper_returns_key(
    helper: cst.FunctionDef, keys: set[str], helpers: dict[str, cst.FunctionDef], index: int
) -> str | None:
    """The one checkpoint key the helper's returns hand back as it is (a `return 0, 0.0` for the
    no-checkpoint case hands back none and does not count)."""
    found: list[str | None] = []
    loaded = _loaded_names(helper)

    class _Returns(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            value = node.value
            if index >= 0 and isinstance(value, (cst.Tuple, cst.List)):
                value = value.elements[index].value if index < len(value.elements) else None
            found.append(_checkpoint_key(value, keys, loaded, helpers, depth=1) if value is not None else None)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is helper

    helper.visit(_Returns())
    keys_found = {k for k in found if k is not None}
    return keys_found.pop() if len(keys_found) == 1 else None


def _loaded_names(scope: cst.CSTNode) -> set[str]:
    """Names assigned from a `*load*(...)` call in `scope` (`ckpt = torch.load(path)`)."""
    names: set[str] = set()

    class _Loads(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if isinstance(node.value, cst.Call) and "load" in (dotted(node.value.func) or "").split(".")[-1]:
                for target in node.targets:
                    text = dotted(target.target)
                    if text:
                        names.add(text)

    scope.visit(_Loads())
    return names


# --- LC510 -------------------------------------------------------------------------------------

_RESTORABLE = (OPTIMIZER, SCHEDULER, SCALER, PROGRESS)  # the states LC510 checks, in message order
_RESUME_TEXT = re.compile(r"resum|restor|\blast|_last|last_|latest", re.I)
_RESUME_FUNCTION = re.compile(r"resum|restor|checkpoint|ckpt|snapshot|load_state|latest|\blast|_last", re.I)
_NOT_RESUME = re.compile(
    r"pretrain|finetun|fine_tun|init_from|teacher|backbone|best|export|infer|predict|deploy|(?<![a-z])eval|"
    r"(?<![a-z])test|warm_?start|averag|ensemble|merge|convert",
    re.I,
)
# callees that only look at a checkpoint (`print(ckpt.keys())` is a read we cannot follow, this is not)
_LOOKS_ONLY = frozenset({"print", "len", "isinstance", "type", "str", "repr", "bool", "id", "hasattr", "format"})
_LOGGERS = re.compile(r"^(self\.)?(log|logger|logging|_logger|LOGGER)\.")
_MAX_FOLLOW = 3  # helper calls followed from the load


@dataclass
class Restore:
    """What a resume reads back from one `torch.load(...)`."""

    event: Event
    keys: set[str] = field(default_factory=set)  # literal keys read: `ckpt["optimizer"]`, `ckpt.get("epoch")`
    objects: set[str] = field(default_factory=set)  # `opt.load_state_dict(torch.load(...))`: the whole file
    unknown: bool = False  # read in a way not followed (a key in a variable, an unknown callee, ...)
    bound: str | None = None  # the name the checkpoint is bound to, for the message


class _Reader:
    """Follows a loaded checkpoint through names, returns and helper calls, and records the keys
    read from it. Anything it cannot follow makes the result unknown: then every state may be
    restored and nothing is said."""

    def __init__(self, ctx: FileContext, restore: Restore, state_loads: dict[int, str | None]) -> None:
        self.ctx = ctx
        self.restore = restore
        self.state_loads = state_loads  # id(load_state_dict call) -> canonical receiver
        self._seen: set[tuple[int, int, str]] = set()
        self._import_maps: dict[int, dict[str, str]] = {}

    def run(self) -> None:
        event = self.restore.event
        module = module_of(event.path, self.ctx)
        if module is None or id(event.node) not in parents(module):
            self.restore.unknown = True
            return
        callers = [self._call_at(site) for site in event.via]
        self.value(event.path, module, event.node, callers, 0)

    # where a value goes --------------------------------------------------------------------

    def value(self, path: str, module: cst.Module, node: cst.CSTNode, callers: list, depth: int) -> None:
        up = parents(module)
        parent = up.get(id(node))
        restore = self.restore
        if isinstance(parent, cst.Subscript) and parent.value is node:
            key = _literal_index(parent)
            if key is None:
                restore.unknown = True  # `ckpt[k]`: a loop over keys restores whatever it names
            else:
                restore.keys.add(key)
        elif isinstance(parent, cst.Attribute) and parent.value is node:
            call = up.get(id(parent))
            key = None
            if parent.attr.value in ("get", "pop") and isinstance(call, cst.Call) and call.func is parent and call.args:
                key = _string(call.args[0].value)
            if key is None:
                restore.unknown = True
            else:
                restore.keys.add(key)
        elif isinstance(parent, cst.Arg) and parent.value is node:
            call = up.get(id(parent))
            if isinstance(call, cst.Call):
                self.argument(path, module, call, parent, callers, depth)
            else:
                restore.unknown = True
        elif isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            if len(targets) == 1 and isinstance(targets[0], cst.Name):
                name = targets[0].value
                restore.bound = restore.bound or name
                scope = enclosing(module, parent, cst.FunctionDef) or module
                self.name(path, module, scope, name, callers, depth)
            else:
                restore.unknown = True  # `self.ckpt = ...`, tuple targets
        elif isinstance(parent, cst.Return):
            if not callers or callers[-1] is None:
                restore.unknown = True
            else:
                caller_path, caller_module, call = callers[-1]
                self.value(caller_path, caller_module, call, callers[:-1], depth)
        elif isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.If, cst.While, cst.IfExp,
                                 cst.BooleanOperation, cst.UnaryOperation, cst.Del, cst.FormattedStringExpression)):
            return  # `"scheduler" in ckpt`, `if ckpt is None:`, `del ckpt`: no state is read
        else:
            restore.unknown = True

    def name(self, path: str, module: cst.Module, scope: cst.CSTNode, name: str, callers: list, depth: int) -> None:
        key = (id(module), id(scope), name)
        if key in self._seen:
            return
        self._seen.add(key)
        up = parents(module)
        for node in nodes_of(scope, cst.Name):
            if node.value != name or _binds_or_labels(node, up.get(id(node))):
                continue
            self.value(path, module, node, callers, depth)
            if self.restore.unknown:
                return

    def argument(self, path: str, module: cst.Module, call: cst.Call, arg: cst.Arg, callers: list, depth: int) -> None:
        restore = self.restore
        func = dotted(call.func) or ""
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "load_state_dict":
            restore.objects.add(self.state_loads.get(id(call)) or dotted(call.func.value) or "")
            return
        if func in _LOOKS_ONLY or _LOGGERS.match(func):
            return
        if resolve_call(self._imports(module), call.func) == "torch.save":
            return  # a later checkpoint reusing the name (`torch.save(checkpoint, path)`) restores nothing
        target = None if depth >= _MAX_FOLLOW or arg.star else self._callee(path, module, call)
        if target is None:
            restore.unknown = True
            return
        callee_path, callee_module, fdef, bound = target
        param = _parameter_for(fdef, call, arg, bound)
        if param is None:
            restore.unknown = True
            return
        frames = [*callers, (path, module, call)]
        self.name(callee_path, callee_module, fdef, param, frames, depth + 1)

    # resolving calls -----------------------------------------------------------------------

    def _imports(self, module: cst.Module) -> dict[str, str]:
        found = self._import_maps.get(id(module))
        if found is None:
            found = self._import_maps[id(module)] = import_map(module)
        return found

    def _callee(self, path: str, module: cst.Module, call: cst.Call):
        """(path, module, function, bound) of a call to a function or method of this project."""
        func = call.func
        if isinstance(func, cst.Attribute) and dotted(func.value) == "self":
            cls = enclosing(module, call, cst.ClassDef)
            if isinstance(cls, cst.ClassDef):
                method = _method(cls, func.attr.value)
                if method is not None:
                    return path, module, method, True
            return None
        if not isinstance(func, cst.Name):
            return None
        for node in module.body:
            if isinstance(node, cst.FunctionDef) and node.name.value == func.value:
                return path, module, node, False
            if isinstance(node, cst.ClassDef) and node.name.value == func.value:
                init = _method(node, "__init__")
                return (path, module, init, True) if init is not None else None
        return self._imported(path, module, func.value)

    def _imported(self, path: str, module: cst.Module, name: str):
        project = self.ctx.project
        if project is None or not hasattr(project, "load"):
            return None
        for stmt in nodes_of(module, cst.ImportFrom):
            if isinstance(stmt.names, cst.ImportStar):
                continue
            for alias in stmt.names:
                if (alias.evaluated_alias or alias.evaluated_name) != name:
                    continue
                source = dotted(stmt.module) if stmt.module is not None else ""
                try:
                    parsed = project.load(path, source or "", len(stmt.relative))
                except (OSError, ValueError, RecursionError):
                    return None
                if parsed is None:
                    return None
                for node in parsed.module.body:
                    if isinstance(node, cst.FunctionDef) and node.name.value == alias.evaluated_name:
                        return parsed.path, parsed.module, node, False
                return None
        return None

    def _call_at(self, site: CallSite):
        """(path, module, call) of the call an inlined chain went through, or None."""
        module = module_of(site.path, self.ctx)
        if module is None:
            return None
        short = site.callee.split(".")[-1]
        for call in nodes_of(module, cst.Call):
            if (dotted(call.func) or "").split(".")[-1] == short and node_span(module, call)[0] == site.line:
                return site.path, module, call
        return None


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _literal_index(sub: cst.Subscript) -> str | None:
    if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
        return _string(sub.slice[0].slice.value)
    return None


def _binds_or_labels(node: cst.Name, parent: cst.CSTNode | None) -> bool:
    """A Name that is not a use of the variable: an assignment target, an attribute's or a
    keyword's label, a parameter, an import."""
    if isinstance(parent, (cst.AssignTarget, cst.Param, cst.AsName, cst.ImportAlias, cst.NameItem)):
        return True
    if isinstance(parent, cst.Attribute) and parent.attr is node:
        return True
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return True
    if isinstance(parent, (cst.AnnAssign, cst.AugAssign)) and parent.target is node:
        return True
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is node:
        return True
    return isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is node


def _method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


def _parameter_for(fdef: cst.FunctionDef, call: cst.Call, arg: cst.Arg, bound: bool) -> str | None:
    """The parameter of `fdef` that `arg` of `call` binds."""
    positional = [p.name.value for p in (*fdef.params.posonly_params, *fdef.params.params)]
    if bound and positional:
        positional = positional[1:]
    if arg.keyword is not None:
        names = positional + [p.name.value for p in fdef.params.kwonly_params]
        return arg.keyword.value if arg.keyword.value in names else None
    index = [a for a in call.args if a.keyword is None].index(arg)
    return positional[index] if index < len(positional) else None


def _restored_by_hand(module: cst.Module) -> set[str]:
    """States a resume may set without a state dict: `scheduler.last_epoch = ...` or
    `StepLR(..., last_epoch=start - 1)` restore the schedule; `start = scheduler.last_epoch`
    reads the progress back from the restored schedule."""
    items: set[str] = set()
    up = parents(module)
    for node in nodes_of(module, cst.Attribute):
        if node.attr.value == "last_epoch":
            parent = up.get(id(node))
            items.add(SCHEDULER if isinstance(parent, cst.AssignTarget) else PROGRESS)
    for arg in nodes_of(module, cst.Arg):
        if arg.keyword is not None and arg.keyword.value == "last_epoch" and code_of(arg.value) != "-1":
            items.add(SCHEDULER)
    return items


class ResumeStateNotRestored(Rule):
    code = "LC510"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        facts = Facts.of(ctx)
        checkpoints = list(facts.training_checkpoints())
        if not checkpoints:
            return
        trace = Trace.of(ctx)
        state_loads = {
            id(e.node): e.target
            for e in trace.events
            if e.kind is K.LOAD and e.detail.get("fn") == "load_state_dict"
        }
        saved_keys = _saved_key_items(checkpoints, facts.model)
        groups: dict[tuple, list[Restore]] = {}
        seen: set[tuple] = set()
        for e in trace.events:
            if e.kind is not K.LOAD or e.detail.get("fn") != "torch.load" or not Trace.remember(seen, e):
                continue
            where = _frame(e, trace)
            if where is None:
                continue
            restore = Restore(e)
            _Reader(ctx, restore, state_loads).run()
            groups.setdefault(where[0], []).append(restore)
        for frame, restores in groups.items():
            if any(r.unknown for r in restores):
                continue
            own = [_restored_items(r, saved_keys, facts.model) for r in restores]
            restored = set().union(*own)
            restored |= _restored_by_hand(ctx.module)
            resume = next(
                (r for r, items in zip(restores, own) if self._resumes(r, items, checkpoints, trace, ctx)), None
            )
            if resume is None:
                continue
            saved, keys = _expected(resume, checkpoints, ctx)
            missing = [item for item in _RESTORABLE if item in saved and item not in restored]
            if missing:
                yield self.finding(ctx, resume.event, _message(resume, missing, keys, facts.model))

    @staticmethod
    def _resumes(
        restore: Restore, restored: set[str], checkpoints: list[Saved], trace: Trace, ctx: FileContext
    ) -> bool:
        """Whether this load resumes training (and is not a load of pretrained or final weights)."""
        event = restore.event
        if _after_training(event, trace):
            return False
        if restored & _TRAINING_STATE:
            return True  # it reads optimizer / scheduler / scaler / progress / RNG state back
        if event.loop is not None:
            return False  # weights read in a loop: averaging or comparing checkpoints
        path_text = event.detail.get("path_text") or ""
        functions = _function_names(event, ctx, trace)
        if any(_NOT_RESUME.search(t) for t in [path_text, *functions]):
            return False
        if _RESUME_TEXT.search(path_text) or any(_RESUME_TEXT.search(g.text) for g in event.guards):
            return True
        if any(_RESUME_FUNCTION.search(f) for f in functions):
            return True
        # `if os.path.exists(ckpt_path): ckpt = torch.load(ckpt_path)` before the loop that saves there
        here = _frame(event, trace)
        load_path = _resolve_value(path_text, event, ctx)
        for saved in checkpoints:
            there = _frame(saved.event, trace)
            if there is None or here is None or there[0] != here[0] or there[1] <= here[1]:
                continue
            if load_path and _resolve_value(saved.path_text, saved.event, ctx) == load_path:
                return True
        return False


def _frame(event: Event, trace: Trace) -> tuple[tuple[str, int], int] | None:
    """((file, start line of the outermost function), line in it) of an event of this file's
    entry functions: inlined events are placed at the call that reached them."""
    path, line = (event.via[0].path, event.via[0].line) if event.via else (event.path, event.line)
    if path != trace.path:
        return None
    return (path, trace.function_at(line)), line


def _after_training(event: Event, trace: Trace) -> bool:
    """A load that follows an optimizer step in its function: final weights loaded for testing."""
    here = _frame(event, trace)
    if here is None:
        return False
    for e in trace.events:
        if e.kind in (K.STEP, K.SCALER_STEP):
            there = _frame(e, trace)
            if there is not None and there[0] == here[0] and there[1] < here[1]:
                return True
    return False


def _function_names(event: Event, ctx: FileContext, trace: Trace) -> list[str]:
    """The functions the load sits in: the entry function that reached it (`test()` calling
    `self.load_checkpoint(...)`), the call chain, and its own."""
    names = [site.callee.split(".")[-1] for site in event.via]
    where = _frame(event, trace)
    if where is not None:
        for func in nodes_of(ctx.module, cst.FunctionDef):
            if node_span(ctx.module, func)[0] == where[0][1]:
                names.append(func.name.value)
                break
    module = module_of(event.path, ctx)
    if module is not None and id(event.node) in parents(module):
        func = enclosing(module, event.node, cst.FunctionDef)
        if isinstance(func, cst.FunctionDef):
            names.append(func.name.value)
    return names


def _saved_key_items(checkpoints: list[Saved], model: ModuleModel) -> dict[str, set[str]]:
    """What each key of the saved checkpoints holds, by meaning (a nested dict holds several)."""
    found: dict[str, set[str]] = {}
    for saved in checkpoints:
        for key, value in (saved.event.detail.get("values") or {}).items():
            items = found.setdefault(str(key), set())
            item = _key_item(str(key), str(value))
            if item:
                items.add(item)
            items |= _text_items(str(value), model)
    return found


def _restored_items(restore: Restore, saved_keys: dict[str, set[str]], model: ModuleModel) -> set[str]:
    items: set[str] = set()
    for key in restore.keys:
        if key in saved_keys and saved_keys[key]:
            items |= saved_keys[key]
        else:
            item = _key_item(key, "")
            if item:
                items.add(item)
    for name in restore.objects:
        item = _object_item(name, model) if name else None
        if item:
            items.add(item)
    return items


def _expected(restore: Restore, checkpoints: list[Saved], ctx: FileContext) -> tuple[set[str], dict[str, str]]:
    """The states the resumed checkpoint holds (those of the save writing the same path, else
    those every training checkpoint of the file holds), and the key each is stored under."""
    load_path = _resolve_value(restore.event.detail.get("path_text") or "", restore.event, ctx)
    same = [s for s in checkpoints if load_path and _resolve_value(s.path_text, s.event, ctx) == load_path]
    candidates = same or checkpoints
    held = set.intersection(*({i for i in _RESTORABLE if s.holds(i)} for s in candidates))
    if any(s.progress_in_path for s in candidates):
        held.discard(PROGRESS)  # `ckpt_epoch{epoch}.pt`: the resume may read the epoch from the file name
    keys: dict[str, str] = {}
    for saved in candidates:
        for key, value in (saved.event.detail.get("values") or {}).items():
            item = _key_item(str(key), str(value))
            if item in held:
                keys.setdefault(item, str(key))
    return held, keys


_DAMAGE = {
    OPTIMIZER: "the optimizer restarts with empty moments / momentum",
    SCHEDULER: "the learning rate restarts from the first value of its schedule",
    SCALER: "the loss scale restarts at 65536 and the first steps are skipped while it backs off",
    PROGRESS: "the epoch / step counter restarts at 0 and the whole schedule is trained again",
}
_ROLE_OF = {OPTIMIZER: Role.OPTIMIZER, SCHEDULER: Role.SCHEDULER, SCALER: Role.SCALER}
_NOUN = {OPTIMIZER: "optimizer", SCHEDULER: "scheduler", SCALER: "GradScaler", PROGRESS: "epoch / step"}


def _message(restore: Restore, missing: list[str], keys: dict[str, str], model: ModuleModel) -> str:
    ckpt = restore.bound or "ckpt"
    calls = [
        f'`{_name_of(model, _ROLE_OF[item], item)}.load_state_dict({ckpt}["{keys.get(item, item)}"])`'
        for item in missing
        if item != PROGRESS
    ]
    clauses = [f"call {', '.join(calls)}"] if calls else []
    if PROGRESS in missing:
        clauses.append(f'read the start epoch / step from `{ckpt}["{keys.get(PROGRESS, "epoch")}"]`')
    nouns = ", ".join(_NOUN[i] for i in missing[:-1]) + " and " * (len(missing) > 1) + _NOUN[missing[-1]]
    them = "them" if len(missing) > 1 else "it"
    damage = "; ".join(_DAMAGE[i] for i in missing)
    return (
        f"the resume loads a checkpoint that holds the {nouns} state but never restores {them}: "
        f"{damage}; {' and '.join(clauses)}"
    )
