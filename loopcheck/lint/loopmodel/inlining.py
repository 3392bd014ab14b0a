"""Following calls: project functions, methods and constructors inlined at their call sites
(bounded depth), decorators, parameters, and the entry points walked."""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

import libcst as cst

from loopcheck.lint.loopmodel.facts import CallSite, EventKind, ModuleModel, Role
from loopcheck.lint.loopmodel.frames import _Frame, _Value
from loopcheck.lint.loopmodel.nodes import (
    FUNCTION_VALUE,
    NO_GRAD_WORDS,
    STRING_ARGUMENT,
    _MAX_DEPTH,
    _MAX_INLINED,
    _SKIP_ENTRY_METHODS,
    _body,
    _dotted,
    _in_scope,
    _index,
    _is_ema_helper,
    _is_none,
    _kw,
    _positional,
    _string,
    _target_names,
    _walk_statements,
    returns_by_grad_mode,
)
from loopcheck.lint.loopmodel.torch_api import _ANNOTATION_ROLES
from loopcheck.lint.loopmodel.traces import _CallBlock
from loopcheck.lint.loopmodel.units import _CALLED, _Class, _Unit, _self_called
from loopcheck.lint.memo import fact
from loopcheck.lint.syntax import walk


class BuilderInlining:
    """The builder's part for following calls."""


    def _try_inline(self, call: cst.Call, frame: _Frame, site: cst.Call | None = None) -> bool:
        """Follow a call into a function or method of this file / this project. True when followed.
        `site`: the call written in the source when `call` is one made up from it (the target of
        `Process(target=f, args=...)`, a `partial`'s function with its arguments)."""
        func = call.func
        unit = frame.unit
        target: tuple[cst.FunctionDef, _Unit, _Class | None] | None = None
        bound_self = False
        instance = frame.self_cls  # the class of `self` in the callee
        if self.deferred and type(func) in (cst.Name, cst.Attribute) and site is None:
            deferred = self.deferred.get(self.canon(func, frame) or "")
            if deferred is not None:
                return self._run_deferred(deferred, call, frame)
        if type(func) is cst.Name:
            name = func.value
            if name in frame.local_funcs:
                target = (frame.local_funcs[name], unit, frame.cls)
            else:
                cls = unit.lookup_class(name)
                if cls is not None:
                    return self._construct(call, cls, frame)
                found = unit.lookup_function(name)
                if found is not None:
                    target = (found[0], found[1], None)
            if target is None:
                inst = self.instances.get(frame.env.get(name, name))
                found_c = inst.method("__call__") if inst is not None else None
                if found_c is not None:
                    target = (found_c[0], found_c[1].unit, found_c[1])
                    bound_self, instance = True, inst
        elif type(func) is cst.Attribute:
            attr = func.attr.value
            recv = func.value
            if type(recv) is cst.Name and recv.value == "self" and frame.self_cls is not None:
                found_m = frame.self_cls.method(attr)
                if found_m is not None:
                    target = (found_m[0], found_m[1].unit, found_m[1])
                    bound_self = True
            elif type(recv) is cst.Call and _dotted(recv.func) == "super" and frame.cls is not None:
                for base in frame.cls.base_classes():
                    if attr in base.methods:
                        target = (base.methods[attr], base.unit, base)
                        bound_self = True
                        break
                if target is None:
                    return attr == "__init__"
            else:
                recv_name = self.canon(recv, frame)
                cls = self.instances.get(recv_name or "")
                network = self.networks.get(recv_name or "") if cls is None else None
                if cls is not None:
                    found_m = cls.method(attr)
                    if found_m is not None:
                        target = (found_m[0], found_m[1].unit, found_m[1])
                        bound_self, instance = True, cls
                elif network is not None:
                    # a network's own method that switches modes (`generate()` starting with
                    # `self.eval()`, `train_custom()` training the head only) runs on the caller's object
                    found_m = network.method(attr)
                    if found_m is not None and attr not in ("forward", "__call__") and _switches_mode(*found_m):
                        self.inline(call, found_m[0], found_m[1].unit, found_m[1], frame, True, instance=network,
                                    receiver=recv_name)
                        return True
                else:
                    dotted = _dotted(func)
                    if dotted and "." in dotted:
                        found = unit.lookup_function(dotted)
                        if found is not None:
                            target = (found[0], found[1], None)
                        else:
                            cls2 = unit.lookup_class(dotted)
                            if cls2 is not None:
                                return self._construct(call, cls2, frame)
        if target is None:
            return False
        fdef, callee_unit, cls = target
        if _abstract(fdef):
            return False  # `raise NotImplementedError`: what runs is a subclass's, unknown here
        if _is_ema_helper(fdef):
            self._ema_helper_event(call, fdef, frame)
            return True
        self.inline(call, fdef, callee_unit, cls, frame, bound_self, site, instance if cls is not None else None)
        return True

    # ---- callables passed as values -----------------------------------------------------------

    def _try_callable_argument(self, call: cst.Call, frame: _Frame) -> bool:
        """`Process(target=train, args=(model, loader))`, `Thread(target=...)`, `mp.spawn(train,
        args=(...))`: the function runs with those arguments, so it is followed from here with the
        caller's facts (a spawned function receives the process index first). True when followed."""
        func = call.func
        if type(func) is cst.Attribute and func.attr.value not in _SPAWNING:
            return False  # (qualifying maps only a chain's root: the last part stays; most calls end here)
        qual = frame.unit.qualify(func) or _dotted(func) or ""
        last = qual.rsplit(".", 1)[-1]
        leading: list[cst.Arg] = []
        if last in _TARGET_TAKERS:
            fn, packed, named = _kw(call, "target"), _kw(call, "args"), _kw(call, "kwargs")
        elif last in _SPAWNERS and ("multiprocessing" in qual or qual.split(".")[0] in ("mp", "xmp", "torch")):
            fn = _kw(call, "fn") or _positional(call, 0)
            packed, named = _kw(call, "args"), None
            leading = [cst.Arg(cst.Name("rank"))]  # the process index; not an object of the caller
        elif qual == "map" and type(func) is cst.Name and "map" not in frame.env and len(call.args) > 1:
            # `map(fn, items)`: fn runs with an item of each iterable, objects not known here
            fn, packed, named = _positional(call, 0), None, None
            leading = [cst.Arg(cst.Name(f"item{i}")) for i in range(1, len(call.args))]
        else:
            return False
        if fn is None:
            return False
        args = leading + _unpacked(packed) + _keywords(named)
        if packed is not None and type(packed) not in (cst.Tuple, cst.List):
            args = leading  # `args=config.args`: what they are is not known here
        if self.deferred and type(fn) in (cst.Name, cst.Attribute):
            fn = self.deferred.get(self.canon(fn, frame) or "", fn)  # `train = partial(worker, ...)` first
        if self._is_partial(fn, frame):  # `spawn(partial(train, model=model), ...)`
            return self._try_inline(_partial_call(fn, args), frame, site=call)  # type: ignore[arg-type]
        if type(fn) is cst.Lambda:
            return self._run_lambda(fn, args, frame)
        return self._try_inline(cst.Call(func=fn, args=args), frame, site=call)

    def _remember_deferred(self, name: str, value: cst.BaseExpression, frame: _Frame) -> None:
        """`step = functools.partial(train_step, model=model)` or `run = lambda: train(...)`:
        calling `name` later runs that."""
        if type(value) is cst.Lambda or self._is_partial(value, frame):
            self.deferred[name] = value
        else:
            self.deferred.pop(name, None)

    @staticmethod
    def _is_partial(value: cst.BaseExpression, frame: _Frame) -> bool:
        return (type(value) is cst.Call and (frame.unit.qualify(value.func) or "").rsplit(".", 1)[-1] == "partial"
                and bool(value.args))

    def _run_deferred(self, deferred: cst.Call | cst.Lambda, call: cst.Call, frame: _Frame) -> bool:
        if type(deferred) is cst.Lambda:
            return self._run_lambda(deferred, call.args, frame)
        return self._try_inline(_partial_call(deferred, call.args), frame, site=call)

    def _bind_argument(self, env: dict[str, str], param: cst.Param, arg: cst.BaseExpression | None,
                       frame: _Frame, unit: _Unit) -> None:
        """What `param` names in the callee's `env` when the caller (`frame`) passes `arg` (None: nothing)."""
        pname = param.name.value
        if arg is None:
            if param.default is not None and _is_none(param.default):
                env[pname] = "None"
            else:
                env[pname] = pname
                self._param_evidence(param, pname, unit)
            return
        if _is_none(arg):
            env[pname] = "None"
            return
        if type(arg) is cst.SimpleString and _string(arg) is not None:
            env[pname] = STRING_ARGUMENT + _string(arg)  # `set_mode("eval")`: folds `mode == "train"`
            return
        val = self.value_of(arg, frame)
        if val.canon is not None:
            env[pname] = val.canon
            return
        env[pname] = pname
        if val.dict is not None:
            self.dicts[pname] = val.dict.copy()
        self.divided[pname] = val.divided
        self._param_evidence(param, pname, unit)
        if type(arg) is cst.Call:
            self._bind_ctor(pname, arg, frame)

    def _run_lambda(self, lam: cst.Lambda, args: Sequence[cst.Arg], frame: _Frame) -> bool:
        """Call a lambda with `args` from `frame`: its body runs with its parameters bound to them
        and its other names read in the frame that runs it (mostly the one it was written in:
        `map(lambda b: step(model, b), loader)`). True (the call is accounted for)."""
        if any(f is lam for f in frame.stack):
            return True  # `count = lambda n: n and count(n - 1)`: walked once
        params = lam.params
        ordered = list(params.posonly_params) + list(params.params)
        positional = [a.value for a in args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a.value for a in args if a.keyword is not None}
        env = dict(frame.env)
        for i, param in enumerate(ordered + list(params.kwonly_params)):
            arg = positional[i] if i < len(ordered) and i < len(positional) else keywords.get(param.name.value)
            self._bind_argument(env, param, arg, frame, frame.unit)
        for star in (params.star_arg, params.star_kwarg):
            if type(star) is cst.Param:
                env[star.name.value] = star.name.value
        inner = _Frame(frame.unit, env, frame.cls, frame.via, frame.depth, frame.stack + (lam,), frame.name, frame.self_cls)
        inner.local_funcs = frame.local_funcs
        inner.carry(frame)
        self.walk_expr(lam.body, inner)
        return True

    def _construct(self, call: cst.Call, cls: _Class, frame: _Frame) -> bool:
        """`Trainer(...)` of a project class: run its __init__ (models and EMAs are not followed)."""
        if cls.kind() is not None:
            return False
        init = cls.method("__init__")
        if init is not None:
            self.inline(call, init[0], init[1].unit, init[1], frame, True, instance=cls)
        return True

    def _ema_helper_event(self, call: cst.Call, fdef: cst.FunctionDef, frame: _Frame) -> None:
        names = [self.target(a.value, frame) for a in call.args if a.keyword is None]
        names = [n for n in names if n]
        target = next((n for n in names if "ema" in n.lower() or "swa" in n.lower() or "avg" in n.lower()), names[0] if names else None)
        if target:
            self.bind(target, Role.EMA, frame, evidence="usage")
        model = next((n for n in names if n != target), None)
        self.event(EventKind.EMA_UPDATE, target, call, frame, model=model, helper=fdef.name.value)

    def inline(self, call: cst.Call, fdef: cst.FunctionDef, unit: _Unit, cls: _Class | None, frame: _Frame,
               bound_self: bool, site_call: cst.Call | None = None, instance: _Class | None = None,
               receiver: str | None = None) -> None:
        """Walk `fdef` at `call`. `receiver`: the caller's name of the object a bound method runs on,
        when its `self` must keep that name (a network's own `generate()`: its `self.eval()` switches
        the caller's `model`); else `self`."""
        callee = _callee(fdef, unit)
        if callee.hands_back_a_function:
            # `def dummy_model(self): def model(...): ...; return model`: a plain function, no network
            self.call_values[id(site_call or call)] = _Value(canon=FUNCTION_VALUE)
        if not callee.binds(call, bound_self):
            return  # the call raises TypeError before the body runs (`pytest.raises` tests it)
        key = id(fdef)
        self.covered.add(key)
        if frame.depth >= _MAX_DEPTH or any(id(f) == key for f in frame.stack) or self.inlined >= _MAX_INLINED:
            if frame.depth >= _MAX_DEPTH:
                self._forward_beyond_depth(call, fdef, unit, frame)
            return
        self.inlined += 1
        if instance is not None:
            self.walked_on.add((key, id(instance)))
        env: dict[str, str] = {}
        params = list(fdef.params.posonly_params) + list(fdef.params.params)
        if bound_self and params and params[0].name.value in ("self", "cls"):
            env[params[0].name.value] = receiver or "self"
            params = params[1:]
        positional = [a for a in call.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
        all_params = params + list(fdef.params.kwonly_params)
        scaled: dict[str, tuple[str | None, bool]] = {}
        for i, param in enumerate(all_params):
            pname = param.name.value
            arg = None
            if i < len(positional) and param in params:
                arg = positional[i].value
            elif pname in keywords:
                arg = keywords[pname].value
            self._bind_argument(env, param, arg, frame, unit)
            if arg is not None and (frame.scaled or type(arg) is cst.Call):
                self._note_scaled(pname, arg, frame, scaled)
        for p in (fdef.params.star_arg, fdef.params.star_kwarg):
            if type(p) is cst.Param:
                env[p.name.value] = p.name.value
        qualname = f"{cls.name}.{fdef.name.value}" if cls is not None else fdef.name.value
        site = CallSite(qualname, frame.unit.path, site_call or call, frame.unit.module)
        inner = _Frame(unit, env, cls, frame.via + (site,), frame.depth + 1, frame.stack + (fdef,), qualname, instance)
        inner.scaled = scaled  # `backward_step(scaler.scale(loss))`: the parameter holds a scaled loss
        if type(fdef.params.star_arg) is cst.Param or type(fdef.params.star_kwarg) is cst.Param:
            named = {p.name.value for p in all_params}
            extra = positional[len(params):] + [a for k, a in keywords.items() if k not in named]
            inner.forwarded = (frame, call, extra)
        inner.carry(frame)
        self.blocks.append([])
        try:
            self._decorators(fdef, inner)
            self.walk_suite(fdef.body, inner)
        finally:
            block = self.blocks.pop()
        self.block.append(_CallBlock(block))
        if inner.returns:
            chosen = next((r for r in reversed(inner.returns) if r.canon or r.elems or r.dict or r.built), inner.returns[-1])
            if chosen.built is not None and len({unit.text(r.built[0].func) for r in inner.returns if r.built}) > 1:
                # `if name == "onecycle": return OneCycleLR(...)` ... `return ReduceLROnPlateau(...)`:
                # which one is built depends on the arguments, so none is known
                chosen = _Value(chosen.canon, chosen.elems, chosen.dict, chosen.divided)
            self.call_values[id(site_call or call)] = chosen

    def _forward_beyond_depth(self, call: cst.Call, fdef: cst.FunctionDef, unit: _Unit, frame: _Frame) -> None:
        """A helper past the inlining depth that calls a network it is handed
        (`loss = calc_loss_batch(x, y, model)`, whose body runs `model(x)`): one forward pass of
        that network at the call, so an evaluation loop deep in helpers still has its forward."""
        params = [p.name.value for p in list(fdef.params.posonly_params) + list(fdef.params.params)]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        called = _called_names(fdef, unit)
        for i, name in enumerate(params):
            arg = positional[i] if i < len(positional) else keywords.get(name)
            if arg is None or name not in called:
                continue
            target = self.target(arg, frame)
            if target:
                # `unseen`: the helper's body, which may switch modes or turn recording off, was not walked
                self.event(EventKind.FORWARD, target, call, frame, pending="forward", call=call, unseen=True)
                return

    def _decorators(self, fdef: cst.FunctionDef, frame: _Frame) -> None:
        for dec in fdef.decorators:
            named = _decorator_callee(dec)
            last = (frame.unit.qualify(named) or "").rsplit(".", 1)[-1]
            if last in ("no_grad", "inference_mode") or _project_no_grad(frame.unit, _dotted(named)):
                frame.no_grad = True
                self.event(EventKind.NO_GRAD, None, dec, frame, form="decorator")

    def _param_evidence(self, param: cst.Param, name: str, unit: _Unit) -> None:
        self.candidates.setdefault(name, unit.path)
        if param.annotation is not None:
            ann = param.annotation.annotation
            if type(ann) is cst.Subscript:  # Optional[GradScaler]
                inner = _index(ann)
                ann = inner if inner is not None else ann
            if type(ann) is cst.BinaryOperation:  # GradScaler | None
                ann = ann.left
            text = unit.qualify(ann) if type(ann) in (cst.Name, cst.Attribute) else None
            if text:
                for pattern, role in _ANNOTATION_ROLES:
                    if pattern.search(text):
                        self.annotations.setdefault(name, role)
                        break


    def run(self) -> ModuleModel:
        from loopcheck.lint.positions import source_of

        unit = self.main
        source = source_of(unit.module)
        called = set(_CALLED.findall(source))
        self_called = _self_called(source)
        plain_called = _self_called(source, with_super=False)
        frame = _Frame(unit, name="<module>")
        self.walk_body([s for s in unit.top_level], frame)
        for name, fdef in unit.functions.items():
            if id(fdef) in self.covered or name in called:
                continue
            self.entry(fdef, unit, None)
        for cls in unit.classes.values():
            if cls.kind() is Role.MODEL or cls.kind() is Role.CRITERION:
                methods = [m for n, m in cls.methods.items() if n not in _SKIP_ENTRY_METHODS and n != "__init__"]
            else:
                init = cls.methods.get("__init__")
                methods = ([init] if init is not None and id(init) not in self.covered else []) + [
                    m for n, m in cls.methods.items() if n != "__init__"
                ]
            for fdef in methods:
                name = fdef.name.value
                if id(fdef) in self.covered or name in _SKIP_ENTRY_METHODS:
                    continue
                if name in plain_called or name in self_called and _overridden_below(cls, name, unit):
                    continue  # reached from its callers (`super().fit()` in the subclass's `fit`)
                if fdef.name.value != "__init__" and any(
                    type(d.decorator) is cst.Name and d.decorator.value in ("property", "staticmethod")
                    for d in fdef.decorators
                ) and _instance_param(fdef) is None:
                    continue
                self.entry(fdef, unit, cls)
            for fdef, owner in _inherited_entries(cls, plain_called):
                if (id(fdef), id(cls)) in self.walked_on:
                    continue  # `trainer.train()` already ran the base's method on this class's instance
                self.entry(fdef, owner.unit, owner, instance=cls)
        return self.finalize()

    def entry(self, fdef: cst.FunctionDef, unit: _Unit, cls: _Class | None, instance: _Class | None = None) -> None:
        """Walk a function nobody in the file calls. `instance`: the class of `self` when it is a
        subclass of `cls` (an inherited method run on the subclass's instance)."""
        self.covered.add(id(fdef))
        env: dict[str, str] = {}
        params = list(fdef.params.posonly_params) + list(fdef.params.params) + list(fdef.params.kwonly_params)
        if cls is not None and params and params[0].name.value in ("self", "cls"):
            env[params[0].name.value] = "self"
            params = params[1:]
        elif cls is not None and _instance_param(fdef) is not None:
            env["self"] = "self"  # `mp.spawn(self._worker, args=(self, ...))` on a staticmethod
            params = [p for p in params if p.name.value != "self"]
        qualname = f"{cls.name}.{fdef.name.value}" if cls is not None else fdef.name.value
        for param in params:
            pname = param.name.value
            # what the caller passes is not known here: not the object another function of the
            # file bound to the same name (`model = GPSE()` in a loader, `model` of an inference helper)
            scoped = self.binding_scope.get(pname, qualname) != qualname or (
                unit is self.main and _assigned_elsewhere(pname, fdef, unit))
            env[pname] = _in_scope(pname, qualname) if scoped else pname
            self._param_evidence(param, env[pname], unit)
        for p in (fdef.params.star_arg, fdef.params.star_kwarg):
            if type(p) is cst.Param:
                env[p.name.value] = p.name.value
        frame = _Frame(unit, env, cls, (), 0, (fdef,), qualname, instance)
        self.blocks.append([])
        try:
            self._decorators(fdef, frame)
            self.walk_suite(fdef.body, frame)
        finally:
            self.blocks.pop()




_MODE_SWITCH = re.compile(r"\.(?:train|eval)\(")


def _switches_mode(fdef: cst.FunctionDef, owner: _Class) -> bool:
    return bool(_MODE_SWITCH.search(owner.unit.text(fdef)))


def _project_no_grad(unit, qual: str) -> bool:
    """A decorator defined in the project that hands back `torch.no_grad()` or
    `torch.inference_mode()` (often chosen by the torch version): every `return` in it, nested
    functions included, names one of them; or that hands back a wrapper calling the function
    inside `with torch.no_grad():` (`def nograd(f): def new_f(*a, **k): with t.no_grad(): return
    f(*a, **k)`)."""
    found = unit.lookup_function(qual) if qual else None
    if found is None:
        return False
    fdef, owner = found
    returns = [n for n in _nodes_under(fdef) if type(n) is cst.Return and n.value is not None]
    if not returns:
        return False
    texts = [owner.text(r.value) for r in returns]
    nested = {n.name.value: n for n in _nodes_under(fdef) if type(n) is cst.FunctionDef and n is not fdef}
    if all(any(w in t for w in NO_GRAD_WORDS) or t.strip() in nested for t in texts) and any(
        any(w in t for w in NO_GRAD_WORDS) for t in texts
    ):
        return True
    wrappers = _callee(fdef, owner).handed_back
    return bool(wrappers) and all(_returns_under_no_grad(nested[name], owner) for name in wrappers)


def _returns_under_no_grad(wrapper: cst.FunctionDef, owner: _Unit) -> bool:
    """The wrapper returns, and every `return` of its own lies inside a `with` that turns recording off."""
    returns, off = returns_by_grad_mode(wrapper, owner.text)
    return returns > 0 and off == returns


def _nodes_under(node: cst.CSTNode):
    return (n for n, _ in walk(node))


def _partial_call(partial: cst.Call, args: Sequence[cst.Arg]) -> cst.Call:
    """The call `partial(fn, *bound)(*args)` makes: `fn(*bound, *args)`, keywords of both last."""
    fn, *bound = partial.args
    positional = [a for a in bound if a.keyword is None] + [a for a in args if a.keyword is None]
    keywords = [a for a in bound if a.keyword is not None] + [a for a in args if a.keyword is not None]
    return cst.Call(func=fn.value, args=positional + keywords)


def _unpacked(packed: cst.BaseExpression | None) -> list[cst.Arg]:
    """The elements of a literal `args=(a, b)` as positional arguments."""
    if type(packed) not in (cst.Tuple, cst.List):
        return []
    return [cst.Arg(e.value) for e in packed.elements if type(e) is cst.Element]


def _keywords(named: cst.BaseExpression | None) -> list[cst.Arg]:
    """The entries of a literal `kwargs={"model": model}` (or `dict(model=model)`) as keywords."""
    if type(named) is cst.Dict:
        return [cst.Arg(e.value, keyword=cst.Name(e.key.value[1:-1])) for e in named.elements
                if type(e) is cst.DictElement and type(e.key) is cst.SimpleString and e.key.value[1:-1].isidentifier()]
    if type(named) is cst.Call and _dotted(named.func) == "dict":
        return [a for a in named.args if a.keyword is not None]
    return []


class _Callee:
    """What the model needs of a function before following a call into it, found once per
    function and run: which calls it accepts, and the functions it defines and hands back."""

    __slots__ = ("takes", "self_first", "names", "handed_back")

    def __init__(self, fdef: cst.FunctionDef) -> None:
        params = fdef.params
        positional = [*params.posonly_params, *params.params]
        # positional arguments it takes (-1: any; None: unknown, a decorator may change them)
        self.takes: int | None = -1 if type(params.star_arg) is cst.Param else len(positional)
        if any(_decorator_name(d) not in _SIGNATURE_KEEPING for d in fdef.decorators):
            self.takes = None
        self.self_first = bool(positional) and positional[0].name.value in ("self", "cls")
        self.names = None if type(params.star_kwarg) is cst.Param else frozenset(  # None: any keyword
            p.name.value for p in [*params.params, *params.kwonly_params])
        # every `return` returns a function defined inside (`return model` of a nested `def model`)
        nested: set[str] = set()
        returns: list[cst.BaseExpression | None] = []
        for top in _body(fdef.body):
            for node in _walk_statements(top):
                if type(node) is cst.FunctionDef:
                    nested.add(node.name.value)
                elif type(node) is cst.SimpleStatementLine:
                    returns.extend(small.value for small in node.body if type(small) is cst.Return)
        every = bool(returns) and all(type(r) is cst.Name and r.value in nested for r in returns)
        self.handed_back: frozenset[str] = frozenset(r.value for r in returns) if every else frozenset()  # type: ignore[union-attr]

    @property
    def hands_back_a_function(self) -> bool:
        return bool(self.handed_back)

    def binds(self, call: cst.Call, bound_self: bool) -> bool:
        """False when the call passes a keyword the function has no parameter for, or more
        positional arguments than it takes, with no `*args` / `**kwargs` on either side to absorb
        or hide them: it raises TypeError before the body runs."""
        takes, names = self.takes, self.names
        if takes is None:
            return True
        positional = 0
        for arg in call.args:
            if arg.star:
                return True
            if arg.keyword is None:
                positional += 1
            elif names is not None and arg.keyword.value not in names:
                return False
        return takes < 0 or positional <= takes - (bound_self and self.self_first)


def _callee(fdef: cst.FunctionDef, unit: _Unit) -> _Callee:
    table = fact(unit.module, "callees", dict)
    found = table.get(id(fdef))
    if found is None:
        found = table[id(fdef)] = _Callee(fdef)
    return found


# decorators that hand the function's own parameters on
_SIGNATURE_KEEPING = frozenset(("no_grad", "inference_mode", "enable_grad", "staticmethod", "classmethod",
                                "abstractmethod", "property", "cache", "lru_cache", "wraps"))


def _decorator_callee(dec: cst.Decorator) -> cst.BaseExpression:
    """What names the decorator: `torch.no_grad` of `@torch.no_grad()` and of `@torch.no_grad`."""
    expr = dec.decorator
    return expr.func if type(expr) is cst.Call else expr


def _decorator_name(dec: cst.Decorator) -> str:
    return (_dotted(_decorator_callee(dec)) or "").rsplit(".", 1)[-1]


def _assigned_elsewhere(name: str, fdef: cst.FunctionDef, unit: _Unit) -> bool:
    """Another function or method of the analysed file assigns the plain name (`model = GPSE()`
    in a loader): an entry point's parameter of that name is not its object. (The whole file is
    read: only for the file analysed, whose every part its analysis depends on.)"""
    table = fact(unit.module, "function_locals", dict)
    if not table:
        _note_function_locals(list(unit.module.body), None, table)
        table[None] = Counter(name for names in table.values() for name in names)
    return table[None][name] > (name in table.get(id(fdef), ()))


def _note_function_locals(stmts: list, owner: int | None, table: dict) -> None:
    """The plain names each function's own statements assign, by `id` of the function."""
    for top in stmts:
        for node in _walk_statements(top):
            kind = type(node)
            if kind is cst.SimpleStatementLine and owner is not None:
                table[owner].update(name for small in node.body if type(small) in (cst.Assign, cst.AnnAssign)
                                    for target in _targets(small) for name in _target_names(target))
            elif kind is cst.FunctionDef:
                table[id(node)] = set()
                _note_function_locals(_body(node.body), id(node), table)
            elif kind is cst.ClassDef:
                _note_function_locals(_body(node.body), owner, table)


def _targets(node: cst.Assign | cst.AnnAssign) -> list[cst.BaseExpression]:
    return [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]


def _called_names(fdef: cst.FunctionDef, unit: _Unit) -> set[str]:
    """Names called directly in a function's body (`model(x)`), found once per function and run."""
    table = fact(unit.module, "called_names", dict)
    found = table.get(id(fdef))
    if found is None:
        found = table[id(fdef)] = {
            n.func.value for n in _nodes_under(fdef.body) if type(n) is cst.Call and type(n.func) is cst.Name}
    return found


def _overridden_below(cls: _Class, name: str, unit: _Unit) -> bool:
    """Another class of the file derives from `cls` and defines `name` again."""
    return any(other is not cls and name in other.methods and any(b is cls for b in other.base_classes())
               for other in unit.classes.values())


# what `_try_callable_argument` follows: a callable passed as `target=`, or spawned as the first argument
_TARGET_TAKERS = frozenset({"Process", "Thread"})
_SPAWNERS = frozenset({"spawn", "start_processes"})
_SPAWNING = _TARGET_TAKERS | _SPAWNERS


def _abstract(fdef: cst.FunctionDef) -> bool:
    """A method left for subclasses: its body (past a docstring) only raises
    `NotImplementedError`, or is `pass` / `...` under `@abstractmethod`."""
    body = list(fdef.body.body) if type(fdef.body) is cst.IndentedBlock else [fdef.body]
    smalls = [s for stmt in body for s in (stmt.body if type(stmt) is cst.SimpleStatementLine else [stmt])]
    if smalls and type(smalls[0]) is cst.Expr and type(smalls[0].value) in (cst.SimpleString, cst.ConcatenatedString):
        smalls = smalls[1:]
    if len(smalls) != 1:
        return False
    only = smalls[0]
    if type(only) is cst.Raise and only.exc is not None:
        exc = only.exc.func if type(only.exc) is cst.Call else only.exc
        return _dotted(exc) == "NotImplementedError"
    marked = any((_dotted(d.decorator) or "").endswith("abstractmethod") for d in fdef.decorators)
    return marked and (type(only) is cst.Pass or type(only) is cst.Expr and type(only.value) is cst.Ellipsis)


def _inherited_entries(cls: _Class, self_called: set[str]) -> list[tuple[cst.FunctionDef, _Class]]:
    """The methods a class inherits from project base classes that run differently on its
    instances: the base calls `self.name()` where this class overrides `name` or the base has no
    `name` at all (a trainer whose `train()` in the base calls the subclass's `_valid_epoch()`).
    Methods the file calls through `self` are reached from their callers instead."""
    if cls.kind() is not None:
        return []
    out: list[tuple[cst.FunctionDef, _Class]] = []
    for base in cls.base_classes():
        calls = _self_called_in(base)
        redirected = [n for n in calls if (mine := cls.method(n)) is not None and mine[1] is not base
                      and (base.method(n) is None or base.method(n)[1] is not mine[1])]
        if not redirected:
            continue
        for name, fdef in base.methods.items():
            if name == "__init__" or name in _SKIP_ENTRY_METHODS or name in self_called or name in calls:
                continue
            if cls.method(name) != (fdef, base) or fdef.decorators:
                continue
            out.append((fdef, base))
    return out


def _self_called_in(cls: _Class) -> set[str]:
    """Names the class's methods call as `self.name(...)`, `cls.name(...)` or `super().name(...)`
    (found once per class and run, from its nodes: rendering a whole class costs more)."""
    cls.read_whole()
    table = fact(cls.unit.module, "self_called", dict)
    found = table.get(id(cls.node))
    if found is None:
        found = table[id(cls.node)] = {
            n.func.attr.value for n, _ in walk(cls.node)
            if type(n) is cst.Call and type(n.func) is cst.Attribute and _is_self_receiver(n.func.value)
        }
    return found


def _is_self_receiver(node: cst.BaseExpression) -> bool:
    if type(node) is cst.Name:
        return node.value in ("self", "cls")
    return type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "super"


def _instance_param(fdef: cst.FunctionDef) -> cst.Param | None:
    """The parameter named `self` of a staticmethod that is handed the instance explicitly (a
    process entry for `mp.spawn(self._train_worker, args=(self, ...))`), if any."""
    if not any(type(d.decorator) is cst.Name and d.decorator.value == "staticmethod" for d in fdef.decorators):
        return None
    params = list(fdef.params.posonly_params) + list(fdef.params.params)
    return next((p for p in params if p.name.value == "self"), None)
