"""Constructors: which call builds an optimizer, a scheduler, a scaler, a model, a loader, an EMA."""

from __future__ import annotations

import re

import libcst as cst

from loopcheck.lint.syntax import child_nodes, classes_of
from loopcheck.lint.loopmodel.facts import Role, SchedulerCadence
from loopcheck.lint.loopmodel.frames import _Frame
from loopcheck.lint.loopmodel.nodes import _dotted, _is_none, _kw, _positional, _split_of, _unmoved
from loopcheck.lint.loopmodel.torch_api import (
    EMA_CLASSES,
    OPTIMIZER_CLASSES,
    PARAMETER_FREE_MODULES,
    SCHEDULER_CLASSES,
    WRAPPERS,
    _EMA_RE,
    _PARAM_METHODS,
    scheduler_cadence,
)
from loopcheck.lint.loopmodel.units import _Class

# the nodes a value's expression is searched through for the parameters it reads
_VALUE_PARTS = classes_of(cst.BaseExpression) | {cst.Element, cst.DictElement, cst.Arg}


class BuilderConstructors:
    """The builder's part for constructors."""


    def _project_class(self, func: cst.BaseExpression, frame: _Frame) -> _Class | None:
        dotted = _dotted(func)
        return frame.unit.lookup_class(dotted) if dotted else None

    def _bind_ctor(self, name: str, value: cst.BaseExpression, frame: _Frame) -> bool:
        """Bind `name` when `value` constructs an object of a known role. True when it did."""
        if type(value) is cst.IfExp:
            side = value.orelse if _is_none(value.body) else value.body
            return self._bind_ctor(name, side, frame)
        call = _unmoved(value)  # Net().to(device), Net().cuda(): the constructor is inside
        if type(call) is not cst.Call:
            return False
        unit = frame.unit
        qual = unit.qualify(call.func)
        if qual is None:
            return False
        cls = qual.rsplit(".", 1)[-1]
        project_cls = self._project_class(call.func, frame)
        role: Role | None = None
        detail: dict = {}
        if project_cls is not None:
            role = project_cls.kind()
        elif "lr_scheduler" in qual or cls in SCHEDULER_CLASSES or re.match(r"get_\w*schedule", cls) or (
            cls == "get_scheduler" and qual.split(".")[0] in ("transformers", "diffusers")
        ):
            role = Role.SCHEDULER
        elif cls in ("GradScaler", "ShardedGradScaler"):
            role = Role.SCALER
        elif cls in EMA_CLASSES or _EMA_RE.search(cls):
            role = Role.EMA
        elif cls in OPTIMIZER_CLASSES or (
            (qual.startswith("torch.optim.") or ".optim." in qual or qual.startswith("optim.")) and cls[:1].isupper()
        ) or qual in ("transformers.AdamW", "transformers.optimization.AdamW"):
            role = Role.OPTIMIZER
        elif cls == "DataLoader":
            role = Role.LOADER
        elif cls.endswith("Sampler") and cls[:1].isupper():
            role = Role.SAMPLER
        elif cls.endswith("Loss") and cls[:1].isupper():
            role = Role.CRITERION
        elif cls in WRAPPERS and cls != "compile":
            inner = self.target(_positional(call, 0) or call, frame) if call.args else None
            known = self.bindings.get(inner or "")
            if known is not None and known.role is Role.MODEL:
                return False  # DDP(model): an alias of the wrapped model, which keeps its class
            role = Role.MODEL
            if inner:
                detail["wraps"] = inner
        elif qual.startswith("torchvision.models.") or qual in ("timm.create_model",) or (
            cls == "from_pretrained" and re.search(r"(^|\.)(Auto\w*Model\w*|\w+For\w+|\w+Model)\.from_pretrained$", qual)
        ):
            role = Role.MODEL
        elif qual.startswith("torch.nn.") and cls[:1].isupper() and cls not in (
            "Parameter", "ParameterList", "ParameterDict", *PARAMETER_FREE_MODULES
        ):
            role = Role.MODEL
        if role is None:
            return False
        if role is Role.OPTIMIZER:
            detail["params_of"] = frozenset(self._params_of(call, frame))
        elif role is Role.SCHEDULER:
            opt = _positional(call, 0) or _kw(call, "optimizer")
            detail["optimizer"] = self.target(opt, frame) if opt is not None else None
        elif role is Role.LOADER:
            detail["split"] = _split_of(name)
            for key in ("sampler", "batch_sampler"):
                arg = _kw(call, key)
                detail[key] = self.target(arg, frame) if arg is not None else None
                if arg is not None and detail[key] is None:
                    detail[key] = unit.text(arg)
            shuffle = _kw(call, "shuffle")
            detail["shuffle"] = unit.text(shuffle) if shuffle is not None else None
            dataset = _positional(call, 0) or _kw(call, "dataset")
            detail["dataset"] = unit.text(dataset) if dataset is not None else None
        b = self.bind(name, role, frame, evidence="constructor", node=call, cls=cls, qualified=qual, call=call, **detail)
        if role is Role.SCHEDULER:
            cadence = scheduler_cadence(cls, qual, self._args_text(call, frame), self._lambda_text(call, frame))
            if "alternatives" in b.detail:  # built in one of several branches: a cadence they all share
                cadences = tuple(dict.fromkeys(b.detail["_cadences"] + (cadence,)))
                b.detail["_cadences"] = cadences
                cadence = cadence if len(cadences) == 1 else SchedulerCadence.UNKNOWN
            b.cadence = cadence
        return True

    def _params_of(self, call: cst.Call, frame: _Frame) -> set[str]:
        owners: set[str] = set()
        stack: list[cst.CSTNode] = [a.value for a in call.args]
        seen = 0
        while stack and seen < 200:
            seen += 1
            node = stack.pop()
            if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _PARAM_METHODS:
                owner = self.target(node.func.value, frame)
                if owner:
                    owners.add(owner)
                continue
            if type(node) in (cst.Name, cst.Attribute):
                name = self.canon(node, frame)
                if name in self.assigned:
                    stack.append(self.assigned[name][1])
                continue
            if type(node) in _VALUE_PARTS:
                stack.extend(c for c in child_nodes(node) if type(c) in _VALUE_PARTS or type(c) is cst.CompFor)
            elif type(node) is cst.CompFor:
                stack.append(node.iter)
        return owners

    def _args_text(self, call: cst.Call, frame: _Frame) -> str:
        parts = []
        for arg in call.args[1:] if call.args and call.args[0].keyword is None else call.args:
            if arg.keyword is not None and arg.keyword.value == "optimizer":
                continue
            parts.append(frame.unit.text(arg.value))
            name = self.canon(arg.value, frame) if type(arg.value) in (cst.Name, cst.Attribute) else None
            if name in self.assigned:  # one level of `total = epochs * len(loader)`
                unit, node = self.assigned[name]
                parts.append(unit.text(node))
        return " ".join(parts)

    def _lambda_text(self, call: cst.Call, frame: _Frame) -> str:
        fn = _kw(call, "lr_lambda") or (_positional(call, 1) if call.args else None)
        if type(fn) is cst.Name:
            found = frame.local_funcs.get(fn.value) or (frame.unit.functions.get(fn.value))
            if found is not None:
                return frame.unit.text(found)
        return ""
