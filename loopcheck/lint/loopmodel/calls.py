"""Calls: expressions walked for calls, and each method call that is an event (the table of
methods is `torch_api.METHOD_EVENTS`)."""

from __future__ import annotations

import re

import libcst as cst

from loopcheck.lint.syntax import child_nodes
from loopcheck.lint.loopmodel.facts import Event, EventKind, Guard, Role
from loopcheck.lint.loopmodel.frames import _Frame
from loopcheck.lint.loopmodel.nodes import (
    _EXPRESSION_PART,
    _EXPRESSION_PARTS,
    _OPAQUE_EXPRESSIONS,
    _divides,
    _dotted,
    _index,
    _is_none,
    _kw,
    _literal_bool,
    _positional,
    _recv_name,
    _string,
    _text_or,
    written,
)
from loopcheck.lint.loopmodel.torch_api import (
    CLIP_FUNCTIONS,
    HAND_CLIP_FACTOR,
    LOSS_SCALER_CLASSES,
    LOSS_SCALER_NAME,
    METHOD_EVENTS,
    SAVE_RECEIVERS,
    WRAPPERS,
    _BUILTINS,
    _MOVE_METHODS,
    _named_as,
    _PARAM_METHODS,
    is_accumulation_test,
)
from loopcheck.lint.loopmodel.traces import _Branch


# builtins whose calls the checks below read (`next(it)` draws a batch, `map(fn, items)` runs fn)
_BUILTINS_READ = frozenset({"next", "map"})
# methods that only read an object (`optimizer.state_dict()`, `scheduler.get_last_lr()`): calling them drives nothing
_READ_METHODS = ("get_", "state_dict", "__repr__", "__str__")


