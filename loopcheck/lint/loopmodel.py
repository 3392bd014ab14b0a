"""The training-loop model: roles, events, loops and traces of one module.

Rules never walk raw syntax for PyTorch facts; they read this model. `build_model` turns a
parsed module (plus the project index, to follow local imports) into a `ModuleModel`:

1. Roles: which canonical names are an optimizer, a scheduler, a scaler, a model, ...
2. Events: the calls that matter, in source order, tagged with their kind and target role,
   with calls into functions of the same file / project inlined (bounded depth).
3. Loops: batch loop (innermost loop whose iteration contains BACKWARD), epoch loop (around it),
   evaluation loop (FORWARD without BACKWARD); each with the branch-expanded traces of one
   iteration.

Canonical names: a local or global keeps its name (`opt`), an attribute of `self` is spelled
`self.optimizer`; aliases (`opt = self.optimizer`) and parameters of inlined helpers
(`train_one_epoch(model, loader, optimizer)`) resolve to the caller's canonical name, so one
object has one name across the whole trace.

Precision first: where a role or an order cannot be established, the model leaves it out and
the rules say nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator

import libcst as cst

from loopcheck.lint.syntax import child_nodes
from loopcheck.lint.values import dotted


class Role(str, Enum):
    OPTIMIZER = "optimizer"
    SCHEDULER = "scheduler"
    SCALER = "scaler"
    MODEL = "model"
    LOSS = "loss"  # a tensor that backward() is called on
    CRITERION = "criterion"  # a loss module / function (CrossEntropyLoss(), F.cross_entropy)
    LOADER = "loader"
    SAMPLER = "sampler"
    EMA = "ema"


class SchedulerCadence(str, Enum):
    PER_STEP = "per_step"  # OneCycleLR, CyclicLR, sized with len(loader)/total_steps/...
    PER_EPOCH = "per_epoch"  # StepLR, MultiStepLR, sized with epochs
    METRIC = "metric"  # ReduceLROnPlateau
    UNKNOWN = "unknown"


class EventKind(str, Enum):
    ZERO_GRAD = "zero_grad"  # opt.zero_grad(), model.zero_grad(), p.grad = None, p.grad.zero_()
    BACKWARD = "backward"  # loss.backward(), torch.autograd.backward(...), scaler.scale(loss).backward()
    STEP = "step"  # optimizer.step() (closure in detail["closure"])
    SCALER_SCALE = "scaler_scale"
    SCALER_STEP = "scaler_step"  # scaler.step(opt)
    SCALER_UPDATE = "scaler_update"
    UNSCALE = "unscale"  # scaler.unscale_(opt)
    CLIP = "clip"  # clip_grad_norm_ / clip_grad_value_
    SCHED_STEP = "sched_step"
    TRAIN_MODE = "train_mode"  # model.train() / model.train(True)
    EVAL_MODE = "eval_mode"  # model.eval() / model.train(False)
    FORWARD = "forward"  # model(x), model.forward(x)
    NO_GRAD = "no_grad"  # entering no_grad / inference_mode / set_grad_enabled(False)
    SAVE = "save"  # torch.save(...); detail["keys"]: the saved dict's keys (None if unknown)
    LOAD = "load"  # torch.load(...) / load_state_dict(...)
    EMA_UPDATE = "ema_update"
    SET_EPOCH = "set_epoch"


class LoopKind(str, Enum):
    BATCH = "batch"
    EPOCH = "epoch"
    EVAL = "eval"
    OTHER = "other"


class _Placed:
    """Line and column of a model object's `node`, computed on first use: most events are never
    reported, and positions cost a render of the statement that holds them."""

    node: cst.CSTNode
    module: "cst.Module | None"

    @property
    def span(self) -> tuple[int, int, int, int]:
        """(line, column, end_line, end_column) of the node, 1-based."""
        found = self.__dict__.get("_span")
        if found is None:
            from loopcheck.lint.positions import node_span

            found = node_span(self.module, self.node) if self.module is not None else (0, 0, 0, 0)
            self.__dict__["_span"] = found
        return found

    # 1-based, as reported
    line = property(lambda self: self.span[0])
    column = property(lambda self: self.span[1])
    end_line = property(lambda self: self.span[2])
    end_column = property(lambda self: self.span[3])


@dataclass
class Binding(_Placed):
    """What a canonical name refers to, and why we believe it."""

    name: str  # canonical name: "opt", "self.optimizer"
    role: Role
    cls: str | None = None  # constructor's last dotted part: "AdamW", "OneCycleLR", "GradScaler"
    qualified: str | None = None  # best-known dotted constructor: "torch.optim.lr_scheduler.OneCycleLR"
    call: cst.Call | None = None  # the constructor call, when known (its args give sizing)
    cadence: SchedulerCadence | None = None  # schedulers only
    evidence: str = "constructor"  # "constructor" | "usage" | "name"
    path: str = ""  # file of the constructor
    # role-specific facts: optimizer "params_of" (frozenset of model names whose parameters it
    # updates); scheduler "optimizer"; loader "split" ("train"/"eval"/None), "sampler", "shuffle"
    # (source text or None), "batch_sampler"; wrapped models "wraps".
    detail: dict = field(default_factory=dict)
    node: cst.CSTNode | None = field(default=None, repr=False, compare=False)  # what made the binding
    module: cst.Module | None = field(default=None, repr=False, compare=False)

    @property
    def line(self) -> int | None:  # type: ignore[override]
        """Line of the node that made the binding (None when unknown)."""
        return self.span[0] if self.node is not None and self.module is not None else None


@dataclass(frozen=True)
class Guard:
    """A condition an event sits under within one iteration."""

    text: str  # source of the test, e.g. "(i + 1) % accum_steps == 0"
    accumulation: bool = False  # looks like an accumulation / every-k-steps guard
    negated: bool = False  # in the else branch


@dataclass(frozen=True)
class CallSite(_Placed):
    """One hop of an inlined call chain: where a helper was called from."""

    callee: str  # qualified name of the called function: "train_one_epoch", "Trainer.step"
    path: str
    node: cst.CSTNode = field(repr=False)  # the call
    module: cst.Module | None = field(default=None, repr=False, compare=False)  # where the call is


@dataclass
class Event(_Placed):
    kind: EventKind
    target: str | None  # canonical name of the object acted on (optimizer, scheduler, model, ...)
    node: cst.CSTNode  # the call / statement, for positions and fixes
    path: str  # the file the node lives in (an inlined callee may be in another module)
    guards: tuple[Guard, ...] = ()
    via: tuple[CallSite, ...] = ()  # how the loop body reached this event (empty: written in the body)
    no_grad: bool = False  # runs under no_grad / inference_mode / set_grad_enabled(False)
    loop: "Loop | None" = None  # innermost loop around the event (inlined loops included)
    detail: dict = field(default_factory=dict)  # kind-specific: "closure", "args", "keys", "metric", ...
    autocast: bool = False  # runs under autocast (torch.autocast, torch.amp/cuda.amp.autocast, accelerator.autocast)
    grad_conditional: bool = False  # under set_grad_enabled(<not a constant>): grad mode unknown
    module: cst.Module | None = field(default=None, repr=False, compare=False)  # where `node` lives

    @property
    def guarded(self) -> bool:
        return bool(self.guards)

    @property
    def accumulation_guarded(self) -> bool:
        return any(g.accumulation for g in self.guards)


@dataclass
class Loop(_Placed):
    kind: LoopKind
    node: cst.For | cst.While
    path: str
    parent: "Loop | None" = None
    children: list["Loop"] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # direct events, in source order (not nested loops')
    traces: list[list[Event]] = field(default_factory=list)  # branch-expanded paths of one iteration (direct events)
    via: tuple[CallSite, ...] = ()
    iter_text: str = ""  # source of the iterable / condition, e.g. "enumerate(train_loader)"
    loader: str | None = None  # canonical name of the loader iterated (for / next(iter(...))), when known
    # how each trace ends: None (falls through to the next iteration), "continue", "break",
    # "return" or "raise"; parallel to `traces`
    trace_ends: list[str | None] = field(default_factory=list)
    module: cst.Module | None = field(default=None, repr=False, compare=False)  # where `node` lives
    # canonical names passed to calls the model could not follow (an unknown helper may reset or
    # step them): rules that need to see every use of an object stay silent when it escapes
    escapes: set[str] = field(default_factory=set)

    def cyclic_pairs(self) -> Iterator[tuple[list[Event], list[Event]]]:
        """(iteration i, iteration i + 1) for every pair of traces where i reaches the next iteration."""
        for first, end in zip(self.traces, self.trace_ends or [None] * len(self.traces)):
            if end in (None, "continue"):
                for second in self.traces:
                    yield first, second

    def walk(self) -> Iterator["Loop"]:
        yield self
        for child in self.children:
            yield from child.walk()

    def all_events(self) -> list[Event]:
        """Direct events, then those of each nested loop."""
        out: list[Event] = []
        for loop in self.walk():
            out.extend(loop.events)
        return out


@dataclass
class ModuleModel:
    path: str
    module: cst.Module
    bindings: dict[str, Binding]  # canonical name -> binding (all scopes of this file, inlined callees' included)
    loops: list[Loop]  # top-level loops of every entry point (nested ones via Loop.children)
    events: list[Event]  # every event of the file's entry points, loops or not, in trace order

    def role(self, name: str | None) -> Role | None:
        b = self.bindings.get(name) if name else None
        return b.role if b else None

    def names(self, role: Role) -> list[str]:
        return [n for n, b in self.bindings.items() if b.role is role]

    def walk_loops(self) -> Iterator[Loop]:
        for loop in self.loops:
            yield from loop.walk()


# --------------------------------------------------------------------------------------------
# PyTorch knowledge: constructors and names
# --------------------------------------------------------------------------------------------

import builtins  # noqa: E402
import re  # noqa: E402

OPTIMIZER_CLASSES = frozenset(
    {
        "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "ASGD", "NAdam",
        "RAdam", "LBFGS", "SparseAdam", "Lion", "Adafactor", "LAMB", "Lamb", "FusedAdam", "FusedLAMB",
        "FusedSGD", "AdamW8bit", "Adam8bit", "PagedAdamW", "PagedAdamW8bit", "PagedAdamW32bit",
        "SGD8bit", "Lion8bit", "AdaBelief", "Ranger", "Adan", "Sophia", "ZeroRedundancyOptimizer",
        "Muon", "Shampoo", "Lookahead", "create_optimizer_v2", "create_optimizer",
    }
)
SCHEDULER_CLASSES = frozenset(
    {
        "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
        "ExponentialLR", "SequentialLR", "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau",
        "CyclicLR", "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR", "SWALR",
        "CosineLRScheduler", "StepLRScheduler", "PlateauLRScheduler", "WarmupCosineSchedule",
    }
)
EMA_CLASSES = frozenset(
    {"AveragedModel", "ModelEma", "ModelEmaV2", "ModelEmaV3", "ExponentialMovingAverage", "EMA", "EMAModel"}
)
WRAPPERS = frozenset(
    {"DDP", "DistributedDataParallel", "DataParallel", "FSDP", "FullyShardedDataParallel", "compile"}
)
_MOVE_METHODS = frozenset(
    {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "to_empty", "train", "eval", "requires_grad_"}
)
_PARAM_METHODS = frozenset({"parameters", "named_parameters"})
_EMA_RE = re.compile(r"EMA|(?:^|[a-z_])Ema(?=[A-Z0-9_]|$)")

_NAME_ROLES: tuple[tuple[Role, re.Pattern[str]], ...] = (
    (Role.EMA, re.compile(r"^(ema|ema_model|model_ema|ema_net|swa_model|averaged_model|ema_\w+|\w+_ema)$")),
    (Role.SCHEDULER, re.compile(
        r"^(sched|scheduler|lr_scheduler|lr_sched|warmup_scheduler)(_?[a-z]|_\w+)?$|_(sched|scheduler)$")),
    (Role.SCALER, re.compile(r"^(scaler|grad_scaler|amp_scaler|loss_scaler)$|_scaler$")),
    (Role.OPTIMIZER, re.compile(r"^(opt|optim|optimi[sz]er)(_?[a-z]|_?\d+|_\w+)?$|_(opt|optim|optimi[sz]er)$")),
    (Role.LOADER, re.compile(r"^(loader|dataloader|dl)$|(_loader|_dataloader|_dl|loader)$")),
    (Role.SAMPLER, re.compile(r"sampler$")),
    (Role.CRITERION, re.compile(r"^(criterion|loss_fn|loss_func|loss_function|criterion_\w+|\w+_criterion)$")),
    (Role.MODEL, re.compile(
        r"^(model|net|network|backbone|generator|discriminator|encoder|decoder|student|teacher|"
        r"classifier|net_?[dg]|model_?[a-z0-9]|model_\w+|\w+_model|\w+_net)$")),
)

_ANNOTATION_ROLES = (
    (re.compile(r"(^|\.)(_?LRScheduler|ReduceLROnPlateau|LambdaLR|OneCycleLR)$"), Role.SCHEDULER),
    (re.compile(r"(^|\.)Optimizer$"), Role.OPTIMIZER),
    (re.compile(r"(^|\.)GradScaler$"), Role.SCALER),
    (re.compile(r"(^|\.)DataLoader$"), Role.LOADER),
    (re.compile(r"(^|\.)(Module|DistributedDataParallel|DDP|PreTrainedModel)$"), Role.MODEL),
    (re.compile(r"(^|\.)(AveragedModel|ModelEma\w*|EMA\w*)$"), Role.EMA),
)

_STEP_TOKENS = re.compile(
    r"len\(\s*[\w.]*(loader|dl|data|dataset|batches)[\w.]*\s*\)|total_steps|num_training_steps|steps_per_epoch|"
    r"max_steps|num_warmup_steps|warmup_steps|training_steps|train_steps|total_iters|max_iters?\b|num_iters|"
    r"iterations|num_steps|n_steps|total_step|iters_per_epoch|num_update_steps|updates_per_epoch",
    re.I,
)
_EPOCH_TOKENS = re.compile(r"epochs?\b|n_epoch|num_epoch|max_epoch", re.I)

_ACCUM_NAME = re.compile(r"accum|grad_acc|accumulat|update_freq|sync_grad|sync_context|is_update_step|should_step|do_step|optimizer_step|micro", re.I)
_NOT_ACCUM = re.compile(r"log|print|eval|val|save|ckpt|checkpoint|report|display|vis|plot|sample|summary|test|write|snapshot|show|verbose", re.I)


def scheduler_cadence(cls: str | None, qualified: str | None, args_text: str, lambda_text: str = "") -> SchedulerCadence:
    """The cadence a schedule is sized for, from its class and constructor arguments (values only)."""
    cls = cls or ""
    if cls == "ReduceLROnPlateau" or cls == "PlateauLRScheduler":
        return SchedulerCadence.METRIC
    if cls == "CosineAnnealingWarmRestarts":
        return SchedulerCadence.UNKNOWN
    if cls in ("OneCycleLR", "CyclicLR") or re.match(r"get_\w*schedule", cls) or cls == "get_scheduler":
        return SchedulerCadence.PER_STEP
    text = args_text + " " + lambda_text
    if _STEP_TOKENS.search(text):
        return SchedulerCadence.PER_STEP
    if cls in ("StepLR", "MultiStepLR"):
        numbers = [int(n) for n in re.findall(r"\b\d+\b", args_text)]
        if any(n >= 500 for n in numbers):  # sized like optimizer steps, not epochs
            return SchedulerCadence.UNKNOWN
        return SchedulerCadence.PER_EPOCH
    if cls == "ExponentialLR":
        return SchedulerCadence.PER_EPOCH
    if _EPOCH_TOKENS.search(text) and cls not in ("SequentialLR", "ChainedScheduler", "SWALR"):
        return SchedulerCadence.PER_EPOCH
    return SchedulerCadence.UNKNOWN


def is_accumulation_test(text: str) -> bool:
    """Does an `if` test look like an every-k-micro-batches (gradient accumulation) guard?"""
    if "%" in text:
        for match in re.finditer(r"%\s*\(?\s*([\w.]+)", text):
            modulus = match.group(1)
            if _NOT_ACCUM.search(modulus):
                continue
            if _ACCUM_NAME.search(modulus) or re.fullmatch(r"\d+|k|n|[\w.]*(freq|every|steps?|iters?|interval)\w*", modulus):
                return True
        return bool(_ACCUM_NAME.search(text)) and not _NOT_ACCUM.search(text.split("%")[-1])
    return bool(_ACCUM_NAME.search(text)) and not _NOT_ACCUM.search(text)


# --------------------------------------------------------------------------------------------
# Per-file index: imports, functions, classes
# --------------------------------------------------------------------------------------------

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


def _dotted(node: cst.BaseExpression) -> str | None:
    return dotted(node)


def _body(node: cst.BaseSuite) -> list:
    return list(node.body)


def _string(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd literals are simply not understood
            return None
        return value if isinstance(value, str) else None
    return None


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


class _Class:
    def __init__(self, name: str, node: cst.ClassDef, unit: "_Unit") -> None:
        self.name = name
        self.node = node
        self.unit = unit
        self.bases = [b for b in (_dotted(a.value) for a in node.bases if not a.keyword) if b]
        self.methods: dict[str, cst.FunctionDef] = {}
        for stmt in node.body.body:
            if type(stmt) is cst.FunctionDef:
                self.methods[stmt.name.value] = stmt

    def base_classes(self, seen: set[int] | None = None) -> list["_Class"]:
        seen = seen if seen is not None else {id(self)}
        out: list[_Class] = []
        for base in self.bases:
            found = self.unit.lookup_class(base)
            if found is not None and id(found) not in seen:
                seen.add(id(found))
                out.append(found)
                out.extend(found.base_classes(seen))
        return out

    def method(self, name: str) -> tuple[cst.FunctionDef, "_Class"] | None:
        if name in self.methods:
            return self.methods[name], self
        for base in self.base_classes():
            if name in base.methods:
                return base.methods[name], base
        return None

    def _all_bases(self) -> list[str]:
        names = list(self.bases)
        for base in self.base_classes():
            names.extend(base.bases)
        return names

    def kind(self) -> Role | None:
        """The role an instance of this class plays, when the class says so."""
        names = [self.name] + self._all_bases()
        lasts = [n.rsplit(".", 1)[-1] for n in names]
        if any(_EMA_RE.search(n) or n in EMA_CLASSES for n in lasts):
            return Role.EMA
        if any(n in ("Optimizer",) or n in OPTIMIZER_CLASSES for n in lasts[1:]):
            return Role.OPTIMIZER
        if any(n in ("_LRScheduler", "LRScheduler") or n in SCHEDULER_CLASSES for n in lasts[1:]):
            return Role.SCHEDULER
        if any(n in ("Module", "Sequential", "ModuleList", "PreTrainedModel", "LightningModule") for n in lasts[1:]):
            return Role.CRITERION if self.name.endswith("Loss") else Role.MODEL
        return None


class _Unit:
    """One parsed file: its imports, top-level functions and classes."""

    def __init__(self, path: str, module: cst.Module, builder: "_Builder") -> None:
        self.path = path
        self.module = module
        self.builder = builder
        self.imports: dict[str, str] = {}  # local name -> dotted origin ("optim" -> "torch.optim")
        self.local_imports: dict[str, tuple[str, str | None, int]] = {}  # name -> (module, attr, level)
        self.functions: dict[str, cst.FunctionDef] = {}
        self.classes: dict[str, _Class] = {}
        self._units: dict[tuple[str, int], "_Unit | None"] = {}
        self.top_level: list[cst.BaseStatement] = []
        for stmt in module.body:
            self._index(stmt, top=True)

    def _index(self, stmt: cst.CSTNode, top: bool) -> None:
        if type(stmt) is cst.FunctionDef:
            self.functions.setdefault(stmt.name.value, stmt)
        elif type(stmt) is cst.ClassDef:
            self.classes.setdefault(stmt.name.value, _Class(stmt.name.value, stmt, self))
        elif type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    self.add_import(small)
            if top:
                self.top_level.append(stmt)
        elif isinstance(stmt, (cst.If, cst.Try)) and top:
            # imports guarded by try/except ImportError or `if TYPE_CHECKING` still name modules
            for inner in _walk_statements(stmt):
                if type(inner) is cst.SimpleStatementLine:
                    for small in inner.body:
                        if isinstance(small, (cst.Import, cst.ImportFrom)):
                            self.add_import(small)
            self.top_level.append(stmt)
        elif top:
            self.top_level.append(stmt)

    def add_import(self, node: cst.Import | cst.ImportFrom) -> None:
        if type(node) is cst.Import:
            for alias in node.names:
                full = _dotted(alias.name) or ""
                if alias.asname is not None and type(alias.asname.name) is cst.Name:
                    local = alias.asname.name.value
                    self.imports[local] = full
                    self.local_imports[local] = (full, None, 0)
                else:
                    root = full.split(".")[0]
                    self.imports[root] = root
                    self.local_imports[root] = (root, None, 0)
            return
        level = len(node.relative)
        module = _dotted(node.module) if node.module is not None else ""
        if type(node.names) is cst.ImportStar:
            return
        for alias in node.names:
            name = _dotted(alias.name) or ""
            local = name
            if alias.asname is not None and type(alias.asname.name) is cst.Name:
                local = alias.asname.name.value
            origin = f"{module}.{name}" if module else name
            self.imports[local] = ("." * level) + origin if level else origin
            self.local_imports[local] = (module or "", name, level)

    def text(self, node: cst.CSTNode) -> str:
        """Source text of a node of this file."""
        if type(node) in _ATOMS and not node.lpar:  # type: ignore[attr-defined]
            return node.value  # type: ignore[attr-defined]
        if isinstance(node, (cst.BaseExpression, cst.Parameters)) and type(node) is not cst.StarredElement:
            # these render exactly their source text (others may add a trailing comma)
            return self.module.code_for_node(node).strip()
        from loopcheck.lint.positions import positions_for

        found = positions_for(self.module).text(node)
        if found is None:
            found = self.module.code_for_node(node)
        return found.strip()

    def qualify(self, node: cst.BaseExpression) -> str | None:
        dotted = _dotted(node)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        origin = self.imports.get(root)
        if origin is None:
            return dotted
        return f"{origin}.{rest}" if rest else origin

    def unit_for(self, module: str, level: int) -> "_Unit | None":
        key = (module, level)
        if key not in self._units:
            self._units[key] = self.builder.load_unit(self.path, module, level)
        return self._units[key]

    def imported(self, name: str) -> tuple["_Unit", str | None] | None:
        """(unit, attribute) for a local name imported from a project module."""
        entry = self.local_imports.get(name)
        if entry is None:
            return None
        module, attr, level = entry
        if attr is None:
            unit = self.unit_for(module, level)
            return (unit, None) if unit is not None else None
        unit = self.unit_for(module, level)
        if unit is not None:
            return unit, attr
        # `from package import module`
        sub = f"{module}.{attr}" if module else attr
        unit = self.unit_for(sub, level)
        return (unit, None) if unit is not None else None

    def lookup_class(self, dotted: str) -> _Class | None:
        if dotted in self.classes:
            return self.classes[dotted]
        root, _, rest = dotted.partition(".")
        found = self.imported(root)
        if found is None:
            return None
        unit, attr = found
        if attr is not None and not rest:
            return unit.classes.get(attr)
        if attr is None and rest and "." not in rest:
            return unit.classes.get(rest)
        return None

    def lookup_function(self, dotted: str) -> tuple[cst.FunctionDef, "_Unit"] | None:
        if dotted in self.functions:
            return self.functions[dotted], self
        root, _, rest = dotted.partition(".")
        found = self.imported(root)
        if found is None:
            return None
        unit, attr = found
        if attr is not None and not rest and attr in unit.functions:
            return unit.functions[attr], unit
        if attr is None and rest and "." not in rest and rest in unit.functions:
            return unit.functions[rest], unit
        return None


_CALLED = re.compile(r"(?<![\w.])(?<!def )(?<!class )([A-Za-z_]\w*)\s*\(")  # `name(`, not `obj.name(` or `def name(`
_SELF_CALL = re.compile(r"(?:self|cls|super\(\))\.([A-Za-z_]\w*)\s*\(")


def _self_called(source: str) -> set[str]:
    """Names called as `self.name(`, `cls.name(` or `super().name(`. The word boundary before
    `self`/`cls` is checked by hand: a leading `\\b` makes the regex engine try every position."""
    found: set[str] = set()
    for match in _SELF_CALL.finditer(source):
        start = match.start()
        before = source[start - 1] if start else " "
        if not source.startswith("super", start) and (before.isalnum() or before == "_"):
            continue  # `myself.name(`: not `self`
        found.add(match.group(1))
    return found


def _walk_statements(stmt: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Statements nested in compound statements (not into functions or classes)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine)):
            continue
        for child in child_nodes(node):
            if isinstance(child, (cst.BaseSuite, cst.BaseStatement, cst.If, cst.Else, cst.ExceptHandler, cst.Finally)):
                stack.append(child)
            elif isinstance(child, cst.CSTNode) and hasattr(child, "body") and not isinstance(child, cst.BaseExpression):
                stack.append(child)


# --------------------------------------------------------------------------------------------
# Blocks: the structured record of one walk, expanded into traces at the end
# --------------------------------------------------------------------------------------------


class _Branch:
    __slots__ = ("alts",)

    def __init__(self, alts: list[list]) -> None:
        self.alts = alts


class _CallBlock:
    __slots__ = ("block",)

    def __init__(self, block: list) -> None:
        self.block = block


class _Jump:
    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "continue" | "break" | "return" | "raise"


class _LoopRef:
    __slots__ = ("loop",)

    def __init__(self, loop: Loop) -> None:
        self.loop = loop


def _expand(block: list, dropped: set[int]) -> list[tuple[list[Event], str | None]]:
    paths: list[tuple[list[Event], str | None]] = [([], None)]
    for element in block:
        if all(term is not None for _, term in paths):
            break
        if isinstance(element, Event):
            if id(element) in dropped:
                continue
            paths = [(evs + [element], None) if term is None else (evs, term) for evs, term in paths]
            continue
        if isinstance(element, _LoopRef):
            continue
        if isinstance(element, _Jump):
            paths = [(evs, element.kind) if term is None else (evs, term) for evs, term in paths]
            continue
        if isinstance(element, _Branch):
            subs: list[tuple[list[Event], str | None]] = []
            for alt in element.alts:
                subs.extend(_expand(alt, dropped))
        else:  # _CallBlock: a return ends the helper, not the iteration
            subs = [(evs, None if term == "return" else term) for evs, term in _expand(element.block, dropped)]
        new: list[tuple[list[Event], str | None]] = []
        seen: set[tuple] = set()
        for evs, term in paths:
            if term is not None:
                candidates = [(evs, term)]
            else:
                candidates = [(evs + sub, sub_term) for sub, sub_term in subs]
            for cand in candidates:
                key = (tuple(id(e) for e in cand[0]), cand[1])
                if key not in seen:
                    seen.add(key)
                    new.append(cand)
            if len(new) >= _MAX_PATHS:
                break
        paths = new[:_MAX_PATHS]
    return paths


# --------------------------------------------------------------------------------------------
# The walk
# --------------------------------------------------------------------------------------------


class _Frame:
    """One function activation: its file, local names, and what encloses it."""

    __slots__ = ("unit", "env", "cls", "via", "depth", "local_funcs", "no_grad", "autocast",
                 "grad_conditional", "returns", "stack", "name")

    def __init__(self, unit: _Unit, env: dict[str, str] | None = None, cls: _Class | None = None,
                 via: tuple[CallSite, ...] = (), depth: int = 0, stack: tuple = (), name: str = "<module>") -> None:
        self.unit = unit
        self.env = env if env is not None else {}
        self.cls = cls
        self.via = via
        self.depth = depth
        self.local_funcs: dict[str, cst.FunctionDef] = {}
        self.no_grad = False
        self.autocast = False
        self.grad_conditional = False
        self.returns: list["_Value"] = []
        self.stack = stack
        self.name = name


class _Dict:
    """What is known about a dict being built for torch.save."""

    __slots__ = ("keys", "values", "owners", "unit")

    def __init__(self, unit: _Unit) -> None:
        self.keys: set[str] | None = set()
        self.values: dict[str, cst.BaseExpression] = {}
        self.owners: set[str] = set()  # objects whose state_dict() is a value (resolved where it was added)
        self.unit = unit

    def copy(self) -> "_Dict":
        d = _Dict(self.unit)
        d.keys = set(self.keys) if self.keys is not None else None
        d.values = dict(self.values)
        d.owners = set(self.owners)
        return d

    def merge(self, other: "_Dict") -> None:
        self.owners |= other.owners
        if other.keys is None or self.keys is None:
            self.keys = None
        else:
            self.keys |= other.keys
            self.values.update(other.values)


class _Value:
    """What an expression evaluates to, as far as roles go (for returns and arguments)."""

    __slots__ = ("canon", "elems", "dict", "divided")

    def __init__(self, canon: str | None = None, elems: list["_Value"] | None = None,
                 dict_: _Dict | None = None, divided: bool | None = False) -> None:
        self.canon = canon
        self.elems = elems
        self.dict = dict_
        self.divided = divided


class _Builder:
    def __init__(self, path: str, module: cst.Module, project: object) -> None:
        self.path = path
        self.project = project
        self.units: dict[str, _Unit] = {}
        self.main = _Unit(path, module, self)
        self.units[path] = self.main
        self.bindings: dict[str, Binding] = {}
        self.events: list[Event] = []
        self.loops: list[Loop] = []
        self.loop_stack: list[Loop] = []
        self.blocks: list[list] = [[]]
        self.guards: list[Guard] = []
        self.transparent = 0
        self.usage: dict[str, set[str]] = {}
        self.candidates: dict[str, str] = {}  # name-evidence candidates: canonical -> file
        self.annotations: dict[str, Role] = {}
        self.param_owner: dict[str, str | None] = {}
        self.frozen: set[str] = set()
        self.dicts: dict[str, _Dict] = {}
        self.divided: dict[str, bool | None] = {}  # None: computed by code the model cannot see
        self.assigned: dict[str, tuple[_Unit, cst.BaseExpression]] = {}
        self.iter_of: dict[str, str] = {}
        self.instances: dict[str, _Class] = {}
        self.binding_scope: dict[str, str] = {}
        self.pending: list[Event] = []
        self.dropped: set[int] = set()
        self.loop_blocks: dict[int, list] = {}
        self.call_values: dict[int, _Value] = {}
        self.covered: set[int] = set()
        self.inlined = 0

    # ---- project --------------------------------------------------------------------------

    def load_unit(self, from_path: str, module: str, level: int) -> _Unit | None:
        project = self.project
        if project is None or not hasattr(project, "load"):
            return None
        try:
            parsed = project.load(from_path, module, level)
        except (OSError, ValueError, RecursionError):
            return None
        if parsed is None:
            return None
        unit = self.units.get(parsed.path)
        if unit is None:
            unit = _Unit(parsed.path, parsed.module, self)
            self.units[parsed.path] = unit
            self._globals_prepass(unit)
        return unit

    def _globals_prepass(self, unit: _Unit) -> None:
        """Module-level constructor assignments of a followed module (its functions may use them)."""
        frame = _Frame(unit)
        for stmt in unit.top_level:
            if type(stmt) is cst.SimpleStatementLine:
                for small in stmt.body:
                    if type(small) is cst.Assign and len(small.targets) == 1:
                        target = small.targets[0].target
                        if type(target) is cst.Name:
                            self._bind_ctor(target.value, small.value, frame)

    # ---- names ----------------------------------------------------------------------------

    def canon(self, node: cst.BaseExpression, frame: _Frame) -> str | None:
        if type(node) is cst.Name:
            return frame.env.get(node.value, node.value)
        if type(node) is cst.Attribute:
            base = self.canon(node.value, frame)
            return f"{base}.{node.attr.value}" if base is not None else None
        return None

    def target(self, node: cst.BaseExpression, frame: _Frame) -> str | None:
        """Canonical name of the object an event acts on (wrappers and `.module` looked through)."""
        node = self._strip(node, frame)
        name = self.canon(node, frame)
        if name is None:
            return None
        for suffix in (".module", "._orig_mod"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        return name

    def _strip(self, node: cst.BaseExpression, frame: _Frame) -> cst.BaseExpression:
        """`model.to(dev)`, `DDP(model)`, `unwrap_model(model)` -> `model`."""
        for _ in range(8):
            if type(node) is not cst.Call:
                return node
            func = node.func
            if type(func) is cst.Attribute and func.attr.value in _MOVE_METHODS:
                node = func.value
                continue
            name = _dotted(func)
            last = name.rsplit(".", 1)[-1] if name else ""
            if last in WRAPPERS or "unwrap" in last or last in ("de_parallel", "get_model", "prepare_model", "prepare"):
                inner = _positional(node, 0) or _kw(node, "module") or _kw(node, "model")
                if inner is None or (last == "prepare" and len(node.args) != 1):
                    return node
                node = inner
                continue
            return node
        return node

    def value_of(self, node: cst.BaseExpression, frame: _Frame) -> _Value:
        """What an expression is, for aliasing and for returns."""
        if isinstance(node, (cst.Tuple, cst.List)):
            return _Value(elems=[self.value_of(e.value, frame) for e in node.elements])
        if type(node) is cst.Dict or (type(node) is cst.Call and _dotted(node.func) == "dict"):
            return _Value(dict_=self._dict_of(node, frame))
        if type(node) is cst.IfExp:
            body = self.value_of(node.body, frame)
            if body.canon is None and not _is_none(node.body):
                return body
            return self.value_of(node.orelse, frame) if _is_none(node.body) else body
        if type(node) is cst.Call:
            known = self.call_values.get(id(node))
            if known is not None:
                return known
            func = node.func
            if type(func) is cst.Attribute and func.attr.value == "prepare" and len(node.args) > 1:
                return _Value(elems=[self.value_of(a.value, frame) for a in node.args])
        divided: bool | None = _divides(node)
        if not divided and type(node) is cst.Call and self._opaque(node, frame):
            divided = None
        stripped = self._strip(node, frame)
        canon = self.canon(stripped, frame)
        if canon is not None:
            return _Value(canon=canon, dict_=self.dicts.get(canon), divided=divided or self.divided.get(canon, False))
        return _Value(divided=divided)

    def _opaque(self, call: cst.Call, frame: _Frame) -> bool:
        """A call whose result the model cannot know anything about (an unknown helper)."""
        func = call.func
        if type(func) is cst.Attribute and func.attr.value in _TENSOR_METHODS:
            return False
        qual = frame.unit.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if qual is None:
            return True
        if qual.split(".")[0] in ("torch", "F", "nn") or (type(func) is cst.Name and func.value in _BUILTINS):
            return False
        name = self.target(func, frame) or ""
        if name in self.bindings:
            return False
        last = name.rsplit(".", 1)[-1].lower()
        return not any(p.search(last) for role, p in _NAME_ROLES if role in (Role.CRITERION, Role.MODEL, Role.EMA))

    # ---- blocks and events ----------------------------------------------------------------

    @property
    def block(self) -> list:
        return self.blocks[-1]

    def event(self, kind: EventKind, target: str | None, node: cst.CSTNode, frame: _Frame,
              pending: str | None = None, **detail: object) -> Event:
        ev = Event(
            kind=kind, target=target, node=node, path=frame.unit.path, module=frame.unit.module,
            guards=tuple(self.guards), via=frame.via, no_grad=frame.no_grad,
            loop=self.loop_stack[-1] if self.loop_stack else None, detail=dict(detail),
            autocast=frame.autocast, grad_conditional=frame.grad_conditional,
        )
        if pending:
            ev.detail["_resolve"] = pending
            self.pending.append(ev)
        self.block.append(ev)
        self.events.append(ev)
        if self.loop_stack:
            self.loop_stack[-1].events.append(ev)
        return ev

    def use(self, name: str | None, what: str, frame: _Frame) -> None:
        if name:
            self.usage.setdefault(name, set()).add(what)
            self.candidates.setdefault(name, frame.unit.path)

    def bind(self, name: str, role: Role, frame: _Frame, *, evidence: str, node: cst.CSTNode | None = None,
             cls: str | None = None, qualified: str | None = None, call: cst.Call | None = None,
             **detail: object) -> Binding:
        old = self.bindings.get(name)
        rank = {"constructor": 0, "usage": 1, "name": 2}
        if old is not None and rank.get(old.evidence, 3) < rank.get(evidence, 3):
            return old
        b = Binding(name=name, role=role, cls=cls, qualified=qualified, call=call, evidence=evidence,
                    path=frame.unit.path, detail=dict(detail))
        if node is not None:
            b.node, b.module = node, frame.unit.module
        self.bindings[name] = b
        return b

    # ---- statements -----------------------------------------------------------------------

    def walk_body(self, stmts: list, frame: _Frame) -> None:
        for stmt in stmts:
            self.walk_stmt(stmt, frame)
            if self.block and isinstance(self.block[-1], _Jump):
                break

    def walk_suite(self, suite: cst.BaseSuite, frame: _Frame) -> None:
        if type(suite) is cst.SimpleStatementSuite:
            for small in suite.body:
                self.walk_small(small, frame)
        else:
            self.walk_body(list(suite.body), frame)

    def sub_block(self, suite: cst.BaseSuite | None, frame: _Frame, guard: Guard | None = None) -> list:
        self.blocks.append([])
        if guard is not None:
            self.guards.append(guard)
        try:
            if suite is not None:
                self.walk_suite(suite, frame)
        finally:
            if guard is not None:
                self.guards.pop()
            block = self.blocks.pop()
        return block

    def walk_stmt(self, stmt: cst.CSTNode, frame: _Frame) -> None:
        if type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                self.walk_small(small, frame)
        elif type(stmt) is cst.If:
            self.walk_if(stmt, frame)
        elif isinstance(stmt, (cst.For, cst.While)):
            self.walk_loop(stmt, frame)
        elif type(stmt) is cst.With:
            self.walk_with(stmt, frame)
        elif isinstance(stmt, (cst.Try, cst.TryStar)):
            body = self.sub_block(stmt.body, frame)
            if stmt.orelse is not None:
                self.blocks.append(body)
                self.walk_suite(stmt.orelse.body, frame)
                self.blocks.pop()
            alts = [body] + [self.sub_block(h.body, frame) for h in stmt.handlers]
            self.block.append(_Branch(alts))
            if stmt.finalbody is not None:
                self.walk_suite(stmt.finalbody.body, frame)
        elif type(stmt) is cst.FunctionDef:
            frame.local_funcs[stmt.name.value] = stmt
        elif type(stmt) is cst.Match:
            self.walk_expr(stmt.subject, frame)
            self.block.append(_Branch([self.sub_block(case.body, frame) for case in stmt.cases] + [[]]))

    def walk_if(self, stmt: cst.If, frame: _Frame) -> None:
        self.walk_expr(stmt.test, frame)
        known = self._truth(stmt.test, frame)
        orelse = stmt.orelse
        if self.transparent or known is not None:
            if known is not False:
                self.walk_suite(stmt.body, frame)
            if known is not True and orelse is not None:
                if type(orelse) is cst.If:
                    self.walk_if(orelse, frame)
                else:
                    self.walk_suite(orelse.body, frame)
            return
        text = frame.unit.text(stmt.test)
        accumulation = is_accumulation_test(text)
        body = self.sub_block(stmt.body, frame, Guard(text, accumulation))
        negated = Guard(text, accumulation, negated=True)
        self.blocks.append([])
        self.guards.append(negated)
        try:
            if type(orelse) is cst.If:
                self.walk_if(orelse, frame)
            elif orelse is not None:
                self.walk_suite(orelse.body, frame)
        finally:
            self.guards.pop()
            other = self.blocks.pop()
        self.block.append(_Branch([body, other]))

    def _truth(self, test: cst.BaseExpression, frame: _Frame) -> bool | None:
        """The value of a test that only depends on a parameter the caller left as None."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self._truth(test.expression, frame)
            return None if inner is None else not inner
        if type(test) is cst.Name and test.value in ("True", "False"):
            return test.value == "True"
        if isinstance(test, (cst.Name, cst.Attribute)):
            return _CONSTANTS.get(self.canon(test, frame) or "")
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            comp = test.comparisons[0]
            if _is_none(comp.comparator) and isinstance(test.left, (cst.Name, cst.Attribute)) and self.canon(test.left, frame) == "None":
                if type(comp.operator) is cst.Is:
                    return True
                if type(comp.operator) is cst.IsNot:
                    return False
        return None

    def _param_loop_owner(self, iter_node: cst.BaseExpression, frame: _Frame, depth: int = 0) -> tuple[bool, str | None]:
        """Is this a loop over parameters (p.grad = None idioms)? And whose parameters?"""
        node = iter_node
        while type(node) is cst.Call and _dotted(node.func) in ("zip", "enumerate", "list", "filter", "tqdm"):
            node = node.args[-1].value if node.args else node
            if type(node) is cst.Call and _dotted(node.func) in ("zip", "enumerate", "list", "filter", "tqdm"):
                continue
            break
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _PARAM_METHODS:
            return True, self.target(node.func.value, frame)
        if type(node) is cst.Attribute and node.attr.value == "param_groups":
            return True, self.target(node.value, frame)
        if type(node) is cst.Subscript and _string(_index(node)) == "params":
            owner = self.canon(node.value, frame)
            return True, self.param_owner.get(owner or "", None)
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = self.canon(node, frame)
            if name is not None and name in self.param_owner:
                return True, self.param_owner[name]
            if name is not None and name in self.assigned and depth < 2:
                # params = list(model.parameters()); for p in params: ...
                return self._param_loop_owner(self.assigned[name][1], frame, depth + 1)
        if type(node) is cst.ListComp:  # [p for p in model.parameters() if p.requires_grad]
            return self._param_loop_owner(node.for_in.iter, frame, depth + 1)
        return False, None

    def walk_loop(self, stmt: cst.For | cst.While, frame: _Frame) -> None:
        if type(stmt) is cst.For:
            self.walk_expr(stmt.iter, frame)
            is_params, owner = self._param_loop_owner(stmt.iter, frame)
            if is_params or self.transparent:
                for name in _target_names(stmt.target):
                    frame.env[name] = name
                    self.param_owner[name] = owner
                self.transparent += 1
                try:
                    self.walk_suite(stmt.body, frame)
                finally:
                    self.transparent -= 1
                return
            for name in _target_names(stmt.target):
                frame.env[name] = name
                self.param_owner.pop(name, None)
            iter_node = stmt.iter
        else:
            iter_node = stmt.test
        parent = self.loop_stack[-1] if self.loop_stack else None
        loop = Loop(kind=LoopKind.OTHER, node=stmt, path=frame.unit.path, module=frame.unit.module, parent=parent, via=frame.via,
                    iter_text=frame.unit.text(iter_node))
        loop.loader = self._loader_of(iter_node, frame) if type(stmt) is cst.For else None
        if loop.loader:
            self.candidates.setdefault(loop.loader, frame.unit.path)
        (parent.children if parent is not None else self.loops).append(loop)
        self.block.append(_LoopRef(loop))
        saved_guards = self.guards
        self.guards = []
        self.loop_stack.append(loop)
        self.blocks.append([])
        try:
            if type(stmt) is cst.While:
                self.walk_expr(stmt.test, frame)
            self.walk_suite(stmt.body, frame)
        finally:
            self.loop_blocks[id(loop)] = self.blocks.pop()
            self.loop_stack.pop()
            self.guards = saved_guards
        if stmt.orelse is not None:
            self.walk_suite(stmt.orelse.body, frame)

    def _loader_of(self, node: cst.BaseExpression, frame: _Frame) -> str | None:
        for _ in range(4):
            if type(node) is cst.Call:
                name = _dotted(node.func) or ""
                last = name.rsplit(".", 1)[-1]
                if last in ("enumerate", "tqdm", "iter", "zip", "islice", "trange", "track", "prefetch", "cycle") and node.args:
                    node = node.args[0].value
                    continue
                return None
            break
        name = self.canon(node, frame)
        if name is None:
            return None
        return self.iter_of.get(name, name)

    def walk_with(self, stmt: cst.With, frame: _Frame) -> None:
        saved = (frame.no_grad, frame.autocast, frame.grad_conditional)
        try:
            for item in stmt.items:
                self.walk_expr(item.item, frame)
                self._enter_context(item.item, item.item, frame)
                if item.asname is not None:
                    for name in _target_names(item.asname.name):
                        frame.env[name] = name
            self.walk_suite(stmt.body, frame)
        finally:
            frame.no_grad, frame.autocast, frame.grad_conditional = saved

    def _enter_context(self, expr: cst.BaseExpression, node: cst.CSTNode, frame: _Frame) -> None:
        if type(expr) is not cst.Call:
            return
        qual = frame.unit.qualify(expr.func) or ""
        last = qual.rsplit(".", 1)[-1]
        if last in ("no_grad", "inference_mode"):
            if last == "inference_mode" and _literal_bool(_positional(expr, 0) or _kw(expr, "mode")) is False:
                return
            frame.no_grad = True
            self.event(EventKind.NO_GRAD, None, node, frame, form=last)
        elif last == "set_grad_enabled":
            value = _literal_bool(_positional(expr, 0) or _kw(expr, "mode"))
            if value is False:
                frame.no_grad = True
                self.event(EventKind.NO_GRAD, None, node, frame, form="set_grad_enabled")
            elif value is True:
                frame.no_grad = False
            else:
                frame.grad_conditional = True
        elif last == "enable_grad":
            frame.no_grad = False
        elif last == "autocast":
            enabled = _literal_bool(_kw(expr, "enabled"))
            if enabled is not False:
                frame.autocast = True

    # ---- small statements -----------------------------------------------------------------

    def walk_small(self, small: cst.BaseSmallStatement, frame: _Frame) -> None:
        if type(small) is cst.Expr:
            self.walk_expr(small.value, frame)
            if type(small.value) is cst.Call:
                # `torch.set_grad_enabled(False)` as a statement switches grad off for what follows
                qual = frame.unit.qualify(small.value.func) or ""
                if qual.endswith("set_grad_enabled"):
                    self._enter_context(small.value, small, frame)
        elif type(small) is cst.Assign:
            self.walk_expr(small.value, frame)
            for target in small.targets:
                self.assign(target.target, small.value, frame, small)
        elif type(small) is cst.AnnAssign:
            if small.value is not None:
                self.walk_expr(small.value, frame)
                self.assign(small.target, small.value, frame, small)
            self._annotate(small.target, small.annotation.annotation, frame)
        elif type(small) is cst.AugAssign:
            self.walk_expr(small.value, frame)
            name = self.canon(small.target, frame)
            if name is not None and isinstance(small.operator, (cst.DivideAssign, cst.FloorDivideAssign)):
                self.divided[name] = True
        elif type(small) is cst.Return:
            if small.value is not None:
                self.walk_expr(small.value, frame)
                frame.returns.append(self.value_of(small.value, frame))
            self.block.append(_Jump("return"))
        elif isinstance(small, (cst.Continue, cst.Break)):
            if not self.transparent:
                self.block.append(_Jump("continue" if type(small) is cst.Continue else "break"))
        elif type(small) is cst.Raise:
            if small.exc is not None:
                self.walk_expr(small.exc, frame)
            if not self.transparent:
                self.block.append(_Jump("raise"))
        elif isinstance(small, (cst.Import, cst.ImportFrom)):
            frame.unit.add_import(small)

    def _annotate(self, target: cst.BaseExpression, annotation: cst.BaseExpression, frame: _Frame) -> None:
        name = self.canon(target, frame)
        text = frame.unit.qualify(annotation) if isinstance(annotation, (cst.Name, cst.Attribute)) else None
        if name and text:
            for pattern, role in _ANNOTATION_ROLES:
                if pattern.search(text):
                    self.annotations.setdefault(name, role)
                    self.candidates.setdefault(name, frame.unit.path)
                    break

    # ---- assignments ----------------------------------------------------------------------

    def assign(self, target: cst.BaseExpression, value: cst.BaseExpression, frame: _Frame, stmt: cst.CSTNode) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            val = self.value_of(value, frame)
            elems = [e.value for e in target.elements]
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(elems):
                for t, v in zip(elems, value.elements):
                    self.assign(t, v.value, frame, stmt)
                return
            for i, t in enumerate(elems):
                sub = val.elems[i] if val.elems is not None and i < len(val.elems) else _Value()
                self._assign_value(t, sub, None, frame)
            return
        if type(target) is cst.Subscript:
            base = self.canon(target.value, frame)
            key = _string(_index(target))
            if base is not None and base in self.dicts:
                self._put(self.dicts[base], key, value, frame)
            return
        if type(target) is cst.Attribute and target.attr.value == "grad":
            if _is_none(value) or (type(value) is cst.Call and (_dotted(value.func) or "").endswith("zeros_like")):
                owner = self._grad_owner(target.value, frame)
                self.event(EventKind.ZERO_GRAD, owner, stmt, frame, form="grad_none" if _is_none(value) else "grad_zero",
                           set_to_none=_is_none(value))
            return
        if type(target) is cst.Attribute and target.attr.value == "requires_grad":
            if _literal_bool(value) is False:
                owner = self._grad_owner(target.value, frame)
                if owner:
                    self.frozen.add(owner)
            return
        self._assign_value(target, self.value_of(value, frame), value, frame)

    def _assign_value(self, target: cst.BaseExpression, val: _Value, value: cst.BaseExpression | None, frame: _Frame) -> None:
        if type(target) is cst.Name:
            name = target.value
            tc = name
            known = None
            if isinstance(value, (cst.Comparison, cst.UnaryOperation)) or (
                type(value) is cst.Name and value.value not in _CONSTANTS
            ):
                known = self._truth(value, frame)
            if known is not None:  # `training = optimizer is not None` with optimizer left as None
                frame.env[name] = "True" if known else "False"
                return
        else:
            tc = self.canon(target, frame)
            if tc is None:
                return
            name = None
        bound = False
        if value is not None:
            scoped = self._scoped(tc, frame)
            if self._bind_ctor(scoped, value, frame):
                self.binding_scope[scoped] = self._scope(tc, frame)
                tc, bound = scoped, True
        if bound:
            if name is not None:
                frame.env[name] = tc
            self.assigned[tc] = (frame.unit, value)
            self.divided[tc] = False
            self.dicts.pop(tc, None)
            return
        if val.canon is not None and val.canon != tc and val.canon != "None":
            if name is not None:
                frame.env[name] = val.canon  # an alias: one object, one name
            else:
                src = self.bindings.get(val.canon)
                if src is not None:
                    self.bindings[tc] = Binding(name=tc, role=src.role, cls=src.cls, qualified=src.qualified,
                                                call=src.call, cadence=src.cadence, evidence=src.evidence,
                                                path=src.path, detail=dict(src.detail), node=src.node, module=src.module)
                else:
                    self.usage.setdefault(tc, set()).add("alias:" + val.canon)
                if val.canon in self.instances:
                    self.instances[tc] = self.instances[val.canon]
                if val.canon in self.dicts:
                    self.dicts[tc] = self.dicts[val.canon]
                if val.canon in self.iter_of:
                    self.iter_of[tc] = self.iter_of[val.canon]
            return
        if name is not None:
            frame.env[name] = tc
        if val.dict is not None:
            self.dicts[tc] = val.dict.copy()
        else:
            self.dicts.pop(tc, None)
        self.divided[tc] = val.divided
        if value is not None:
            self.assigned[tc] = (frame.unit, value)
            if type(value) is cst.Call:
                fn = _dotted(value.func) or ""
                if fn in ("iter", "cycle") or fn.endswith(".cycle") or fn.endswith("_iter"):
                    loader = self._loader_of(value, frame)
                    if loader:
                        self.iter_of[tc] = loader
                cls = self._project_class(value.func, frame)
                if cls is not None and cls.kind() is None:
                    self.instances[tc] = cls

    def _scope(self, tc: str, frame: _Frame) -> str:
        if tc.startswith("self.") and frame.cls is not None:
            return frame.cls.name
        return frame.name if frame.depth or frame.name != "<module>" else "<module>"

    def _scoped(self, tc: str, frame: _Frame) -> str:
        """The canonical name for a new object bound to `tc` here: `tc`, unless another scope
        already bound a different object to the same name (two functions each building their
        own `scheduler`), then `tc@function`."""
        existing = self.binding_scope.get(tc)
        scope = self._scope(tc, frame)
        if existing is None or existing == scope or "." in tc and not tc.startswith("self."):
            return tc
        return f"{tc}@{scope}"

    def _grad_owner(self, node: cst.BaseExpression, frame: _Frame) -> str | None:
        name = self.canon(node, frame)
        if name is None:
            return None
        if name in self.param_owner:
            return self.param_owner[name]
        return name.split(".")[0] if "." in name else None

    # ---- constructors ---------------------------------------------------------------------

    def _project_class(self, func: cst.BaseExpression, frame: _Frame) -> _Class | None:
        dotted = _dotted(func)
        return frame.unit.lookup_class(dotted) if dotted else None

    def _bind_ctor(self, name: str, value: cst.BaseExpression, frame: _Frame) -> bool:
        """Bind `name` when `value` constructs an object of a known role. True when it did."""
        if type(value) is cst.IfExp:
            side = value.orelse if _is_none(value.body) else value.body
            return self._bind_ctor(name, side, frame)
        call = value
        # Net().to(device), Net().cuda(): the constructor is inside
        while type(call) is cst.Call and type(call.func) is cst.Attribute and call.func.attr.value in _MOVE_METHODS:
            call = call.func.value
        if type(call) is not cst.Call:
            return False
        unit = frame.unit
        qual = unit.qualify(call.func)
        if qual is None:
            return False
        cls = qual.rsplit(".", 1)[-1]
        project_cls = self._project_class(call.func, frame)
        role: Role | None = None
        detail: dict = {}
        if project_cls is not None:
            role = project_cls.kind()
        elif "lr_scheduler" in qual or cls in SCHEDULER_CLASSES or re.match(r"get_\w*schedule", cls) or (
            cls == "get_scheduler" and qual.split(".")[0] in ("transformers", "diffusers")
        ):
            role = Role.SCHEDULER
        elif cls in ("GradScaler", "ShardedGradScaler"):
            role = Role.SCALER
        elif cls in EMA_CLASSES or _EMA_RE.search(cls):
            role = Role.EMA
        elif cls in OPTIMIZER_CLASSES or (
            (qual.startswith("torch.optim.") or ".optim." in qual or qual.startswith("optim.")) and cls[:1].isupper()
        ) or qual in ("transformers.AdamW", "transformers.optimization.AdamW"):
            role = Role.OPTIMIZER
        elif cls == "DataLoader":
            role = Role.LOADER
        elif cls.endswith("Sampler") and cls[:1].isupper():
            role = Role.SAMPLER
        elif cls.endswith("Loss") and cls[:1].isupper():
            role = Role.CRITERION
        elif cls in WRAPPERS and cls != "compile":
            inner = self.target(_positional(call, 0) or call, frame) if call.args else None
            known = self.bindings.get(inner or "")
            if known is not None and known.role is Role.MODEL:
                return False  # DDP(model): an alias of the wrapped model, which keeps its class
            role = Role.MODEL
            if inner:
                detail["wraps"] = inner
        elif qual.startswith("torchvision.models.") or qual in ("timm.create_model",) or (
            cls == "from_pretrained" and re.search(r"(^|\.)(Auto\w*Model\w*|\w+For\w+|\w+Model)\.from_pretrained$", qual)
        ):
            role = Role.MODEL
        elif qual.startswith("torch.nn.") and cls[:1].isupper() and cls not in ("Parameter", "ParameterList", "ParameterDict"):
            role = Role.MODEL
        if role is None:
            return False
        if role is Role.OPTIMIZER:
            detail["params_of"] = frozenset(self._params_of(call, frame))
        elif role is Role.SCHEDULER:
            opt = _positional(call, 0) or _kw(call, "optimizer")
            detail["optimizer"] = self.target(opt, frame) if opt is not None else None
        elif role is Role.LOADER:
            detail["split"] = _split_of(name)
            for key in ("sampler", "batch_sampler"):
                arg = _kw(call, key)
                detail[key] = self.target(arg, frame) if arg is not None else None
                if arg is not None and detail[key] is None:
                    detail[key] = unit.text(arg)
            shuffle = _kw(call, "shuffle")
            detail["shuffle"] = unit.text(shuffle) if shuffle is not None else None
            dataset = _positional(call, 0) or _kw(call, "dataset")
            detail["dataset"] = unit.text(dataset) if dataset is not None else None
        b = self.bind(name, role, frame, evidence="constructor", node=call, cls=cls, qualified=qual, call=call, **detail)
        if role is Role.SCHEDULER:
            b.cadence = scheduler_cadence(cls, qual, self._args_text(call, frame), self._lambda_text(call, frame))
        return True

    def _params_of(self, call: cst.Call, frame: _Frame) -> set[str]:
        owners: set[str] = set()
        stack: list[cst.CSTNode] = [a.value for a in call.args]
        seen = 0
        while stack and seen < 200:
            seen += 1
            node = stack.pop()
            if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _PARAM_METHODS:
                owner = self.target(node.func.value, frame)
                if owner:
                    owners.add(owner)
                continue
            if isinstance(node, (cst.Name, cst.Attribute)):
                name = self.canon(node, frame)
                if name in self.assigned:
                    stack.append(self.assigned[name][1])
                continue
            if isinstance(node, cst.BaseExpression) or isinstance(node, (cst.Element, cst.DictElement, cst.Arg)):
                stack.extend(c for c in child_nodes(node) if isinstance(c, (cst.BaseExpression, cst.Element, cst.DictElement, cst.Arg, cst.CompFor)))
            elif type(node) is cst.CompFor:
                stack.append(node.iter)
        return owners

    def _args_text(self, call: cst.Call, frame: _Frame) -> str:
        parts = []
        for arg in call.args[1:] if call.args and call.args[0].keyword is None else call.args:
            if arg.keyword is not None and arg.keyword.value == "optimizer":
                continue
            parts.append(frame.unit.text(arg.value))
            name = self.canon(arg.value, frame) if isinstance(arg.value, (cst.Name, cst.Attribute)) else None
            if name in self.assigned:  # one level of `total = epochs * len(loader)`
                unit, node = self.assigned[name]
                parts.append(unit.text(node))
        return " ".join(parts)

    def _lambda_text(self, call: cst.Call, frame: _Frame) -> str:
        fn = _kw(call, "lr_lambda") or (_positional(call, 1) if call.args else None)
        if type(fn) is cst.Name:
            found = frame.local_funcs.get(fn.value) or (frame.unit.functions.get(fn.value))
            if found is not None:
                return frame.unit.text(found)
        return ""

    # ---- expressions ----------------------------------------------------------------------

    def walk_expr(self, node: cst.CSTNode, frame: _Frame) -> None:
        """Visit the calls of an expression, innermost (evaluated) first."""
        kind = type(node)  # exact types: isinstance against libcst's ABCs is slow when it fails
        if kind is cst.Call:
            self.walk_expr(node.func, frame)  # type: ignore[attr-defined]
            for arg in node.args:  # type: ignore[attr-defined]
                self.walk_expr(arg.value, frame)
            self.on_call(node, frame)  # type: ignore[arg-type]
        elif kind in _OPAQUE_EXPRESSIONS:
            return
        elif kind is cst.Attribute:
            self.walk_expr(node.value, frame)  # type: ignore[attr-defined]
        elif kind is cst.BinaryOperation:
            self.walk_expr(node.left, frame)  # type: ignore[attr-defined]
            self.walk_expr(node.right, frame)  # type: ignore[attr-defined]
        else:
            for child in child_nodes(node):
                inner = _EXPRESSION_PART.get(type(child))
                if inner is None:
                    inner = _EXPRESSION_PART[type(child)] = isinstance(child, _EXPRESSION_PARTS) or (
                        type(child).__name__ in ("Index", "Slice")
                    )
                if inner:
                    self.walk_expr(child, frame)

    def on_call(self, call: cst.Call, frame: _Frame) -> None:
        func = call.func
        if self._try_inline(call, frame):
            return
        unit = frame.unit
        if type(func) is cst.Attribute:
            attr = func.attr.value
            recv = func.value
            handler = _METHOD_HANDLERS.get(attr)
            if handler is not None and handler(self, call, recv, frame):
                return
        qual = unit.qualify(func) or ""
        last = qual.rsplit(".", 1)[-1]
        if last in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "dispatch_clip_grad", "clip_grad_norm_fp32"):
            params = _positional(call, 0) or _kw(call, "parameters")
            owner = None
            if type(params) is cst.Call and type(params.func) is cst.Attribute and params.func.attr.value in _PARAM_METHODS:
                owner = self.target(params.func.value, frame)
            self.event(EventKind.CLIP, owner, call, frame, fn=last,
                       params_text=unit.text(params) if params is not None else "")
            return
        if qual in ("torch.save",) or (last == "save" and (qual.startswith("torch") or _recv_name(func) in ("accelerator", "xm", "fabric", "self.accelerator", "self.fabric"))):
            self._save(call, frame, qual)
            return
        if last == "save_state" and "accelerator" in qual:
            self.event(EventKind.SAVE, None, call, frame, call=call, fn=qual, obj_text="", keys=None, values={},
                       state_of=frozenset(), whole_object=None, path_text=_text_or(unit, _positional(call, 0)))
            return
        if qual == "torch.load" or (last == "load" and qual.startswith("torch") and "hub" not in qual and "jit" not in qual):
            wo = _kw(call, "weights_only")
            weights_only = None if wo is None else (_literal_bool(wo) if _literal_bool(wo) is not None else True)
            self.event(EventKind.LOAD, None, call, frame, call=call, fn="torch.load", weights_only=weights_only,
                       path_text=_text_or(unit, _positional(call, 0) or _kw(call, "f")))
            return
        if last == "load_state" and "accelerator" in qual:
            self.event(EventKind.LOAD, None, call, frame, call=call, fn="accelerator.load_state", weights_only=None)
            return
        if qual in ("torch.autograd.backward",):
            tensor = _positional(call, 0) or _kw(call, "tensors")
            if tensor is not None:
                self._backward(call, tensor, frame, via_fn=qual)
            return
        if self._project_class(func, frame) is not None:
            return  # constructing a model / EMA class of the project is not a forward pass
        if type(func) is cst.Name and func.value in _BUILTINS:
            return
        self._escape(call, frame)
        # a forward pass: model(x)
        if isinstance(func, (cst.Name, cst.Attribute)):
            name = self.target(func, frame)
            if name and name not in unit.imports:
                self.use(name, "call", frame)
                self.event(EventKind.FORWARD, name, call, frame, pending="forward", call=call)

    def _escape(self, call: cst.Call, frame: _Frame) -> None:
        if not self.loop_stack:
            return
        escapes = self.loop_stack[-1].escapes
        for arg in call.args:
            name = self.target(arg.value, frame) if isinstance(arg.value, (cst.Name, cst.Attribute, cst.Call)) else None
            if name:
                escapes.add(name)

    # ---- method handlers (receiver.method(...)) --------------------------------------------

    def _m_zero_grad(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        if type(recv) is cst.Attribute and recv.attr.value == "grad":  # p.grad.zero_grad? not a thing
            return False
        self.use(name, "zero_grad", frame)
        stn = _kw(call, "set_to_none")
        self.event(EventKind.ZERO_GRAD, name, call, frame, pending="zero_grad", form="optimizer",
                   set_to_none=_literal_bool(stn) if stn is not None else None)
        return True

    def _m_zero_(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        # p.grad.zero_() / p.grad.data.zero_()
        node = recv
        if type(node) is cst.Attribute and node.attr.value == "data":
            node = node.value
        if type(node) is cst.Attribute and node.attr.value == "grad":
            owner = self._grad_owner(node.value, frame)
            self.event(EventKind.ZERO_GRAD, owner, call, frame, form="grad_zero", set_to_none=False)
            return True
        return False

    def _m_backward(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        recv_name = self.canon(recv, frame) or ""
        if recv_name.rsplit(".", 1)[-1] in ("accelerator", "fabric", "engine", "model_engine") and call.args:
            tensor = _positional(call, 0) or _kw(call, "loss")
            if tensor is not None:
                self._backward(call, tensor, frame, via_fn=recv_name + ".backward", divided=True)
                return True
        if recv_name.endswith("manual_backward") or (recv_name == "self" and call.args):
            tensor = _positional(call, 0)
            if tensor is not None:
                self._backward(call, tensor, frame, via_fn="manual_backward")
                return True
        self._backward(call, recv, frame)
        return True

    def _backward(self, call: cst.Call, tensor: cst.BaseExpression, frame: _Frame, via_fn: str | None = None,
                  divided: bool = False) -> None:
        unit = frame.unit
        scaled = False
        scaler = None
        if type(tensor) is cst.Call and type(tensor.func) is cst.Attribute and tensor.func.attr.value == "scale" and tensor.args:
            scaler = self.target(tensor.func.value, frame)
            self.use(scaler, "scale", frame)
            scaled = True
            tensor = tensor.args[0].value
        inner = tensor
        while type(inner) is cst.Call and type(inner.func) is cst.Attribute and inner.func.attr.value in ("mean", "sum", "float", "squeeze"):
            inner = inner.func.value
        name = self.canon(inner, frame) if isinstance(inner, (cst.Name, cst.Attribute)) else None
        if name:
            self.use(name, "backward", frame)
        is_divided: bool | None = divided or _divides(tensor)
        if not is_divided:
            is_divided = self.divided.get(name, False) if name else self.value_of(tensor, frame).divided
        rg = _kw(call, "retain_graph")
        retain = rg is not None and _literal_bool(rg) is not False and not _is_none(rg)
        self.event(EventKind.BACKWARD, name or unit.text(tensor), call, frame, scaled=scaled, scaler=scaler,
                   loss_text=unit.text(tensor), retain_graph=retain, divided=is_divided, fn=via_fn or "backward")

    def _m_step(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        if name is None:
            return False
        self.use(name, "step", frame)
        closure = _positional(call, 0) or _kw(call, "closure")
        detail: dict = {"args": list(call.args), "metric": bool(_positional(call, 0) is not None or _kw(call, "metrics") is not None)}
        if closure is not None:
            detail["closure_events"] = self._closure_events(closure, frame)
            opt_arg = self.target(closure, frame) if isinstance(closure, (cst.Name, cst.Attribute)) else None
            detail["optimizer"] = opt_arg
        self.event(EventKind.STEP, name, call, frame, pending="step", closure=closure is not None, **detail)
        return True

    def _closure_events(self, closure: cst.BaseExpression, frame: _Frame) -> list[Event]:
        """Walk a closure passed to step(); its events run inside step, not in the loop's order."""
        fdef = None
        unit = frame.unit
        if type(closure) is cst.Name:
            fdef = frame.local_funcs.get(closure.value) or unit.functions.get(closure.value)
        if fdef is None and type(closure) is not cst.Lambda:
            return []
        saved_events = len(self.events)
        saved_loop_stack = self.loop_stack
        self.loop_stack = []
        self.blocks.append([])
        try:
            if type(closure) is cst.Lambda:
                self.walk_expr(closure.body, frame)
            elif fdef is not None and fdef not in frame.stack:
                inner = _Frame(unit, dict(frame.env), frame.cls, frame.via, frame.depth + 1, frame.stack + (fdef,), fdef.name.value)
                inner.local_funcs = dict(frame.local_funcs)
                inner.no_grad, inner.autocast = frame.no_grad, frame.autocast
                self.walk_suite(fdef.body, inner)
        finally:
            self.blocks.pop()
            self.loop_stack = saved_loop_stack
        events = self.events[saved_events:]
        del self.events[saved_events:]
        for ev in events:
            ev.loop = None
        return events

    def _m_scale(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        if name is None:
            return False
        self.event(EventKind.SCALER_SCALE, name, call, frame, pending="scale")
        return True

    def _m_unscale(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        self.use(name, "unscale_", frame)
        opt = _positional(call, 0) or _kw(call, "optimizer")
        self.event(EventKind.UNSCALE, name, call, frame, optimizer=self.target(opt, frame) if opt is not None else None)
        return True

    def _m_update(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        if name is None:
            return False
        if name in self.dicts:  # ckpt.update({...}) on a dict being built
            d = self.dicts[name]
            for arg in call.args:
                if arg.keyword is not None:
                    self._put(d, arg.keyword.value, arg.value, frame)
                else:
                    d.merge(self._dict_of(arg.value, frame))
            return True
        self.event(EventKind.SCALER_UPDATE, name, call, frame, pending="update")
        return True

    def _m_update_parameters(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        self.use(name, "update_parameters", frame)
        model = _positional(call, 0)
        self.event(EventKind.EMA_UPDATE, name, call, frame, model=self.target(model, frame) if model is not None else None)
        return True

    def _m_mode(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        if name is None or type(recv) is cst.Call:
            return False
        attr = call.func.attr.value  # type: ignore[attr-defined]
        mode = _positional(call, 0) or _kw(call, "mode")
        if attr == "eval" and call.args:
            return False  # not nn.Module.eval()
        known = self._truth(mode, frame) if mode is not None else True
        kind = EventKind.EVAL_MODE if attr == "eval" or known is False else EventKind.TRAIN_MODE
        self.use(name, attr, frame)
        self.event(kind, name, call, frame, pending="mode", conditional=known is None)
        return True

    def _m_forward(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        if name is None:
            return False
        self.use(name, "forward", frame)
        self.event(EventKind.FORWARD, name, call, frame, pending="forward", call=call)
        return True

    def _m_set_epoch(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        self.event(EventKind.SET_EPOCH, name, call, frame, pending="set_epoch",
                   epoch_text=_text_or(frame.unit, _positional(call, 0)))
        return True

    def _m_load_state_dict(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        arg = _positional(call, 0) or _kw(call, "state_dict")
        key = None
        source = None
        if type(arg) is cst.Subscript:
            key = _string(_index(arg))
            source = self.canon(arg.value, frame)
        elif type(arg) is cst.Call and type(arg.func) is cst.Attribute and arg.func.attr.value == "get":
            key = _string(_positional(arg, 0))
            source = self.canon(arg.func.value, frame)
        self.event(EventKind.LOAD, name, call, frame, call=call, fn="load_state_dict", weights_only=None, key=key,
                   source=source, arg_text=_text_or(frame.unit, arg))
        return True

    def _m_requires_grad_(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        if _literal_bool(_positional(call, 0) or _kw(call, "requires_grad")) is False:
            name = self.target(recv, frame)
            if name:
                self.frozen.add(name)
                if name in self.param_owner and self.param_owner[name]:
                    self.frozen.add(self.param_owner[name])  # type: ignore[arg-type]
        return True

    # ---- checkpoints ----------------------------------------------------------------------

    def _dict_of(self, node: cst.BaseExpression, frame: _Frame) -> _Dict:
        d = _Dict(frame.unit)
        if type(node) is cst.Dict:
            for el in node.elements:
                if type(el) is cst.DictElement:
                    self._put(d, _string(el.key), el.value, frame)
                else:  # {**base, ...}
                    d.merge(self._dict_of(el.value, frame))
            return d
        if type(node) is cst.Call and _dotted(node.func) == "dict":
            for arg in node.args:
                if arg.keyword is not None:
                    self._put(d, arg.keyword.value, arg.value, frame)
                else:
                    d.merge(self._dict_of(arg.value, frame))
            return d
        value = self.value_of(node, frame)
        if value.dict is not None:
            return value.dict.copy()
        d.keys = None
        return d

    def _put(self, d: _Dict, key: str | None, value: cst.BaseExpression, frame: _Frame) -> None:
        """Add `key: value` to a dict being built; the saved object's owner is resolved here."""
        owner = self._state_owner(value, frame)
        if owner:
            d.owners.add(owner)
        elif type(value) is cst.Dict:
            for el in value.elements:
                if type(el) is cst.DictElement:
                    inner = self._state_owner(el.value, frame)
                    if inner:
                        d.owners.add(inner)
        if key is None or d.keys is None:
            d.keys = None
            return
        d.keys.add(key)
        d.values[key] = value

    def _state_owner(self, node: cst.BaseExpression, frame: _Frame, depth: int = 0) -> str | None:
        """`model.state_dict()` (or a name bound to it) -> "model"."""
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "state_dict":
            return self.target(node.func.value, frame)
        if type(node) is cst.Call and (_dotted(node.func) or "").endswith(("deepcopy", "copy")) and node.args:
            return self._state_owner(node.args[0].value, frame, depth + 1)
        if depth < 2 and isinstance(node, (cst.Name, cst.Attribute)):
            name = self.canon(node, frame)
            if name in self.assigned:
                unit, value = self.assigned[name]
                return self._state_owner(value, frame, depth + 1)
        return None

    def _save(self, call: cst.Call, frame: _Frame, qual: str) -> None:
        unit = frame.unit
        if (qual.split(".")[0] if qual else "") == "fabric" or qual.endswith("fabric.save"):
            obj, path = _positional(call, 1) or _kw(call, "state"), _positional(call, 0) or _kw(call, "path")
        else:
            obj, path = _positional(call, 0) or _kw(call, "obj"), _positional(call, 1) or _kw(call, "f")
        if obj is None:
            return
        d = self._dict_of(obj, frame)
        keys = frozenset(d.keys) if d.keys is not None else None
        values = {k: d.unit.text(v) for k, v in d.values.items()} if keys is not None else {}
        state_of: set[str] = set(d.owners)
        direct = self._state_owner(obj, frame)
        if direct:
            state_of.add(direct)
        whole = self.target(obj, frame) if keys is None and direct is None else None
        self.event(EventKind.SAVE, None, call, frame, pending="save", call=call, fn=qual or "torch.save",
                   obj_text=unit.text(obj), keys=keys, values=values, state_of=frozenset(state_of),
                   whole_object=None, _whole=whole, path_text=_text_or(unit, path))

    # ---- inlining -------------------------------------------------------------------------

    def _try_inline(self, call: cst.Call, frame: _Frame) -> bool:
        """Follow a call into a function or method of this file / this project. True when followed."""
        func = call.func
        unit = frame.unit
        target: tuple[cst.FunctionDef, _Unit, _Class | None] | None = None
        bound_self = False
        if type(func) is cst.Name:
            name = func.value
            if name in frame.local_funcs:
                target = (frame.local_funcs[name], unit, frame.cls)
            else:
                cls = unit.lookup_class(name)
                if cls is not None:
                    return self._construct(call, cls, frame)
                found = unit.lookup_function(name)
                if found is not None:
                    target = (found[0], found[1], None)
            if target is None:
                inst = self.instances.get(frame.env.get(name, name))
                found_c = inst.method("__call__") if inst is not None else None
                if found_c is not None:
                    target = (found_c[0], found_c[1].unit, found_c[1])
                    bound_self = True
        elif type(func) is cst.Attribute:
            attr = func.attr.value
            recv = func.value
            if type(recv) is cst.Name and recv.value == "self" and frame.cls is not None:
                found_m = frame.cls.method(attr)
                if found_m is not None:
                    target = (found_m[0], found_m[1].unit, found_m[1])
                    bound_self = True
            elif type(recv) is cst.Call and _dotted(recv.func) == "super" and frame.cls is not None:
                for base in frame.cls.base_classes():
                    if attr in base.methods:
                        target = (base.methods[attr], base.unit, base)
                        bound_self = True
                        break
                if target is None:
                    return attr == "__init__"
            else:
                recv_name = self.canon(recv, frame)
                cls = self.instances.get(recv_name or "")
                if cls is not None:
                    found_m = cls.method(attr)
                    if found_m is not None:
                        target = (found_m[0], found_m[1].unit, found_m[1])
                        bound_self = True
                else:
                    dotted = _dotted(func)
                    if dotted and "." in dotted:
                        found = unit.lookup_function(dotted)
                        if found is not None:
                            target = (found[0], found[1], None)
                        else:
                            cls2 = unit.lookup_class(dotted)
                            if cls2 is not None:
                                return self._construct(call, cls2, frame)
        if target is None:
            return False
        fdef, callee_unit, cls = target
        if _is_ema_helper(fdef):
            self._ema_helper_event(call, fdef, frame)
            return True
        self.inline(call, fdef, callee_unit, cls, frame, bound_self)
        return True

    def _construct(self, call: cst.Call, cls: _Class, frame: _Frame) -> bool:
        """`Trainer(...)` of a project class: run its __init__ (models and EMAs are not followed)."""
        if cls.kind() is not None:
            return False
        init = cls.method("__init__")
        if init is not None:
            self.inline(call, init[0], init[1].unit, init[1], frame, True)
        return True

    def _ema_helper_event(self, call: cst.Call, fdef: cst.FunctionDef, frame: _Frame) -> None:
        names = [self.target(a.value, frame) for a in call.args if a.keyword is None]
        names = [n for n in names if n]
        target = next((n for n in names if "ema" in n.lower() or "swa" in n.lower() or "avg" in n.lower()), names[0] if names else None)
        if target:
            self.bind(target, Role.EMA, frame, evidence="usage")
        model = next((n for n in names if n != target), None)
        self.event(EventKind.EMA_UPDATE, target, call, frame, model=model, helper=fdef.name.value)

    def inline(self, call: cst.Call, fdef: cst.FunctionDef, unit: _Unit, cls: _Class | None, frame: _Frame,
               bound_self: bool) -> None:
        key = id(fdef)
        self.covered.add(key)
        if frame.depth >= _MAX_DEPTH or any(id(f) == key for f in frame.stack) or self.inlined >= _MAX_INLINED:
            return
        self.inlined += 1
        env: dict[str, str] = {}
        params = list(fdef.params.posonly_params) + list(fdef.params.params)
        if bound_self and params and params[0].name.value in ("self", "cls"):
            env[params[0].name.value] = "self"
            params = params[1:]
        positional = [a for a in call.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
        all_params = params + list(fdef.params.kwonly_params)
        for i, param in enumerate(all_params):
            pname = param.name.value
            arg = None
            if i < len(positional) and param in params:
                arg = positional[i].value
            elif pname in keywords:
                arg = keywords[pname].value
            if arg is None:
                if param.default is not None and _is_none(param.default):
                    env[pname] = "None"
                else:
                    env[pname] = pname
                    self._param_evidence(param, pname, unit)
                continue
            if _is_none(arg):
                env[pname] = "None"
                continue
            val = self.value_of(arg, frame)
            if val.canon is not None:
                env[pname] = val.canon
            else:
                env[pname] = pname
                if val.dict is not None:
                    self.dicts[pname] = val.dict.copy()
                self.divided[pname] = val.divided
                self._param_evidence(param, pname, unit)
                if type(arg) is cst.Call:
                    self._bind_ctor(pname, arg, frame)
        for p in (fdef.params.star_arg, fdef.params.star_kwarg):
            if type(p) is cst.Param:
                env[p.name.value] = p.name.value
        qualname = f"{cls.name}.{fdef.name.value}" if cls is not None else fdef.name.value
        site = CallSite(qualname, frame.unit.path, call, frame.unit.module)
        inner = _Frame(unit, env, cls, frame.via + (site,), frame.depth + 1, frame.stack + (fdef,), qualname)
        inner.no_grad, inner.autocast, inner.grad_conditional = frame.no_grad, frame.autocast, frame.grad_conditional
        self.blocks.append([])
        try:
            self._decorators(fdef, inner)
            self.walk_suite(fdef.body, inner)
        finally:
            block = self.blocks.pop()
        self.block.append(_CallBlock(block))
        if inner.returns:
            chosen = next((r for r in reversed(inner.returns) if r.canon or r.elems or r.dict), inner.returns[-1])
            self.call_values[id(call)] = chosen

    def _decorators(self, fdef: cst.FunctionDef, frame: _Frame) -> None:
        for dec in fdef.decorators:
            expr = dec.decorator
            qual = frame.unit.qualify(expr.func if type(expr) is cst.Call else expr) or ""
            last = qual.rsplit(".", 1)[-1]
            if last in ("no_grad", "inference_mode"):
                frame.no_grad = True
                self.event(EventKind.NO_GRAD, None, dec, frame, form="decorator")

    def _param_evidence(self, param: cst.Param, name: str, unit: _Unit) -> None:
        self.candidates.setdefault(name, unit.path)
        if param.annotation is not None:
            ann = param.annotation.annotation
            if type(ann) is cst.Subscript:  # Optional[GradScaler]
                inner = _index(ann)
                ann = inner if inner is not None else ann
            if type(ann) is cst.BinaryOperation:  # GradScaler | None
                ann = ann.left
            text = unit.qualify(ann) if isinstance(ann, (cst.Name, cst.Attribute)) else None
            if text:
                for pattern, role in _ANNOTATION_ROLES:
                    if pattern.search(text):
                        self.annotations.setdefault(name, role)
                        break

    # ---- entry points ---------------------------------------------------------------------

    def run(self) -> ModuleModel:
        from loopcheck.lint.positions import source_of

        unit = self.main
        source = source_of(unit.module)
        called = set(_CALLED.findall(source))
        self_called = _self_called(source)
        frame = _Frame(unit, name="<module>")
        self.walk_body([s for s in unit.top_level], frame)
        for name, fdef in unit.functions.items():
            if id(fdef) in self.covered or name in called:
                continue
            self.entry(fdef, unit, None)
        for cls in unit.classes.values():
            if cls.kind() is Role.MODEL or cls.kind() is Role.CRITERION:
                methods = [m for n, m in cls.methods.items() if n not in _SKIP_ENTRY_METHODS and n != "__init__"]
            else:
                init = cls.methods.get("__init__")
                methods = ([init] if init is not None and id(init) not in self.covered else []) + [
                    m for n, m in cls.methods.items() if n != "__init__"
                ]
            for fdef in methods:
                name = fdef.name.value
                if id(fdef) in self.covered or name in self_called or name in _SKIP_ENTRY_METHODS:
                    continue
                if fdef.name.value != "__init__" and any(
                    type(d.decorator) is cst.Name and d.decorator.value in ("property", "staticmethod")
                    for d in fdef.decorators
                ):
                    continue
                self.entry(fdef, unit, cls)
        return self.finalize()

    def entry(self, fdef: cst.FunctionDef, unit: _Unit, cls: _Class | None) -> None:
        self.covered.add(id(fdef))
        env: dict[str, str] = {}
        params = list(fdef.params.posonly_params) + list(fdef.params.params) + list(fdef.params.kwonly_params)
        if cls is not None and params and params[0].name.value in ("self", "cls"):
            env[params[0].name.value] = "self"
            params = params[1:]
        for param in params:
            pname = param.name.value
            env[pname] = pname
            self._param_evidence(param, pname, unit)
        for p in (fdef.params.star_arg, fdef.params.star_kwarg):
            if type(p) is cst.Param:
                env[p.name.value] = p.name.value
        qualname = f"{cls.name}.{fdef.name.value}" if cls is not None else fdef.name.value
        frame = _Frame(unit, env, cls, (), 0, (fdef,), qualname)
        self.blocks.append([])
        try:
            self._decorators(fdef, frame)
            self.walk_suite(fdef.body, frame)
        finally:
            self.blocks.pop()

    # ---- after the walk -------------------------------------------------------------------

    def finalize(self) -> ModuleModel:
        self._resolve_roles()
        for ev in self.pending:
            self._resolve_event(ev)
        for loop in self._all_loops():
            loop.events = [e for e in loop.events if id(e) not in self.dropped]
        events = [e for e in self.events if id(e) not in self.dropped]
        self._classify_loops()
        for loop in self._all_loops():
            block = self.loop_blocks.get(id(loop), [])
            expanded = _expand(block, self.dropped)
            loop.traces = [evs for evs, _ in expanded]
            loop.trace_ends = [end for _, end in expanded]
        return ModuleModel(path=self.path, module=self.main.module, bindings=self.bindings, loops=self.loops, events=events)

    def _all_loops(self) -> Iterator[Loop]:
        for loop in self.loops:
            yield from loop.walk()

    def _resolve_roles(self) -> None:
        for name, uses in self.usage.items():
            if name in self.bindings or name == "None":
                continue
            role = None
            if "scale" in uses or "unscale_" in uses:
                role = Role.SCALER
            elif "step" in uses and ("get_last_lr" in uses or "get_lr" in uses):
                role = Role.SCHEDULER
            elif "zero_grad" in uses and "step" in uses:
                role = Role.OPTIMIZER
            elif "update_parameters" in uses:
                role = Role.EMA
            elif "backward" in uses:
                role = Role.LOSS
            if role is not None:
                self.bindings[name] = Binding(name=name, role=role, evidence="usage", path=self.candidates.get(name, self.path))
        for opt in [b for b in self.bindings.values() if b.role is Role.OPTIMIZER]:
            for owner in opt.detail.get("params_of", ()):
                if owner not in self.bindings:
                    self.bindings[owner] = Binding(name=owner, role=Role.MODEL, evidence="usage", path=opt.path)
        for name, path in list(self.candidates.items()):
            if name in self.bindings or name == "None":
                continue
            role = self.annotations.get(name)
            evidence = "name"
            if role is None:
                last = name.rsplit(".", 1)[-1].lower()
                for candidate, pattern in _NAME_ROLES:
                    if pattern.search(last):
                        role = candidate
                        break
            if role is None and self.usage.get(name, set()) & {"eval", "train", "forward"}:
                role, evidence = Role.MODEL, "usage"
            if role is not None:
                self.bindings[name] = Binding(name=name, role=role, evidence=evidence, path=path)
                if role is Role.LOADER:
                    self.bindings[name].detail["split"] = _split_of(name)
        for name, b in self.bindings.items():
            if b.role is Role.SCHEDULER and b.cadence is None:
                b.cadence = SchedulerCadence.UNKNOWN

    def _resolve_event(self, ev: Event) -> None:
        how = ev.detail.pop("_resolve", None)
        role = self.bindings[ev.target].role if ev.target in self.bindings else None
        if how == "forward":
            if role not in (Role.MODEL, Role.EMA):
                self.dropped.add(id(ev))
        elif how == "step":
            closure_events = ev.detail.pop("closure_events", [])
            if role is Role.OPTIMIZER:
                ev.kind = EventKind.STEP
                closure = bool(ev.detail.get("closure"))
                ev.detail = {"closure": closure, "closure_events": closure_events if closure else []}
            elif role is Role.SCHEDULER:
                ev.kind = EventKind.SCHED_STEP
                ev.detail = {"args": ev.detail.get("args", []), "metric": ev.detail.get("metric", False)}
            elif role is Role.SCALER:
                ev.kind = EventKind.SCALER_STEP
                ev.detail = {"optimizer": ev.detail.get("optimizer")}
            elif role is Role.EMA:
                ev.kind = EventKind.EMA_UPDATE
                ev.detail = {"model": None}
            else:
                self.dropped.add(id(ev))
            for inner in closure_events:
                if ev.kind is not EventKind.STEP:
                    self.dropped.add(id(inner))
        elif how == "zero_grad":
            if role is Role.OPTIMIZER:
                ev.detail["form"] = "optimizer"
            elif role in (Role.MODEL, Role.EMA, Role.CRITERION, None):
                ev.detail["form"] = "model"
            else:
                self.dropped.add(id(ev))
        elif how == "scale":
            if role is not Role.SCALER:
                self.dropped.add(id(ev))
        elif how == "update":
            if role is Role.SCALER:
                ev.kind = EventKind.SCALER_UPDATE
            elif role is Role.EMA:
                ev.kind = EventKind.EMA_UPDATE
                ev.detail["model"] = None
            else:
                self.dropped.add(id(ev))
        elif how == "mode":
            if role not in (Role.MODEL, Role.EMA, Role.CRITERION, None):
                self.dropped.add(id(ev))
            else:
                ev.detail["frozen"] = ev.target in self.frozen
        elif how == "set_epoch":
            name = ev.target or ""
            if name.endswith((".sampler", ".batch_sampler")):
                loader, _, attr = name.rpartition(".")
                b = self.bindings.get(loader)
                if b is not None and isinstance(b.detail.get(attr), str):
                    ev.target = b.detail[attr]
        elif how == "save":
            whole = ev.detail.pop("_whole", None)
            if whole and whole in self.bindings and self.bindings[whole].role in (Role.MODEL, Role.EMA, Role.OPTIMIZER):
                ev.detail["whole_object"] = whole

    def _classify_loops(self) -> None:
        has_backward: dict[int, bool] = {}
        has_forward: dict[int, bool] = {}
        has_step: dict[int, bool] = {}
        for loop in self._all_loops():
            kinds = {e.kind for e in loop.all_events()}
            has_backward[id(loop)] = EventKind.BACKWARD in kinds
            has_forward[id(loop)] = EventKind.FORWARD in kinds
            has_step[id(loop)] = bool(kinds & {EventKind.STEP, EventKind.SCALER_STEP})
        for loop in self._all_loops():
            if has_backward[id(loop)] and not any(has_backward[id(c)] for c in loop.children):
                loop.kind = LoopKind.BATCH
        for loop in self._all_loops():
            if loop.kind is LoopKind.BATCH:
                continue
            if any(c.kind is LoopKind.BATCH for c in loop.children):
                loop.kind = LoopKind.EPOCH
                continue
            trains = any(e.kind is EventKind.ZERO_GRAD for e in loop.all_events()) or any(
                self.bindings[n].role in (Role.OPTIMIZER, Role.SCALER, Role.LOSS)
                for sub in loop.walk() for n in sub.escapes if n in self.bindings
            )
            if has_forward[id(loop)] and not has_backward[id(loop)] and not has_step[id(loop)] and not trains:
                ancestor = loop.parent
                inside_batch = False
                while ancestor is not None:
                    if ancestor.kind is LoopKind.BATCH:
                        inside_batch = True
                    ancestor = ancestor.parent
                if not inside_batch:
                    loop.kind = LoopKind.EVAL


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

_BUILTINS = frozenset(dir(builtins))

_METHOD_HANDLERS = {
    "zero_grad": _Builder._m_zero_grad,
    "zero_": _Builder._m_zero_,
    "backward": _Builder._m_backward,
    "manual_backward": _Builder._m_backward,
    "step": _Builder._m_step,
    "scale": _Builder._m_scale,
    "unscale_": _Builder._m_unscale,
    "update": _Builder._m_update,
    "update_parameters": _Builder._m_update_parameters,
    "train": _Builder._m_mode,
    "eval": _Builder._m_mode,
    "forward": _Builder._m_forward,
    "set_epoch": _Builder._m_set_epoch,
    "load_state_dict": _Builder._m_load_state_dict,
    "requires_grad_": _Builder._m_requires_grad_,
}


_CONSTANTS = {"None": False, "False": False, "True": True}
_TENSOR_METHODS = frozenset({
    "mean", "sum", "float", "double", "half", "item", "view", "reshape", "squeeze", "unsqueeze", "to", "detach",
    "clone", "contiguous", "flatten", "backward", "abs", "pow", "sqrt", "exp", "log", "norm", "cpu", "cuda",
})


def _is_none(node: cst.CSTNode | None) -> bool:
    return type(node) is cst.Name and node.value == "None"


def _index(node: cst.Subscript) -> cst.BaseExpression | None:
    if len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index:
        return node.slice[0].slice.value
    return None


def _target_names(node: cst.CSTNode) -> list[str]:
    if type(node) is cst.Name:
        return [node.value]
    if isinstance(node, (cst.Tuple, cst.List)):
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
        if isinstance(node.operator, (cst.Divide, cst.FloorDivide)):
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
        return bool(node.args) and isinstance(node.args[0].value, (cst.List, cst.ListComp, cst.Call))
    return False


def _is_fraction(node: cst.CSTNode) -> bool:
    if type(node) is cst.Float:
        try:
            return float(node.value) < 1.0
        except ValueError:
            return False
    return type(node) is cst.BinaryOperation and type(node.operator) is cst.Divide


def _split_of(name: str) -> str | None:
    last = name.rsplit(".", 1)[-1].lower()
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
    code = cst.Module(body=[]).code_for_node(fdef.body)
    return bool(re.search(r"\.(lerp_|mul_|add_|copy_)\(|\blerp\(", code))


def build_model(path: str, module: cst.Module, project: object = None) -> ModuleModel:
    """The loop model of one parsed file (following calls into the project through `project`)."""
    return _Builder(path, module, project).run()
