"""The model builder: one class assembled from the mixins that each walk one kind of syntax."""

from __future__ import annotations

import libcst as cst

from loopcheck.lint.loopmodel.calls import BuilderCalls
from loopcheck.lint.loopmodel.checkpoints import BuilderCheckpoints
from loopcheck.lint.loopmodel.constructors import BuilderConstructors
from loopcheck.lint.loopmodel.facts import Binding, Event, Guard, Loop, Role
from loopcheck.lint.loopmodel.frames import _Dict, _Value
from loopcheck.lint.loopmodel.inlining import BuilderInlining
from loopcheck.lint.loopmodel.names import BuilderNames
from loopcheck.lint.loopmodel.resolution import BuilderResolution
from loopcheck.lint.loopmodel.statements import BuilderStatements
from loopcheck.lint.loopmodel.units import _Class, _Unit


class _Builder(
    BuilderNames,
    BuilderStatements,
    BuilderConstructors,
    BuilderCalls,
    BuilderCheckpoints,
    BuilderInlining,
    BuilderResolution,
):
    """Walks a module (and the project code it calls) once, producing its `ModuleModel`."""

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
        self.bound_under: dict[str, tuple[Guard, ...]] = {}  # name -> the guards its constructor ran under
        self.transparent = 0
        self.param_filters = 0  # `if` tests met inside a loop over parameters: resets there touch a subset
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
        # name -> the network class of the project it was built from (`model = Vocoder()`): its own
        # methods that switch modes (`generate()` starting with `self.eval()`) are followed
        self.networks: dict[str, _Class] = {}
        # name -> what calling it runs: `functools.partial(f, ...)` or a lambda (see inlining)
        self.deferred: dict[str, cst.Call | cst.Lambda] = {}
        self.binding_scope: dict[str, str] = {}
        self.pending: list[Event] = []
        self.dropped: set[int] = set()
        self.loop_blocks: dict[int, list] = {}
        self.call_values: dict[int, _Value] = {}
        self.covered: set[int] = set()
        self.walked_on: set[tuple[int, int]] = set()  # (id(method), id(class of self)) inlined
        self.inlined = 0
