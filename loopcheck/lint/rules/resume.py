"""Resume rules (LC507, LC510): how a resume reads the epoch back, and whether it restores every
state the checkpoint holds.

A resume is read from the loading side: the checkpoint a `torch.load` returns is followed through
names, helper calls and returns, and the keys read from it are classified like the keys of a save
(`_saves`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import CallSite, Event, EventKind, Loop, LoopKind, ModuleModel, Role
from loopcheck.lint.positions import node_code, node_span
from loopcheck.lint.rules._saves import (
    OPTIMIZER,
    PROGRESS,
    SCALER,
    SCHEDULER,
    TRAINING_STATE,
    WHOLE_RUN,
    Facts,
    Saved,
    key_item,
    name_of,
    object_item,
    text_items,
)
from loopcheck.lint.rules._shared import Trace, call_site, module_of, nodes_of, whole_word
from loopcheck.lint.rules.base import FileContext, Rule, module_nodes, walk, walk_pruned
from loopcheck.lint.values import ModuleIndex, dotted, index_for

K = EventKind

# --- LC507 -------------------------------------------------------------------------------------


class ResumeEpochOffByOne(Rule):
    code = "LC507"
    requires = (whole_word("save", "save_state"),)  # the finished epoch is known from a save in the loop

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
            scope = index_for(ctx.path, ctx.module).enclosing(loop.node, kind) or ctx.module
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
            return node_code(arg.value, caller_module).strip()
    positional = [a for a in call.args if a.keyword is None]
    if param in params and params.index(param) < len(positional):
        return node_code(positional[params.index(param)].value, caller_module).strip()
    return None


def _functions(module: cst.Module) -> list[cst.FunctionDef]:
    return nodes_of(module, cst.FunctionDef)


_CKPT_NAME = re.compile(r"ckpt|checkpoint|state|resume|snapshot|saved|loaded|restore", re.I)


def _epoch_reads(scope: cst.CSTNode, start: str, keys: set[str], module: cst.Module) -> list[tuple[cst.CSTNode, str]]:
    """Assignments in `scope` that set `start` from a checkpoint's finished-epoch entry, unless
    `start` is also adjusted there (`start += 1`, `start = start + 1`)."""
    reads: list[tuple[cst.CSTNode, str]] = []
    adjusted = False
    helpers = {f.name.value: f for f in _functions(module)}
    loaded = _loaded_names(scope)
    whole_class = isinstance(scope, cst.ClassDef)

    # a method's nested functions are not its code; a class's methods are
    for node in walk_pruned(scope, () if whole_class else (cst.FunctionDef,)):
        if isinstance(node, cst.AugAssign):
            if dotted(node.target) == start:
                adjusted = True
        elif isinstance(node, cst.Assign):
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
    for n, _ in walk(node):
        if isinstance(n, cst.Attribute):
            text = dotted(n)
            if text:
                found.add(text)
        elif isinstance(n, cst.Name):
            found.add(n.value)
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

    for node in walk_pruned(helper, (cst.FunctionDef,)):  # the helper's own returns
        if isinstance(node, cst.Return):
            value = node.value
            if index >= 0 and isinstance(value, (cst.Tuple, cst.List)):
                value = value.elements[index].value if index < len(value.elements) else None
            found.append(_checkpoint_key(value, keys, loaded, helpers, depth=1) if value is not None else None)
    keys_found = {k for k in found if k is not None}
    return keys_found.pop() if len(keys_found) == 1 else None


def _loaded_names(scope: cst.CSTNode) -> set[str]:
    """Names assigned from a `*load*(...)` call in `scope` (`ckpt = torch.load(path)`)."""
    names: set[str] = set()
    for node, _ in walk(scope):
        if isinstance(node, cst.Assign):
            if isinstance(node.value, cst.Call) and "load" in (dotted(node.value.func) or "").split(".")[-1]:
                for target in node.targets:
                    text = dotted(target.target)
                    if text:
                        names.add(text)
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

    def run(self) -> None:
        event = self.restore.event
        module = module_of(event.path, self.ctx)
        if module is None or id(event.node) not in index_for(event.path, module).parent:
            self.restore.unknown = True
            return
        callers = [self._call_at(site) for site in event.via]
        self.value(event.path, module, event.node, callers, 0)

    # where a value goes --------------------------------------------------------------------

    def value(self, path: str, module: cst.Module, node: cst.CSTNode, callers: list, depth: int) -> None:
        index = index_for(path, module)
        up = index.parent
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
                scope = index.enclosing(parent, cst.FunctionDef) or module
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
        up = index_for(path, module).parent
        for node in _spelled(module, scope, name):
            if _binds_or_labels(node, up.get(id(node))):
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
        if index_for(path, module).qualify(call.func) == "torch.save":
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

    def _callee(self, path: str, module: cst.Module, call: cst.Call):
        """(path, module, function, bound) of a call to a function or method of this project."""
        func = call.func
        if isinstance(func, cst.Attribute) and dotted(func.value) == "self":
            cls = index_for(path, module).enclosing(call, cst.ClassDef)
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


def _spelled(module: cst.Module, scope: cst.CSTNode, name: str) -> list[cst.Name]:
    """The Name nodes spelling `name` under `scope` (the module or one of its nodes), in source
    order: picked from the module's shared walk rather than a walk of the scope."""
    found = [node for node in nodes_of(module, cst.Name) if node.value == name]
    if scope is module:
        return found
    parents = module_nodes(module)[1]
    inside = []
    for node in found:
        current = parents.get(id(node))
        while current is not None and current is not scope:
            current = parents.get(id(current))
        if current is not None:
            inside.append(node)
    return inside


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


