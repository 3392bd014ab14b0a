"""Names and values: canonical names, what an expression holds, roles bound to names."""

from __future__ import annotations

import libcst as cst

from loopcheck.lint.loopmodel.facts import Binding, Event, EventKind, Guard, Role
from loopcheck.lint.loopmodel.frames import _Frame, _Value
from loopcheck.lint.loopmodel.nodes import FUNCTION_VALUE, _divides, _dotted, _is_none, _kw, _positional, written
from loopcheck.lint.loopmodel.torch_api import WRAPPERS, _BUILTINS, _MOVE_METHODS, _NAME_ROLES, _TENSOR_METHODS
from loopcheck.lint.loopmodel.units import _Unit
from loopcheck.lint.values import name_chain


class BuilderNames:
    """The builder's part for names and values."""


    def load_unit(self, from_path: str, module: str, level: int) -> _Unit | None:
        project = self.project
        if project is None or not hasattr(project, "load"):
            return None
        try:
            parsed = project.load(from_path, module, level, whole=False)
        except (OSError, ValueError, RecursionError):
            return None
        if parsed is None:
            return None
        unit = self.units.get(parsed.path)
        if unit is None:
            note = project.part_reader(parsed) if hasattr(project, "part_reader") else None
            unit = _Unit(parsed.path, parsed.module, self, note)
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


    def canon(self, node: cst.BaseExpression, frame: _Frame) -> str | None:
        """The name an expression `a.b.c` stands for, its root mapped through the frame's
        parameters (`model.fc` in a helper called with `net` is `net.fc`); None for others."""
        kind = type(node)
        if kind is cst.Name:
            return frame.env.get(node.value, node.value)  # type: ignore[attr-defined]
        if kind is cst.Attribute and type(node.value) is cst.Name:  # `a.b` without a list
            root = node.value.value  # type: ignore[attr-defined]
            return f"{frame.env.get(root, root)}.{node.attr.value}"  # type: ignore[attr-defined]
        parts = name_chain(node)
        if parts is None:
            return None
        parts[0] = frame.env.get(parts[0], parts[0])
        return ".".join(parts)

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
        if type(node) in (cst.Tuple, cst.List):
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
        if type(node) is cst.Name and node.value in frame.local_funcs and node.value not in frame.env:
            return _Value(canon=FUNCTION_VALUE)  # `return model` of a nested `def model(...)`
        stripped = self._strip(node, frame)
        canon = self.canon(stripped, frame)
        if canon is not None:
            return _Value(canon=canon, dict_=self.dicts.get(canon), divided=divided or self.divided.get(canon, False))
        return _Value(divided=divided, built=(node, frame) if type(node) is cst.Call else None)

    def _opaque(self, call: cst.Call, frame: _Frame) -> bool:
        """A call whose result the model cannot know anything about (an unknown helper)."""
        func = call.func
        if type(func) is cst.Attribute and func.attr.value in _TENSOR_METHODS:
            return False
        qual = frame.unit.qualify(func) if type(func) in (cst.Name, cst.Attribute) else None
        if qual is None:
            return True
        if qual.split(".")[0] in ("torch", "F", "nn") or (type(func) is cst.Name and func.value in _BUILTINS):
            return False
        name = self.target(func, frame) or ""
        if name in self.bindings:
            return False
        last = written(name).rsplit(".", 1)[-1].lower()  # (`model@train`: a scope's own `model`)
        return not any(p.search(last) for role, p in _NAME_ROLES if role in (Role.CRITERION, Role.MODEL, Role.EMA))


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
        guards = tuple(self.guards)
        if (old is not None and evidence == "constructor" and old.evidence == "constructor" and old.role is role
                and (old.cls != cls or "alternatives" in old.detail) and _exclusive(self.bound_under.get(name, ()), guards)):
            # `if cfg.sched == "onecycle": sched = OneCycleLR(...) else: sched = StepLR(...)`: one
            # of the branches builds it, which one depends on the run; both classes are kept
            alternatives = tuple(dict.fromkeys(old.detail.get("alternatives", (old.cls,)) + (cls,)))
            b = Binding(name=name, role=role, evidence=evidence, path=frame.unit.path,
                        detail={**detail, "alternatives": alternatives, "_cadences": old.detail.get("_cadences", (old.cadence,))})
            if node is not None:
                b.node, b.module = node, frame.unit.module
            self.bindings[name] = b
            self.bound_under[name] = tuple(g for g in guards if g in self.bound_under.get(name, ()))
            return b
        b = Binding(name=name, role=role, cls=cls, qualified=qualified, call=call, evidence=evidence,
                    path=frame.unit.path, detail=dict(detail))
        if node is not None:
            b.node, b.module = node, frame.unit.module
        self.bindings[name] = b
        self.bound_under[name] = guards
        return b


def _exclusive(first: tuple[Guard, ...], second: tuple[Guard, ...]) -> bool:
    """Whether code under `first` and code under `second` never both run: one sits in the branch
    of a test, the other in the opposite branch of the same test."""
    return any(a.text == b.text and a.negated != b.negated for a in first for b in second)
