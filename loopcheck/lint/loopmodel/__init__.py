"""The training-loop model: roles, events, loops and traces of one module.

Rules never walk raw syntax for PyTorch facts; they read this model. `build_model` turns a
parsed module (plus the run's project, to follow local imports) into a `ModuleModel`:

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

The package, by job:

    facts          the model's data (Role, EventKind, Event, Loop, ModuleModel, ...)
    torch_api      PyTorch knowledge as tables: classes, role names, scheduler cadence, method -> event
    nodes          small questions about libcst nodes, and the builder's bounds
    units          one parsed file: imports, functions, classes, project modules it reaches
    traces         blocks with branches and calls, expanded into the paths of one iteration
    frames         the builder's per-call state
    builder        the builder, assembled from one mixin per kind of syntax:
      names          canonical names, values, roles bound to names
      statements     bodies, branches, loops, with-blocks, assignments
      constructors   which call builds an optimizer, scheduler, scaler, model, loader, EMA
      calls          method calls that are events
      checkpoints    dicts handed to torch.save
      inlining       project functions, methods and constructors followed at their call sites
      resolution     roles settled, events resolved, loops classified
"""

from __future__ import annotations

import libcst as cst

from loopcheck.lint.loopmodel.builder import _Builder
from loopcheck.lint.loopmodel.facts import (
    Binding,
    CallSite,
    Event,
    EventKind,
    Guard,
    Loop,
    LoopKind,
    ModuleModel,
    Role,
    SchedulerCadence,
)
from loopcheck.lint.loopmodel.torch_api import is_accumulation_test, scheduler_cadence
from loopcheck.lint.loopmodel.units import _self_called  # noqa: F401  (tested directly)

__all__ = [
    "Binding", "CallSite", "Event", "EventKind", "Guard", "Loop", "LoopKind", "ModuleModel", "Role",
    "SchedulerCadence", "build_model", "is_accumulation_test", "scheduler_cadence",
]


def build_model(path: str, module: cst.Module, project: object = None) -> ModuleModel:
    """The loop model of one parsed file (following calls into the project through `project`)."""
    return _Builder(path, module, project).run()