def _restored_by_hand(index: ModuleIndex) -> set[str]:
    """States a resume may set without a state dict: `scheduler.last_epoch = ...` or
    `StepLR(..., last_epoch=start - 1)` restore the schedule; `start = scheduler.last_epoch`
    reads the progress back from the restored schedule."""
    items: set[str] = set()
    module, up = index.module, index.parent
    for node in nodes_of(module, cst.Attribute):
        if node.attr.value == "last_epoch":
            parent = up.get(id(node))
            items.add(SCHEDULER if isinstance(parent, cst.AssignTarget) else PROGRESS)
    for arg in nodes_of(module, cst.Arg):
        if arg.keyword is not None and arg.keyword.value == "last_epoch" and node_code(arg.value) != "-1":
            items.add(SCHEDULER)
    return items


class ResumeStateNotRestored(Rule):
    code = "LC510"
    requires = (whole_word("load"),)  # a resume is a torch.load (however imported, the name `load`)

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
            # a load helper called twice reads two files (`load_checkpoint(cp_g)`, `load_checkpoint(cp_do)`)
            if e.kind is not K.LOAD or e.detail.get("fn") != "torch.load" or not Trace.remember(seen, e, *(id(c.node) for c in e.via)):
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
            restored |= _restored_by_hand(index_for(ctx.path, ctx.module))
            if WHOLE_RUN in restored:
                continue  # the whole run's state object loads it all back (`state.load_state_dict(...)`)
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
        if restored & TRAINING_STATE:
            return True  # it reads optimizer / scheduler / scaler / progress / RNG state back
        if event.loop is not None:
            return False  # weights read in a loop: averaging or comparing checkpoints
        path_text = event.detail.get("path_text") or ""
        functions = _function_names(event, ctx, trace)
        if any(_NOT_RESUME.search(t) for t in [path_text, *functions]):
            return False
        if _RESUME_TEXT.search(path_text) or any(_RESUME_TEXT.search(g.text) for g in event.guards):
            return True
        if _loads_partially(event, ctx):
            return False  # `load_state_dict(weights, strict=False)`: initialised from other weights
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


_NOT_STRICT = re.compile(r"\bstrict\s*=\s*False\b")


def _loads_partially(event: Event, ctx: FileContext) -> bool:
    """The function that loads the file puts weights into the network with `strict=False`
    (dropping the keys whose shapes differ): an initialisation from released or pretrained
    weights, which a resume of the run's own checkpoint never needs."""
    module = module_of(event.path, ctx)
    if module is None:
        return False
    scope = index_for(event.path, module).scope_of(event.node)
    return isinstance(scope, cst.FunctionDef) and bool(_NOT_STRICT.search(node_code(scope, module)))


def _frame(event: Event, trace: Trace) -> tuple[tuple[str, int], int] | None:
    """((file, start line of the outermost function), line in it) of an event of this file's
    entry functions: inlined events are placed at the call that reached them."""
    path, line = call_site(event.path, event.line, event.via)  # type: ignore[misc]
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
    index = index_for(event.path, module) if module is not None else None
    if index is not None and id(event.node) in index.parent:
        func = index.enclosing(event.node, cst.FunctionDef)
        if isinstance(func, cst.FunctionDef):
            names.append(func.name.value)
    return names


def _saved_key_items(checkpoints: list[Saved], model: ModuleModel) -> dict[str, set[str]]:
    """What each key of the saved checkpoints holds, by meaning (a nested dict holds several)."""
    found: dict[str, set[str]] = {}
    for saved in checkpoints:
        for key, value in (saved.event.detail.get("values") or {}).items():
            items = found.setdefault(str(key), set())
            item = key_item(str(key), str(value))
            if item:
                items.add(item)
            items |= text_items(str(value), model)
    return found


def _restored_items(restore: Restore, saved_keys: dict[str, set[str]], model: ModuleModel) -> set[str]:
    items: set[str] = set()
    for key in restore.keys:
        if key in saved_keys and saved_keys[key]:
            items |= saved_keys[key]
        else:
            item = key_item(key, "")
            if item:
                items.add(item)
    for name in restore.objects:
        item = object_item(name, model) if name else None
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
            item = key_item(str(key), str(value))
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
        f'`{name_of(model, _ROLE_OF[item], item)}.load_state_dict({ckpt}["{keys.get(item, item)}"])`'
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
