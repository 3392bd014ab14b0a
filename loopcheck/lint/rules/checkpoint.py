"""Checkpoint rules (LC501-LC509): what a training checkpoint must hold to resume a run, how the
resume reads the epoch back, and how checkpoints are saved and loaded.

A save is read through the model's SAVE event (its dict's keys, their values' source text and the
objects whose `state_dict()` it holds), and each entry is classified by meaning: `optim`,
`opt_state` and `optimizer.state_dict()` under any key are all the optimizer state. A save is a
*training checkpoint* when it holds more than the model weights, or when it is the only save of a
script that trains and resumes from it; weights saved for inference are never checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from weakref import WeakKeyDictionary

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import CallSite, Event, EventKind, Loop, LoopKind, ModuleModel, Role
from loopcheck.lint.rules.amp import Trace, dotted, import_map, resolve_call
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
    return cst.Module([]).code_for_node(call.args[0].value)


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
    inside = {id(l) for l in loop.walk()}
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


def _module_of(path: str, ctx: FileContext) -> cst.Module | None:
    if path == ctx.path:
        return ctx.module
    from loopcheck.lint.project import parse_path

    parsed = parse_path(Path(path))
    return parsed.module if parsed is not None else None


def _node_span(module: cst.Module, node: cst.CSTNode) -> tuple[int, int, int, int]:
    from loopcheck.lint.positions import node_span

    return node_span(module, node)


def _argument_for(param: str, site: CallSite, path: str, line: int, ctx: FileContext) -> str | None:
    """The source of the argument the call at `site` passes for parameter `param` of the function
    it calls (the one in `path` around `line`)."""
    callee_module = _module_of(path, ctx)
    caller_module = _module_of(site.path, ctx)
    if callee_module is None or caller_module is None:
        return None
    short = site.callee.split(".")[-1]
    func = None
    for node in _functions(callee_module):
        if node.name.value != short:
            continue
        start, _, end, _ = _node_span(callee_module, node)
        if start <= line <= end:
            func = node
            break
    if func is None:
        return None
    params = [p.name.value for p in func.params.params]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    call = None
    for node in _calls(caller_module):
        name = dotted(node.func) or ""
        if name.split(".")[-1] == short and _node_span(caller_module, node)[0] == site.line:
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
    return _nodes(module, cst.FunctionDef)


def _nodes(module: cst.Module, kind: type) -> list:
    found: list = []

    class _Find(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kind):
                found.append(node)
            return True

    module.visit(_Find())
    return found


def _calls(module: cst.Module) -> list[cst.Call]:
    found: list[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(node)

    module.visit(_Calls())
    return found


def _enclosing(ctx: FileContext, node: cst.CSTNode, kind: type) -> cst.CSTNode:
    """The innermost function (or class) around `node`; the module when there is none."""
    line = ctx.span(node).line
    best: cst.CSTNode = ctx.module
    best_start = 0
    for outer in _nodes(ctx.module, kind):
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
