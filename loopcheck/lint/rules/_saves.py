"""What a checkpoint holds, shared by the checkpoint (LC501-LC509) and resume (LC507, LC510) rules.

A save is read through the model's SAVE event (its dict's keys, their values' source text and the
objects whose `state_dict()` it holds), and each entry is classified by meaning: `optim`,
`opt_state` and `optimizer.state_dict()` under any key are all the optimizer state. A save is a
*training checkpoint* when it holds more than the model weights, or when it is the only save of a
script that trains and resumes from it; weights saved for inference are never checked. The same
classification reads the keys a resume takes back out of a loaded checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from loopcheck.lint.loopmodel import Event, EventKind, ModuleModel, Role
from loopcheck.lint.positions import node_code
from loopcheck.lint.rules._shared import Trace
from loopcheck.lint.context import FileContext

K = EventKind

# what a checkpoint entry can be
MODEL, OPTIMIZER, SCHEDULER, SCALER, PROGRESS, RNG, EMA = (
    "model", "optimizer", "scheduler", "scaler", "progress", "rng", "ema",
)
TRAINING_STATE = frozenset({OPTIMIZER, SCHEDULER, SCALER, PROGRESS, RNG})
# the state of a whole training run (`state.state_dict()` of a trainer's state object): it may hold
# anything, so what the checkpoint lacks is not known
WHOLE_RUN = "whole run"
_WHOLE_RUN_TOKENS = frozenset({"state", "trainer", "runner", "learner", "solver", "workspace"})
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
_EXPORT_PATH = re.compile(
    r"best|final|export|weights|infer|deploy|release|pretrain|model_only|for_eval|tmp|temp",
    re.I,
)
# a metrics history saved next to the checkpoint (`stat.pt`, `history_epoch_3.pth`)
_HISTORY_PATH = re.compile(r"stats?\b|history|metrics", re.I)
# functions whose saves are weights for inference or sharing, not a training checkpoint
_EXPORT_FUNCTION = re.compile(r"save_weights|export|save_pretrained|save_for_inference|save_model_weights", re.I)


def _tokens(key: str) -> list[str]:
    """`optimizerG` -> [optimizer, g]; `global_step` -> [global, step]; `modelEma` -> [model, ema]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [t for t in re.split(r"[^a-z0-9]+", spaced.lower()) if t]


def object_item(name: str, model: ModuleModel) -> str | None:
    """What `name.state_dict()` saves: from the name's role, else from how it is spelled."""
    role = model.role(name)
    if role in _ROLE_ITEM:
        return _ROLE_ITEM[role]
    last = name.split(".")[-1].split("[")[0]
    item = key_item(last, "")
    if item in (OPTIMIZER, SCHEDULER, SCALER, EMA):
        return item
    return WHOLE_RUN if role is None and _tokens(last)[-1:] and _tokens(last)[-1] in _WHOLE_RUN_TOKENS else None


def key_item(key: str, value: str) -> str | None:
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
    if any(t in _RNG_TOKENS for t in tokens) and not ("state_dict" in value and {"generator", "generators"} & set(tokens)):
        return RNG  # (a GAN's `"generator": generator.state_dict()` is weights, not a torch.Generator)
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
    declined: set[str] = field(default_factory=set)  # entries saved as `None` on purpose (an inference export)
    function: str = ""  # name of the function the save is written in
    test_only: bool = False  # written by a test function that steps no optimizer

    @property
    def training_state(self) -> set[str]:
        return self.items & TRAINING_STATE

    @property
    def component(self) -> bool:
        """One piece of a checkpoint spread over several files (`optimizer.pt`, `rng_state.pth`):
        neither weights nor progress, only other state."""
        return self.known and not self.whole_object and bool(self.items) and not self.items & {MODEL, PROGRESS}

    def holds(self, item: str) -> bool:
        return item in self.items or item in self.joined

    @property
    def looks_exported(self) -> bool:
        return bool(_EXPORT_PATH.search(self.path_text)) or bool(_EXPORT_FUNCTION.search(self.function))


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
        item = object_item(name, model)
        saved.items.add(item or MODEL)
    for key in keys or ():
        value = str(values.get(key, ""))
        item = key_item(str(key), value)
        if item and value.strip() == "None":
            saved.declined.add(item)
        elif item:
            saved.items.add(item)
    saved.function = _function_name(event)
    for text in [*(str(v) for v in values.values()), obj_text]:
        saved.items |= text_items(text, model)
    saved.progress_in_path = _path_has_progress(saved.path_text)
    if WHOLE_RUN in saved.items or detail.get("computed_keys"):
        saved.known = False  # the run's whole state, or entries under computed keys: not known
    return saved


def _function_name(event: Event) -> str:
    """Name of the function the event is written in ('' at module level)."""
    if event.module is None:
        return ""
    from loopcheck.lint.syntax import module_nodes

    parents = module_nodes(event.module)[1]
    current = parents.get(id(event.node))
    while current is not None:
        if isinstance(current, cst.FunctionDef):
            return current.name.value
        current = parents.get(id(current))
    return ""


