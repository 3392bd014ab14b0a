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


@dataclass
class Binding:
    """What a canonical name refers to, and why we believe it."""

    name: str  # canonical name: "opt", "self.optimizer"
    role: Role
    cls: str | None = None  # constructor's last dotted part: "AdamW", "OneCycleLR", "GradScaler"
    qualified: str | None = None  # best-known dotted constructor: "torch.optim.lr_scheduler.OneCycleLR"
    call: cst.Call | None = None  # the constructor call, when known (its args give sizing)
    cadence: SchedulerCadence | None = None  # schedulers only
    evidence: str = "constructor"  # "constructor" | "usage" | "name"
    path: str = ""  # file of the constructor
    line: int | None = None


@dataclass(frozen=True)
class Guard:
    """A condition an event sits under within one iteration."""

    text: str  # source of the test, e.g. "(i + 1) % accum_steps == 0"
    accumulation: bool = False  # looks like an accumulation / every-k-steps guard
    negated: bool = False  # in the else branch


@dataclass(frozen=True)
class CallSite:
    """One hop of an inlined call chain: where a helper was called from."""

    callee: str  # qualified name of the called function: "train_one_epoch", "Trainer.step"
    path: str
    line: int


@dataclass
class Event:
    kind: EventKind
    target: str | None  # canonical name of the object acted on (optimizer, scheduler, model, ...)
    node: cst.CSTNode  # the call / statement, for positions and fixes
    path: str  # the file the node lives in (an inlined callee may be in another module)
    line: int
    column: int  # 1-based, as reported
    end_line: int
    end_column: int
    guards: tuple[Guard, ...] = ()
    via: tuple[CallSite, ...] = ()  # how the loop body reached this event (empty: written in the body)
    no_grad: bool = False  # runs under no_grad / inference_mode / set_grad_enabled(False)
    loop: "Loop | None" = None  # innermost loop around the event (inlined loops included)
    detail: dict = field(default_factory=dict)  # kind-specific: "closure", "args", "keys", "metric", ...

    @property
    def guarded(self) -> bool:
        return bool(self.guards)

    @property
    def accumulation_guarded(self) -> bool:
        return any(g.accumulation for g in self.guards)


@dataclass
class Loop:
    kind: LoopKind
    node: cst.For | cst.While
    path: str
    line: int
    parent: "Loop | None" = None
    children: list["Loop"] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # direct events, in source order (not nested loops')
    traces: list[list[Event]] = field(default_factory=list)  # branch-expanded paths of one iteration (direct events)
    via: tuple[CallSite, ...] = ()
    iter_text: str = ""  # source of the iterable / condition, e.g. "enumerate(train_loader)"

    def walk(self) -> Iterator["Loop"]:
        yield self
        for child in self.children:
            yield from child.walk()

    def all_events(self) -> list[Event]:
        """Direct events and those of nested loops, in source order."""
        out: list[Event] = []
        for loop in self.walk():
            out.extend(loop.events)
        out.sort(key=lambda e: (e.path, e.line, e.column))
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
