"""What a network class of the project does in either mode, as its source shows: whether it
computes the same in train and eval mode, and whether its forward turns recording off itself.

`model.train()` and `model.eval()` change what dropout and batch statistics do, and what code that
reads `self.training` does; a network with none of them (Linear, Conv and activation layers only)
runs the same in both. Proving that takes the class's whole source, that of its project base
classes, and of the project classes and functions it builds its layers with: any layer the source
does not show (a library model, a constructor handed in as an argument, a module passed to
`__init__` and kept) leaves it unproven.
"""

from __future__ import annotations

import builtins
import re

import libcst as cst

from loopcheck.lint.loopmodel.nodes import (
    NO_GRAD_WORDS, _dotted, _feeds_back, _target_names, returns_by_grad_mode, stops_recording_with,
)
from loopcheck.lint.loopmodel.units import _Class, _Unit
from loopcheck.lint.syntax import walk

# names that behave differently in train and eval mode (layers and their functional forms; RReLU
# draws its slope at random and drop-path / stochastic depth skips blocks only in training)
_MODE_DEPENDENT = re.compile(r"dropout|drop_?path|stochastic_?depth|batch_?norm|instance_?norm|rrelu", re.I)
# layers whose dropout argument is 0 unless given
_DROPOUT_ARGUMENT = {"RNN": 5, "LSTM": 5, "GRU": 5, "MultiheadAttention": 2}  # -> its position
# layers whose dropout argument defaults to 0.1
_DROPOUT_BY_DEFAULT = frozenset({"Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer"})
# torch functions that hand back a module the source does not show
_FOREIGN_TORCH = re.compile(r"^torch\.(hub\.|load$|jit\.load$|package\.)")
# containers that hold the modules they are given
_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict", "append", "extend", "add_module", "insert",
                         "register_module", "update"})
_BUILTINS = frozenset(dir(builtins))


def mode_free(cls: _Class) -> bool:
    """Whether the source shows that `cls` runs the same in train and eval mode."""
    return _Scan().of_class(cls)


def stops_recording(cls: _Class) -> bool:
    """Whether the class's `forward` hands back, on some path, what it computed with recording
    off: it is decorated with `torch.no_grad()` / `inference_mode()`, a `return` of it lies inside
    such a `with`, or it returns a name bound inside one (`elif mode == "inference": with
    torch.no_grad(): fake = self.generate(...)` then `return fake`). A forward that only runs a
    part under `no_grad` (a frozen backbone before a trained head) records the rest."""
    found = cls.method("forward") or cls.method("__call__")  # a plain class called like a network
    if found is None:
        return False
    fdef, owner = found
    text = owner.unit.text
    if any(w in text(d.decorator) for d in fdef.decorators for w in NO_GRAD_WORDS):
        return True
    if returns_by_grad_mode(fdef, text)[1] > 0:
        return True
    bound_off: set[str] = set()
    for node, _ in walk(fdef.body):
        if type(node) is cst.With and stops_recording_with(node, text):
            bound_off.update(n for inner, _ in walk(node.body) if type(inner) is cst.Assign
                             for t in inner.targets for n in _target_names(t.target))
    return bool(bound_off) and any(
        type(node) is cst.Return and node.value is not None and bound_off & set(_target_names(node.value))
        for node, _ in walk(fdef.body))  # `return fake`, `return z, c`


def generates(cls: _Class) -> bool:
    """Whether the class's `forward` (or `__call__`) produces its output step by step, each step's
    call reading what the previous one produced (a diffusion sampler's `for t in
    reversed(range(T)): x_t = ... self.p_mean_variance(x_t, t) ...`): run with recording on, it
    keeps the graph of every step."""
    found = cls.method("forward") or cls.method("__call__")
    if found is None:
        return False
    fdef, owner = found
    text = owner.unit.text
    return any(type(node) is cst.For and _counts_steps(node, text) and _feeds_back(node.body)
               for node, _ in walk(fdef.body))


def _counts_steps(loop: cst.For, text) -> bool:
    """A loop over a number of steps the network is given (`reversed(range(self.T))`), not over
    its layers (`range(len(self.blocks))`, `self.blocks[i](x)`) nor a few fixed rounds
    (`range(3)` of message passing)."""
    over = text(loop.iter)
    if "range(" not in over or "len(" in over or not re.search(r"range\([^)]*[A-Za-z_]", over):
        return False
    index = loop.target.value if type(loop.target) is cst.Name else None
    # a layer picked by the index and called (`self.blocks[i](x)`, `self.up[-i - 1](x)`)
    return index is None or not re.search(rf"\[[^\]]*\b{re.escape(index)}\b[^\]]*\]\s*\(", text(loop.body))


