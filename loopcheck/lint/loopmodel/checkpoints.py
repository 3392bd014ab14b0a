"""Checkpoints: the dicts handed to `torch.save`, with their keys, and whose state they hold."""

from __future__ import annotations

from typing import Sequence

import libcst as cst

from loopcheck.lint.loopmodel.facts import EventKind
from loopcheck.lint.loopmodel.frames import _Dict, _Frame
from loopcheck.lint.loopmodel.nodes import _dotted, _kw, _positional, _string, _text_or


class BuilderCheckpoints:
    """The builder's part for checkpoints."""


    def _put_args(self, d: _Dict, args: Sequence[cst.Arg], frame: _Frame) -> None:
        """`dict(model=..., **base)` or `state.update(epoch=e, **more)`: keywords are keys, the
        rest are dicts merged in."""
        for arg in args:
            if arg.keyword is not None:
                self._put(d, arg.keyword.value, arg.value, frame)
            else:
                d.merge(self._dict_of(arg.value, frame))

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
            self._put_args(d, node.args, frame)
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
            d.computed = d.computed or key is None
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
        if depth < 2 and type(node) in (cst.Name, cst.Attribute):
            name = self.canon(node, frame)
            if name in self.assigned:
                unit, value = self.assigned[name]
                return self._state_owner(value, frame, depth + 1)
        return None

    def _save(self, call: cst.Call, frame: _Frame, qual: str) -> None:
        args = call
        if call.args and call.args[0].star == "*" and frame.forwarded is not None:
            # `torch.save(*args, **kwargs)` in a helper: what the helper's caller passed, at its call
            frame, call, forwarded = frame.forwarded
            args = call.with_changes(args=forwarded)
        unit = frame.unit
        if (qual.split(".")[0] if qual else "") == "fabric" or qual.endswith("fabric.save"):
            obj, path = _positional(args, 1) or _kw(args, "state"), _positional(args, 0) or _kw(args, "path")
        else:
            obj, path = _positional(args, 0) or _kw(args, "obj"), _positional(args, 1) or _kw(args, "f")
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
                   obj_text=unit.text(obj), keys=keys, values=values, state_of=frozenset(state_of), computed_keys=d.computed,
                   whole_object=None, _whole=whole, path_text=_text_or(unit, path))