_STEP_GLOB = re.compile(r"[\"'][^\"'\n]*(?:step|epoch|iter)\w*[-_]?\*", re.I)

_STRING = re.compile(r"[rbuRBU]?([\"'])(?:\\.|(?!\1).)*\1")


def _path_has_progress(path_text: str) -> bool:
    """Whether a save path is built from an epoch / step variable (not just a literal name)."""
    fields = re.findall(r"\{([^{}]*)\}", path_text)  # f-string fields
    outside = _STRING.sub(" ", path_text)  # `"ckpt_%d.pt" % epoch`, `.format(step)`, `join(d, epoch)`
    for text in [*fields, outside]:
        for name in re.findall(r"[A-Za-z_]\w*", text):
            if key_item(name, "") == PROGRESS:
                return True
    return False


def text_items(text: str, model: ModuleModel) -> set[str]:
    """Entries visible in a value's source: `x.state_dict()` calls, RNG getters, nested keys."""
    items: set[str] = set()
    for match in _STATE_DICT.finditer(text):
        items.add(object_item(match.group(1), model) or MODEL)
    if _RNG_CALL.search(text):
        items.add(RNG)
    for key in _NESTED_KEY.findall(text):
        item = key_item(key, "")  # the value is not isolated: an ambiguous `opt` does not count
        if item:
            items.add(item)
    return items


class Facts:
    """What the whole file (its inlined helpers included) does, for the checkpoint rules."""

    @classmethod
    def of(cls, ctx: FileContext) -> "Facts":
        return ctx.derived(cls)

    def __init__(self, ctx: FileContext) -> None:
        model = ctx.model
        self.module = ctx.module  # not ctx itself: the facts are kept by ctx
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
        stepping = {trace.entry(e) for e in events if e.kind in (K.STEP, K.SCALER_STEP)}
        for i, e in enumerate(trace.events):
            # one save helper called from two places writes two checkpoints
            if e.kind is K.SAVE and Trace.remember(seen, e, *(id(c.node) for c in e.via)):
                saved = classify(e, model)
                saved.unit = trace.units[i]
                # a test of saving and loading that trains nothing writes no training checkpoint
                saved.test_only = trace.entry(e) not in stepping and _test_function(trace.entry_function(e))
                self.saves.append(saved)
        for saved in self.saves:
            for part in self.saves:
                if part.component and part.unit == saved.unit:
                    saved.joined |= part.items
        self.loads = [e for e in events if e.kind is K.LOAD]
        # `max(out_dir.glob("step-*"), key=...)`: the resume finds its step in the folder names
        self.progress_from_names = ctx.mentions(_STEP_GLOB)

    def resumes_from(self, saved: Saved) -> bool:
        """A load of the same file, or one on a resume path (`if args.resume:`)."""
        for load in self.loads:
            call = load.detail.get("call")
            path = _first_arg_text(call) if isinstance(call, cst.Call) else ""
            if path and saved.path_text and path == saved.path_text:
                if _reloads_after(load, saved.event):
                    continue  # saved, then read back for testing or generation: not a resume
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
            if not saved.known or saved.whole_object or saved.component or saved.test_only:
                continue
            if saved.declined & {OPTIMIZER, SCHEDULER, SCALER}:
                continue  # `"optimizer": None`: the file is declared not to resume training
            if _HISTORY_PATH.search(saved.path_text) and any(
                other is not saved and other.unit == saved.unit and other.items & {OPTIMIZER, SCHEDULER, SCALER}
                for other in self.saves
            ):
                continue  # the metrics history next to the real checkpoint
            if saved.training_state:
                if saved.looks_exported and not saved.items & {OPTIMIZER, SCHEDULER, SCALER}:
                    continue  # `best.pt` with an epoch next to it: an inference artifact
                yield saved
            elif (
                len({(s.event.path, s.event.line, s.event.column) for s in self.saves}) == 1  # one save site
                and saved in weights_only
                and MODEL in saved.items  # weights (a dict of data tensors saved and read back is no checkpoint)
                and len(weights_only) == len(self.saves)
                and self.trains
                and not saved.looks_exported
                and self.resumes_from(saved)
            ):
                yield saved


def _test_function(fdef: cst.FunctionDef | None) -> bool:
    return fdef is not None and fdef.name.value.startswith("test")


def _reloads_after(load: Event, save: Event) -> bool:
    """The load reads the file back later in the same code as the save, there or in a helper
    called after it (`evaluate(model_path)`, which scores the network just written)."""
    depth = len(save.via)
    if load.via[:depth] != save.via:
        return False
    if len(load.via) == depth:
        return load.path == save.path and load.line > save.line
    site = load.via[depth]
    return site.path == save.path and site.line > save.line


def _first_arg_text(call: cst.Call | None) -> str:
    if call is None or not call.args:
        return ""
    return node_code(call.args[0].value)


def name_of(model: ModuleModel, role: Role, default: str) -> str:
    names = model.names(role)
    return names[0] if len(names) == 1 else default
