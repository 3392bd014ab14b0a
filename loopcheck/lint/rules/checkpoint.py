"""Checkpoint rules (LC501-LC506, LC508, LC509): what a training checkpoint must hold to resume a
run, and how checkpoints are saved and loaded. What a save holds is read by `_saves`; the resume
side (LC507, LC510) lives in `resume.py`.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from loopcheck.findings import Finding, Severity
from loopcheck.lint.loopmodel import Event, EventKind, ModuleModel, Role, SchedulerCadence
from loopcheck.lint.positions import node_code
from loopcheck.lint.rules._saves import EMA, OPTIMIZER, PROGRESS, RNG, SCALER, SCHEDULER, Facts, Saved, name_of
from loopcheck.lint.rules._shared import Trace, nodes_of, whole_word
from loopcheck.lint.rules._display import at as cited
from loopcheck.lint.rules.zero_grad import stepped_optimizer
from loopcheck.lint.rules.base import FileContext, Rule
from loopcheck.lint.saved_files import ProjectFiles
from loopcheck.lint.torch_range import declared_floor, floor_text
from loopcheck.lint.values import index_for

K = EventKind


def _assigns_attribute(module: cst.Module, attr: str) -> bool:
    """Whether the module assigns `<something>.<attr> = ...` anywhere."""
    return any(
        isinstance(node.target, cst.Attribute) and node.target.attr.value == attr
        for node in nodes_of(module, cst.AssignTarget)
    )


def _describe(saved: Saved) -> str:
    return "this checkpoint" if not saved.path_text else f"the checkpoint saved to `{saved.path_text}`"


class _CheckpointRule(Rule):
    """A training checkpoint lacks `item` while the script uses it."""

    item: str
    # checkpoints are SAVE events: torch.save, accelerator.save_state
    requires = (whole_word("save", "save_state"),)

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
            # a file written next to another in the same iteration (`g_0005000` and `do_0005000`)
            # may keep the state the other lacks
            if not self.holds(saved) and not any(o.unit == saved.unit and self.holds(o) for o in facts.saves):
                yield self.finding(ctx, _written_at(ctx, saved), self.message(saved, facts))


def _written_at(ctx: FileContext, saved: Saved) -> "Event | cst.CSTNode":
    """Where a checkpoint's content is written: the save, or the call in this file that hands a
    save helper the dict literal it saves (`save_checkpoint({"model": ...}, path)`)."""
    keys = saved.event.detail.get("keys")
    if keys is None:
        return saved.event
    for site in reversed(saved.event.via):  # the nearest call in this file (`main()` may lead to it)
        if site.module is not ctx.module or type(site.node) is not cst.Call:
            continue
        for arg in site.node.args:
            if type(arg.value) is cst.Dict and {_key_text(el) for el in arg.value.elements} == set(keys):
                return site.node
    return saved.event


def _key_text(element: cst.BaseDictElement) -> str | None:
    key = getattr(element, "key", None)
    return key.evaluated_value if isinstance(key, cst.SimpleString) else None  # type: ignore[return-value]


class CheckpointMissingOptimizer(_CheckpointRule):
    code = "LC501"
    item = OPTIMIZER

    def needed(self, facts: Facts) -> bool:
        return facts.uses_optimizer

    def message(self, saved: Saved, facts: Facts) -> str:
        opt = name_of(facts.model, Role.OPTIMIZER, "optimizer")
        return (
            f"{_describe(saved)} has no optimizer state: a resumed run restarts Adam's moments / SGD's "
            f"momentum from zero; add `\"optimizer\": {opt}.state_dict()`"
        )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        yield from super().check(ctx)
        yield from self._one_missing(ctx)

    def _one_missing(self, ctx: FileContext) -> Iterator[Finding]:
        """With several optimizers stepped (a GAN's generator and discriminator), a checkpoint
        that holds the state of some of them but not of another."""
        facts = Facts.of(ctx)
        trace = Trace.of(ctx)
        # `opt.step()`, `scaler.step(opt)`, by the entry point that runs them: an optimizer stepped
        # in a function nobody here calls is not stepped by the run that writes this checkpoint
        by_entry: dict[tuple, set[str]] = {}
        for e in facts.model.events:
            o = stepped_optimizer(e)
            if o and facts.model.role(o) is Role.OPTIMIZER:
                by_entry.setdefault(trace.entry(e), set()).add(shown_name(o))
        if not any(len(names) > 1 for names in by_entry.values()):
            return
        checkpoints = list(facts.training_checkpoints())
        reported: set[int] = set()
        for saved in checkpoints:
            if not saved.holds(OPTIMIZER):
                continue  # no optimizer at all: the finding above
            stepped = sorted(by_entry.get(trace.entry(saved.event), ()))
            if len(stepped) < 2:
                continue
            written = " ".join(_saved_texts(s) for s in facts.saves if s.unit == saved.unit)
            kept = [o for o in stepped if re.search(rf"\b{re.escape(o)}\b", written)]
            missing = [o for o in stepped if o not in kept]
            if kept and missing:
                # the file that keeps the weights the missing optimizer trains (a GAN's `g_last.pth`
                # next to `d_last.pth`), else this one
                owner = _saving_network_of(facts, missing[0], [s for s in checkpoints if s.unit == saved.unit]) or saved
                if id(owner) in reported:
                    continue
                reported.add(id(owner))
                yield self.finding(
                    ctx, _written_at(ctx, owner),
                    f"{_describe(owner)} " + ("holds" if owner is saved else "is written with one that holds")
                    + f" the state of `{kept[0]}` but not of `{missing[0]}`, "
                    f"which is stepped too: a resumed run restarts `{missing[0]}`'s moments from zero; "
                    f"add `\"{missing[0]}\": {missing[0]}.state_dict()`",
                )


def _saving_network_of(facts: Facts, optimizer: str, saves: list[Saved]) -> Saved | None:
    """The one save among `saves` that writes the weights of a network `optimizer` updates."""
    networks = {shown_name(n) for name, b in facts.model.bindings.items()
                if b.role is Role.OPTIMIZER and shown_name(name) == optimizer for n in b.detail.get("params_of") or ()}
    owners = [s for s in saves if any(re.search(rf"\b{re.escape(n)}\b", _saved_texts(s)) for n in networks)]
    return owners[0] if len(owners) == 1 else None


def shown_name(target: str) -> str:
    """The name a user wrote for an optimizer (`self.optim_g` -> `optim_g`)."""
    return target.split("@", 1)[0].rsplit(".", 1)[-1]


def _saved_texts(saved: Saved) -> str:
    detail = saved.event.detail
    return " ".join([detail.get("obj_text") or "", *(str(v) for v in (detail.get("values") or {}).values())])


class CheckpointMissingScheduler(_CheckpointRule):
    code = "LC502"
    item = SCHEDULER

    def needed(self, facts: Facts) -> bool:
        # `scheduler.last_epoch = start_epoch - 1`: the position is restored by hand
        return facts.uses_scheduler and not _assigns_attribute(facts.module, "last_epoch") and not _position_restored(facts.model)

    def message(self, saved: Saved, facts: Facts) -> str:
        sched = name_of(facts.model, Role.SCHEDULER, "scheduler")
        return (
            f"{_describe(saved)} has no scheduler state: a resumed run restarts the learning-rate "
            f"schedule from its first value; add `\"scheduler\": {sched}.state_dict()`"
        )


def _position_restored(model: ModuleModel) -> bool:
    """The schedule's position comes back without its state dict: the scheduler is rebuilt with
    `last_epoch=start_epoch - 1`, or stepped with the epoch (`scheduler.step(epoch)`)."""
    for binding in model.bindings.values():
        if binding.role is not Role.SCHEDULER or binding.call is None:
            continue
        for arg in binding.call.args:
            if arg.keyword is not None and arg.keyword.value == "last_epoch" and not _is_minus_one(arg.value):
                return True
    return any(
        e.kind is K.SCHED_STEP and e.detail.get("args") and not _plateau(model, e.target)
        for e in model.events
    )


def _plateau(model: ModuleModel, name: str | None) -> bool:
    binding = model.bindings.get(name or "")
    return binding is None or binding.cadence is SchedulerCadence.METRIC


def _is_minus_one(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.UnaryOperation) and isinstance(node.expression, cst.Integer) and node.expression.value == "1"


class CheckpointMissingScaler(_CheckpointRule):
    code = "LC503"
    item = SCALER

    def needed(self, facts: Facts) -> bool:
        return facts.uses_scaler

    def message(self, saved: Saved, facts: Facts) -> str:
        scaler = name_of(facts.model, Role.SCALER, "scaler")
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
        return saved.holds(PROGRESS) or saved.progress_in_path or self.facts.progress_from_names

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        self.facts = Facts.of(ctx)
        yield from super().check(ctx)

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
        ema = name_of(facts.model, Role.EMA, "ema")
        return (
            f"{_describe(saved)} has no EMA weights: a resumed run rebuilds the average from the raw "
            f"weights and loses thousands of steps of it; add `\"ema\": {ema}.state_dict()`"
        )


# --- LC508 / LC509 -----------------------------------------------------------------------------


class TorchLoadUnsafe(Rule):
    """Severity follows what the project proves: a warning when its declared torch range admits
    versions before 2.6 (where the default unpickles anything), or when it writes
    `weights_only=False` for a file that comes from outside; an info when it declares no torch
    range; nothing when it requires torch >= 2.6, when the project allows its own classes with
    `add_safe_globals` / `safe_globals`, or when the file is one the project saves with tensors only
    (`saved_files.py`: same file name, the project's own suffix, its keys read back, or a model class
    whose state dicts it saves)."""

    code = "LC508"
    requires = (whole_word("load"),)  # `torch.load`, `th.load`, `from torch import load`

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        index = index_for(ctx.path, ctx.module)
        calls = [c for c in nodes_of(ctx.module, cst.Call) if index.qualify(c.func) == "torch.load"]
        if not calls or _SAFE_GLOBALS.search(ctx.source):
            return
        floor = _project_floor(ctx)
        own = _own_tensor_files(ctx)
        saved_to = {s.path_text for s in Facts.of(ctx).saves}
        own_saves: ProjectFiles | None = None
        for call in calls:
            if any(a.star == "**" for a in call.args):
                continue
            given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "weights_only"), None)
            path = node_code(call.args[0].value) if call.args and call.args[0].keyword is None else ""
            if given is not None:
                if not (isinstance(given, cst.Name) and given.value == "False") or not _from_outside(path) or path in saved_to:
                    continue
                yield self.finding(
                    ctx,
                    call,
                    f"`torch.load({path}, weights_only=False)` unpickles a file whose path comes from "
                    f"outside the code (`{path}`): a crafted checkpoint runs arbitrary code; load it "
                    f"with `weights_only=True` and allow the classes it needs with "
                    f"`torch.serialization.add_safe_globals`",
                    severity=Severity.WARNING,
                )
                continue
            if (path in own and not path.isidentifier()) or _skeleton(path) in {_skeleton(o) for o in own} - {""}:
                continue  # a file this code saves itself with tensors and plain values (a bare
                # parameter name like `file` says nothing about which file; the same literal
                # template, `"G_%d.pth" % epoch` saved and `"G_%d.pth" % opt.epoch` loaded, does)
            if floor is not None and floor >= (2, 6):
                continue  # the default is `weights_only=True` on every version the project allows
            if own_saves is None:
                own_saves = ProjectFiles(ctx.project, ctx.path, ctx.source)
            if own_saves.saved_here(ctx.span(call).line):
                continue  # a file another module of the project writes with tensors only
            severity = Severity.WARNING if floor is not None else Severity.INFO
            declared = (
                f"the project allows torch {floor_text(floor)}, where versions before 2.6 default to "
                f"`weights_only=False` and unpickle arbitrary code"
                if floor is not None
                else "the project declares no torch version: before 2.6 the default unpickles arbitrary code"
            )
            yield self.finding(
                ctx,
                call,
                f"`torch.load` without `weights_only` (line {ctx.span(call).line}): {declared}, and from "
                f"2.6 it refuses non-tensor objects; pass `weights_only=True` (or `weights_only=False` "
                f"for your own trusted file)",
                severity=severity,
            )


_SAFE_GLOBALS = re.compile(r"\b(add_safe_globals|safe_globals)\b")
_OUTSIDE = re.compile(r"\bargs\b|\bopts?\b|\bcfg\b|config|url|download|hub|pretrained|sys\.argv|environ", re.I)


def _from_outside(path: str) -> bool:
    """A path the user or a download chooses (an argument, a config value, a URL), not a literal."""
    return bool(path) and not re.fullmatch(r"[rbuRBU]?[\"'][^\"']*[\"']", path.strip()) and bool(_OUTSIDE.search(path))


_LITERAL = re.compile(r"""[rbuRBUfF]*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")


def _skeleton(path: str) -> str:
    """The literal parts of a path expression, fields blanked (`f"G_{epoch}.pth"` -> `G_{}.pth`);
    empty unless they name a file or folder."""
    parts = [re.sub(r"\{[^{}]*\}", "{}", m.group(1)[1:-1]) for m in _LITERAL.finditer(path)]
    text = "|".join(parts)
    return text if re.search(r"[./]", text) else ""


def _project_floor(ctx: FileContext) -> tuple[int, ...] | None:
    project = ctx.project
    roots = getattr(project, "roots", None) or []
    floors = [f for f in (declared_floor(root) for root in roots) if f is not None]
    return min(floors) if floors else None


def _own_tensor_files(ctx: FileContext) -> set[str]:
    """Path expressions this file saves to with state dicts, tensors and plain values only."""
    facts = Facts.of(ctx)
    return {s.path_text for s in facts.saves if s.path_text and s.known and not s.whole_object}


class WholeModelPickled(Rule):
    code = "LC509"
    requires = (whole_word("save", "save_state"),)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        seen: set[tuple] = set()
        for e in model.events:
            if e.kind is not K.SAVE:
                continue
            if _converts_modules(e):
                continue
            pickled = _pickled_model(e, model)
            if pickled is None or not Trace.remember(seen, e):
                continue
            key = next((k for k, v in (e.detail.get("values") or {}).items() if str(v).strip() == pickled), None)
            where = f"the module `{pickled}` itself" + (f" under `\"{key}\"`" if key is not None else "")
            yield self.finding(
                ctx,
                e,
                f"`torch.save` ({cited(e)}) pickles {where}, which only loads where the same class "
                f"is importable from the same path; "
                + (f"store `{pickled}.state_dict()` under that key instead" if key is not None
                   else f"save `{pickled}.state_dict()` instead"),
            )


def _converts_modules(event: Event) -> bool:
    """Lightning Fabric's `save` stores the state dicts of the modules and optimizers it is given."""
    fn = event.detail.get("fn") or ""
    return fn.split(".")[0] == "fabric" or fn.endswith("fabric.save")


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