class _Scan:
    def __init__(self) -> None:
        self.seen: set[int] = set()

    def of_class(self, cls: _Class) -> bool:
        if id(cls) in self.seen:
            return True
        self.seen.add(id(cls))
        cls.read_whole()
        unit = cls.unit
        for base in cls.bases:
            found = unit.lookup_class(base)
            if found is not None:
                if not self.of_class(found):
                    return False
            elif unit.qualify_dotted(base) not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
                return False  # a library base class: its code is not read
        init = cls.methods.get("__init__")
        if init is not None and _keeps_arguments(init, cls.node):
            return False
        # a library call in `forward` builds no layer of the network (one made there starts in
        # train mode whatever the network's mode): only `__init__` and the rest must show theirs
        return all(self.of_code(stmt, unit, in_forward=type(stmt) is cst.FunctionDef and stmt.name.value == "forward")
                   for stmt in cls.node.body.body)

    def of_function(self, fdef: cst.FunctionDef, unit: _Unit) -> bool:
        if id(fdef) in self.seen:
            return True
        self.seen.add(id(fdef))
        return self.of_code(fdef, unit)

    def of_code(self, root: cst.CSTNode, unit: _Unit, in_forward: bool = False) -> bool:
        for node, _ in walk(root):
            kind = type(node)
            if kind is cst.Name and _MODE_DEPENDENT.search(node.value):
                return False  # `norm_layer = nn.BatchNorm2d`, `p_dropout`, `F.dropout(...)`
            if kind is cst.Attribute and node.attr.value == "training":
                return False  # code that branches on the mode
            if kind is cst.Call and not self.of_call(node, unit, in_forward):
                return False
        return True

    def of_call(self, call: cst.Call, unit: _Unit, in_forward: bool = False) -> bool:
        dotted = _dotted(call.func)
        if dotted is None:
            return True  # a call on a call's result or an item (`self.blocks[i](x)`)
        root, _, rest = dotted.partition(".")
        last = dotted.rsplit(".", 1)[-1]
        if last in _DROPOUT_ARGUMENT:
            return _no_dropout(call, _DROPOUT_ARGUMENT[last], default_zero=True)
        if last in _DROPOUT_BY_DEFAULT:
            return _no_dropout(call, 99, default_zero=False)
        if root in ("self", "super", "cls"):
            return True  # the class's own methods and attributes are part of the scanned source
        qualified = unit.qualify_dotted(dotted)
        if qualified.startswith("torch.") and not _FOREIGN_TORCH.search(qualified):
            return True
        found_class = unit.lookup_class(dotted)
        if found_class is not None:
            return self.of_class(found_class)
        found = unit.lookup_function(dotted)
        if found is not None:
            return self.of_function(*found)
        if root in unit.imports:
            return in_forward  # a library's function or class: what it builds is not shown
        if not rest:
            # a builtin, else a name bound in the code: a constructor handed in (`block(...)`)
            return root in _BUILTINS
        return True  # a method of a local value (`x.view(...)`, `layers.append(...)`)


def _no_dropout(call: cst.Call, position: int, default_zero: bool) -> bool:
    """The call's `dropout` argument is absent with a default of 0, or a literal 0."""
    value = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "dropout"), None)
    positional = [a for a in call.args if a.keyword is None]
    if value is None and len(positional) > position:
        value = positional[position].value
    if value is None:
        return default_zero
    if type(value) not in (cst.Integer, cst.Float):
        return False
    try:
        return float(value.value.replace("_", "")) == 0.0
    except ValueError:  # 0x10
        return False


def _keeps_arguments(init: cst.FunctionDef, body: cst.ClassDef) -> bool:
    """`__init__` keeps a module it is given (`self.backbone = backbone`, called later as
    `self.backbone(x)`; `nn.Sequential(*layers)`): a layer the class's source does not show."""
    params = {p.name.value for p in (*init.params.posonly_params, *init.params.params, *init.params.kwonly_params)}
    params.discard("self")
    for star in (init.params.star_arg, init.params.star_kwarg):
        if type(star) is cst.Param:
            params.add(star.name.value)
    if not params:
        return False
    kept: set[str] = set()  # `self.x` holding an argument
    for node, _ in walk(init.body):
        if type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value in params:
            kept.update(_dotted(t.target) or "" for t in node.targets if type(t.target) is cst.Attribute)
        if type(node) is cst.Call:
            last = (_dotted(node.func) or "").rsplit(".", 1)[-1]
            if last in _CONTAINERS and any(type(a.value) is cst.Name and a.value.value in params for a in node.args):
                return True
            if last == "setattr" and len(node.args) == 3 and type(node.args[2].value) is cst.Name \
                    and node.args[2].value.value in params:
                return True
    return bool(kept) and any(type(n) is cst.Call and _dotted(n.func) in kept for n, _ in walk(body))
