"""The model's data: roles, events, loops and the module model the rules read."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator

import libcst as cst



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
    GRAD_WRITE = "grad_write"  # p.grad = g (a gradient computed some other way: autograd.grad, a server)
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
    # a step-by-step generation loop (`for _ in range(max_new_tokens)` in `generate`, the
    # denoising steps of `sample`): a forward pass that produces outputs, evaluation when nothing
    # in it trains
    generates: bool = False
    # a generation loop whose call reads what its previous iteration produced (`out, state =
    # model(x, state)`): without no_grad its graph grows step after step
    feeds_back: bool = False
    # canonical names passed to calls the model could not follow (an unknown helper may reset or
    # step them): rules that need to see every use of an object stay silent when it escapes
    escapes: set[str] = field(default_factory=set)
    # names, as written, whose methods the model does not know are called in it (`optim_wrapper.update_params(loss)`):
    # an optimizer's such call may step it, so the loop may train
    drives: set[str] = field(default_factory=set)
    # the conditions the loop runs under inside the loop around it (an event's own `guards` stop
    # at its innermost loop)
    guards: tuple["Guard", ...] = ()

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
    # networks built from a project class that computes the same in train and eval mode (no
    # dropout, no batch statistics, no `self.training`: `loopmodel.layers`)
    mode_free: frozenset[str] = frozenset()
    # networks built from a project class whose forward hands back, on some path, what it computed
    # with recording off (an inference mode under `with torch.no_grad():`: `loopmodel.layers`)
    stops_recording: frozenset[str] = frozenset()
    # networks built from a project class whose forward produces its output step by step, each
    # step reading the last (a diffusion sampler: `loopmodel.layers.generates`)
    generating: frozenset[str] = frozenset()

    def role(self, name: str | None) -> Role | None:
        b = self.bindings.get(name) if name else None
        return b.role if b else None

    def names(self, role: Role) -> list[str]:
        return [n for n, b in self.bindings.items() if b.role is role]

    def walk_loops(self) -> Iterator[Loop]:
        for loop in self.loops:
            yield from loop.walk()