class BuilderCalls:
    """The builder's part for calls."""


    def walk_expr(self, node: cst.CSTNode, frame: _Frame) -> None:
        """Visit the calls of an expression, innermost (evaluated) first."""
        kind = type(node)  # exact types: isinstance against libcst's ABCs is slow when it fails
        opaque = _OPAQUE_EXPRESSIONS  # (names and literals, most arguments, are not walked into: no call)
        if kind is cst.Call:
            func = node.func  # type: ignore[attr-defined]
            if type(func) not in opaque and not (type(func) is cst.Attribute and type(func.value) is cst.Name):
                self.walk_expr(func, frame)
            for arg in node.args:  # type: ignore[attr-defined]
                if type(arg.value) not in opaque:
                    self.walk_expr(arg.value, frame)
            self.on_call(node, frame)  # type: ignore[arg-type]
        elif kind in opaque:
            return
        elif kind is cst.Attribute:
            if type(node.value) not in opaque:  # type: ignore[attr-defined]
                self.walk_expr(node.value, frame)  # type: ignore[attr-defined]
        elif kind is cst.IfExp:
            self.walk_ifexp(node, frame)  # type: ignore[attr-defined]
        elif kind is cst.BinaryOperation or kind is cst.BooleanOperation:
            for side in (node.left, node.right):  # type: ignore[attr-defined]
                if type(side) not in opaque:
                    self.walk_expr(side, frame)
        elif kind is cst.Comparison:
            if type(node.left) not in opaque:  # type: ignore[attr-defined]
                self.walk_expr(node.left, frame)  # type: ignore[attr-defined]
            for target in node.comparisons:  # type: ignore[attr-defined]
                if type(target.comparator) not in opaque:
                    self.walk_expr(target.comparator, frame)
        else:
            parts = _EXPRESSION_PART
            for child in child_nodes(node):
                child_kind = type(child)
                if child_kind in opaque:
                    continue
                inner = parts.get(child_kind)
                if inner is None:
                    inner = parts[child_kind] = isinstance(child, _EXPRESSION_PARTS) or (
                        child_kind.__name__ in ("Index", "Slice")
                    )
                if inner:
                    self.walk_expr(child, frame)

    def on_call(self, call: cst.Call, frame: _Frame) -> None:
        func = call.func
        if type(func) is cst.Name and self._plain_builtin(func.value, frame):
            return
        self._note_draw(call, frame)
        if self._try_inline(call, frame) or self._try_callable_argument(call, frame):
            return
        unit = frame.unit
        if type(func) is cst.Attribute:
            attr = func.attr.value
            recv = func.value
            handler = METHOD_EVENTS.get(attr)
            if handler is not None and getattr(self, handler)(call, recv, frame):
                return
        qual = unit.qualify(func) or ""
        last = qual.rsplit(".", 1)[-1]
        if last in CLIP_FUNCTIONS:
            params = _positional(call, 0) or _kw(call, "parameters")
            owner = None
            if type(params) is cst.Call and type(params.func) is cst.Attribute and params.func.attr.value in _PARAM_METHODS:
                owner = self.target(params.func.value, frame)
            self.event(EventKind.CLIP, owner, call, frame, fn=last,
                       params_text=unit.text(params) if params is not None else "")
            return
        if qual in ("torch.save",) or (last == "save" and (qual.startswith("torch") or _recv_name(func) in SAVE_RECEIVERS)):
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
        if self._loss_scaler_call(call, frame):
            return
        if self._project_class(func, frame) is not None or self._on_a_class(func, frame):
            return  # constructing a model / EMA class of the project is not a forward pass, nor is a classmethod
        if type(func) is cst.Name and func.value in _BUILTINS:
            return
        if type(func) is cst.Attribute and self.loop_stack and not func.attr.value.startswith(_READ_METHODS):
            driven = _dotted(func.value)  # as written (`optimizer` from a tuple a helper returned)
            if driven:
                self.loop_stack[-1].drives.add(driven)
        self._escape(call, frame)
        # a forward pass: model(x)
        if type(func) in (cst.Name, cst.Attribute) and not _library_call(func, unit):
            name = self.target(func, frame)
            if name and name not in unit.imports:
                self.use(name, "call", frame)
                self.event(EventKind.FORWARD, name, call, frame, pending="forward", call=call)

    def _plain_builtin(self, name: str, frame: _Frame) -> bool:
        """`len(x)`, `print(...)`, `isinstance(...)`: a builtin that nothing here rebinds, so the
        call is neither followed nor recorded (what the checks below would conclude, without
        them: about two calls in five are such). `next` and `map` say what a loop iterates."""
        if name not in _BUILTINS or name in _BUILTINS_READ or name in frame.env or name in frame.local_funcs:
            return False
        if name in self.instances or name in self.deferred or name in self.bindings:
            return False
        unit = frame.unit
        return name not in unit.imports and unit.lookup_function(name) is None and unit.lookup_class(name) is None

    def _on_a_class(self, func: cst.BaseExpression, frame: _Frame) -> bool:
        """`Param.Input.model(name)`: a method called on a class of the project (a classmethod, a
        staticmethod, a nested class's), not on an instance: no network runs forward."""
        if type(func) is not cst.Attribute:
            return False
        root = func.value
        while type(root) is cst.Attribute:
            root = root.value
        return type(root) is cst.Name and root.value not in frame.env and self._project_class(root, frame) is not None

    def _note_draw(self, call: cst.Call, frame: _Frame) -> None:
        """`batch = next(it)` (or `it.next()`, `it.__next__()`) on an iterator of a loader, in a
        loop that iterates no loader itself (`for i in range(n)`, `while True`): the loop runs
        over that loader's batches."""
        loop = self.loop_stack[-1] if self.loop_stack else None
        if loop is None or loop.loader is not None or loop.via != frame.via:
            return
        func = call.func
        if type(func) is cst.Name and func.value == "next" and call.args:
            it = call.args[0].value
        elif type(func) is cst.Attribute and func.attr.value in ("next", "__next__") and not call.args:
            it = func.value
        else:
            return
        if type(it) is cst.Call:
            loop.loader = self._loader_of(it, frame)
        elif type(it) in (cst.Name, cst.Attribute):
            loop.loader = self.iter_of.get(self.canon(it, frame) or "")
        if loop.loader:
            self.candidates.setdefault(loop.loader, frame.unit.path)

    def _loss_scaler_call(self, call: cst.Call, frame: _Frame) -> bool:
        """`loss_scaler(loss, optimizer, ...)` of a timm-style scaler: a backward pass and a step."""
        func = call.func
        if type(func) not in (cst.Name, cst.Attribute):
            return False
        name = self.canon(func, frame)
        binding = self.bindings.get(name or "")
        known = binding is not None and binding.cls in LOSS_SCALER_CLASSES
        if not (known or LOSS_SCALER_NAME.search(name or "")):
            return False
        loss = _positional(call, 0) or _kw(call, "loss")
        opt = _positional(call, 1) or _kw(call, "optimizer")
        if loss is None or opt is None:
            return False
        if binding is None and name:
            self.bind(name, Role.SCALER, frame, evidence="usage")
        self._backward(call, loss, frame, via_fn=f"{name}(...)")
        opt_name = self.target(opt, frame)
        if not opt_name:
            return True
        self.use(opt_name, "step", frame)
        update = _kw(call, "update_grad")
        always = update is None or _literal_bool(update) is True
        text = None if always else frame.unit.text(update)
        self._under_test(text, is_accumulation_test(text or ""), lambda: self.event(
            EventKind.STEP, opt_name, call, frame, pending="step", closure=False, args=[], metric=False, fn="loss_scaler"))
        return True

    def _under_test(self, text: str | None, accumulation: bool, emit) -> None:
        """Run `emit` (which records an event) as the body of `if <text>:` with no else; directly
        when `text` is None."""
        if text is None:
            emit()
            return
        self.blocks.append([])
        self.guards.append(Guard(text, accumulation))
        try:
            emit()
        finally:
            self.guards.pop()
            inner = self.blocks.pop()  # popped first: `self.block` is the enclosing block only after
            self.block.append(_Branch([inner, []]))

    def _synced_test(self, name: str | None, frame: _Frame, reset: bool = False) -> str | None:
        """Under `accelerator.accumulate(...)`: the sync test a prepared optimizer's step (or
        reset) waits for, or None when it acts on every micro-batch (no such context, or the
        reset is the network's own `model.zero_grad()`)."""
        if frame.synced is None:
            return None
        test, networks = frame.synced
        if reset and name is not None:
            binding = self.bindings.get(name)
            role = binding.role if binding is not None else self.annotations.get(name)
            if name in networks or role is Role.MODEL or role is None and _named_as(name, Role.MODEL):
                return None
        return test

    def _escape(self, call: cst.Call, frame: _Frame) -> None:
        if not self.loop_stack:
            return
        escapes = self.loop_stack[-1].escapes
        for arg in call.args:
            name = self.target(arg.value, frame) if type(arg.value) in (cst.Name, cst.Attribute, cst.Call) else None
            if name:
                escapes.add(name)


    def _m_zero_grad(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        if type(recv) is cst.Attribute and recv.attr.value == "grad":  # p.grad.zero_grad? not a thing
            return False
        self.use(name, "zero_grad", frame)
        stn = _kw(call, "set_to_none")
        self._under_test(self._synced_test(name, frame, reset=True), True, lambda: self.event(
            EventKind.ZERO_GRAD, name, call, frame, pending="zero_grad", form="optimizer",
            set_to_none=_literal_bool(stn) if stn is not None else None))
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
        if written(recv_name).rsplit(".", 1)[-1] in ("accelerator", "fabric", "engine", "model_engine") and call.args:
            tensor = _positional(call, 0) or _kw(call, "loss")
            if tensor is not None:
                # inside `accelerator.accumulate(...)` it divides exactly when it accumulates
                self._backward(call, tensor, frame, via_fn=recv_name + ".backward",
                               divided=frame.synced is not None or self._backward_divides(recv_name))
                return True
        if recv_name.endswith("manual_backward") or (recv_name == "self" and call.args):
            tensor = _positional(call, 0)
            if tensor is not None:
                self._backward(call, tensor, frame, via_fn="manual_backward")
                return True
        self._backward(call, recv, frame)
        return True

    def _backward_divides(self, name: str) -> bool:
        """Whether `name.backward(loss)` divides the loss by the accumulation count itself. An
        `Accelerator` built here with no `gradient_accumulation_steps` (nor a plugin, nor `**kwargs`)
        divides by 1: the loop that accumulates by hand must divide. Any other engine, or an
        accelerator built where the model cannot see, is taken to divide."""
        found = self.assigned.get(name)
        if found is None or type(found[1]) is not cst.Call:
            return True
        unit, built = found
        if (unit.qualify(built.func) or "").rsplit(".", 1)[-1] != "Accelerator" or any(a.star for a in built.args):
            return True
        return any(a.keyword is not None and a.keyword.value.startswith("gradient_accumulation") for a in built.args)

    def _backward(self, call: cst.Call, tensor: cst.BaseExpression, frame: _Frame, via_fn: str | None = None,
                  divided: bool = False) -> None:
        unit = frame.unit
        scaled: bool | None = False
        scaler = None
        if type(tensor) is cst.Call and type(tensor.func) is cst.Attribute and tensor.func.attr.value == "scale" and tensor.args:
            scaler = self.target(tensor.func.value, frame)
            self.use(scaler, "scale", frame)
            scaled = True
            tensor = tensor.args[0].value
        inner = tensor
        while type(inner) is cst.Call and type(inner.func) is cst.Attribute and inner.func.attr.value in ("mean", "sum", "float", "squeeze"):
            inner = inner.func.value
        if not scaled and type(inner) is cst.Name and inner.value in frame.scaled:
            # `loss = scaler.scale(loss)` before: scaled on every path to here, or maybe (None)
            scaler, certain = frame.scaled[inner.value]
            scaled = True if certain else None
        name = self.canon(inner, frame) if type(inner) in (cst.Name, cst.Attribute) else None
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
        detail: dict = {"args": list(call.args), "metric": bool(_positional(call, 0) is not None or _kw(call, "metrics") is not None),
                        "fn": call.func.attr.value}  # type: ignore[attr-defined]
        if closure is not None:
            detail["closure_events"] = self._closure_events(closure, frame)
            opt_arg = self.target(closure, frame) if type(closure) in (cst.Name, cst.Attribute) else None
            detail["optimizer"] = opt_arg
        self._under_test(self._synced_test(name, frame), True, lambda: self.event(
            EventKind.STEP, name, call, frame, pending="step", closure=closure is not None, **detail))
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
                inner = _Frame(unit, dict(frame.env), frame.cls, frame.via, frame.depth + 1, frame.stack + (fdef,), fdef.name.value,
                               frame.self_cls)
                inner.local_funcs = dict(frame.local_funcs)
                inner.no_grad, inner.autocast, inner.synced = frame.no_grad, frame.autocast, frame.synced
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
            self._put_args(self.dicts[name], call.args, frame)
            return True
        self.event(EventKind.SCALER_UPDATE, name, call, frame, pending="update")
        return True

    def _m_update_parameters(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        model = _positional(call, 0)
        if model is None:
            return False  # `executor.update_parameters(name=...)`: an averaged model is given the model
        self.use(name, "update_parameters", frame)
        self.event(EventKind.EMA_UPDATE, name, call, frame, model=self.target(model, frame) if model is not None else None)
        return True

    def _m_mode(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        held = None
        if name is None and type(recv) is cst.Subscript:
            # `self._models[name].eval()`: a network of a registry, which one is not known here
            held = name = self.canon(recv.value, frame)
        if name is None or (type(recv) is cst.Call and not _moved(recv)):
            return False  # `build().train()`: not a network the model knows
        attr = call.func.attr.value  # type: ignore[attr-defined]
        mode = _positional(call, 0) or _kw(call, "mode")
        if attr == "eval" and call.args:
            return False  # not nn.Module.eval()
        known = self._truth(mode, frame) if mode is not None else True
        kind = EventKind.EVAL_MODE if attr == "eval" or known is False else EventKind.TRAIN_MODE
        self.use(name, attr, frame)
        self.event(kind, name, call, frame, pending="mode", conditional=known is None,
                   container=held is not None or self._looked_up_by_name(name))
        return True

    def _looked_up_by_name(self, name: str) -> bool:
        """`model = getattr(self, name)`: one of the object's networks, which one is not known here."""
        found = self.assigned.get(name)
        value = found[1] if found is not None else None
        return (type(value) is cst.Call and _dotted(value.func) == "getattr" and len(value.args) >= 2
                and type(value.args[1].value) is not cst.SimpleString)

    def _m_forward(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        name = self.target(recv, frame)
        if name is None:
            return False
        self.use(name, "forward", frame)
        self.event(EventKind.FORWARD, name, call, frame, pending="forward", call=call)
        return True

    def _m_generate(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        """`model.generate(inputs)` of a library model: forward passes that produce outputs (run under
        no_grad by the library itself; the mode is still the caller's). A forward only when the
        receiver is known as a model: the name alone does not make one."""
        name = self.target(recv, frame)
        if name is None:
            return False
        self.event(EventKind.FORWARD, name, call, frame, pending="forward", call=call, generate=True)
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

    def _m_grad_rescale(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        """`p.grad.mul_(clip_coef)` in a loop over parameters: clipping written by hand."""
        node = recv
        if type(node) is cst.Attribute and node.attr.value == "data":
            node = node.value
        if type(node) is not cst.Attribute or node.attr.value != "grad" or not call.args:
            return False
        factor = frame.unit.text(call.args[0].value)
        if not (HAND_CLIP_FACTOR.search(factor) or any(HAND_CLIP_FACTOR.search(g.text) for g in self.guards)):
            return False
        owner = self._grad_owner(node.value, frame)
        self.event(EventKind.CLIP, owner, call, frame, fn="hand-written clipping", params_text=frame.unit.text(node.value))
        return True

    def _m_requires_grad_(self, call: cst.Call, recv: cst.BaseExpression, frame: _Frame) -> bool:
        if _literal_bool(_positional(call, 0) or _kw(call, "requires_grad")) is False:
            name = self.target(recv, frame)
            if name:
                self.frozen.add(name)
                if name in self.param_owner and self.param_owner[name]:
                    self.frozen.add(self.param_owner[name])  # type: ignore[arg-type]
        return True


def _library_call(func: cst.Name | cst.Attribute, unit) -> bool:
    """`torch.Generator(...)`, `accelerator.unwrap_model(m)`, `nn.functional.relu(x)`: a call of an
    imported module's function or of a wrapper lookup, not a forward pass of a network."""
    root = func
    while type(root) is cst.Attribute:
        root = root.value
    if type(func) is cst.Attribute and type(root) is cst.Name and root.value in unit.imports:
        return True
    last = func.attr.value if type(func) is cst.Attribute else func.value
    return "unwrap" in last or last in WRAPPERS or bool(_MAKES_OR_FETCHES.match(last))


# `hub.create_model(name)`, `self.build_model(cfg)`, `store.load_model(path)`: a function named
# like a network that makes or fetches one, not a forward pass of it
_MAKES_OR_FETCHES = re.compile(
    r"_?(create|build|make|load|get|init|setup|fetch|download|restore|convert|export|save|register|prepare)_\w+$"
    # pydantic's `model_dump()` / `model_validate()` ..., a latency getter `model_times()`: named
    # like a network's attribute, they describe or convert something
    r"|model_(dump|dump_json|validate|validate_json|copy|construct|json_schema|rebuild|post_init|times|summary)$")


def _moved(call: cst.Call) -> bool:
    """`model.to(device)`, `model.cuda()`, `model.half()`: the module itself, returned."""
    func = call.func
    return type(func) is cst.Attribute and func.attr.value in _MOVE_METHODS and func.attr.value not in ("train", "eval")
