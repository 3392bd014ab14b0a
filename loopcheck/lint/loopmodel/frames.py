"""The builder's per-call state: the scope being walked, and the values (dicts, tuples) it tracks."""

from __future__ import annotations

import libcst as cst

from loopcheck.lint.loopmodel.facts import CallSite
from loopcheck.lint.loopmodel.units import _Class, _Unit


class _Frame:
    """One function activation: its file, local names, and what encloses it."""

    __slots__ = ("unit", "env", "cls", "via", "depth", "local_funcs", "no_grad", "autocast",
                 "grad_conditional", "returns", "stack", "name", "forwarded", "self_cls", "synced", "branches", "rebound",
                 "scaled")

    def __init__(self, unit: _Unit, env: dict[str, str] | None = None, cls: _Class | None = None,
                 via: tuple[CallSite, ...] = (), depth: int = 0, stack: tuple = (), name: str = "<module>",
                 self_cls: _Class | None = None) -> None:
        self.unit = unit
        self.env = env if env is not None else {}
        self.cls = cls  # the class whose method is walked (`super()` starts after it)
        # the class of `self` (a subclass when an inherited method runs on its instance):
        # `self.method()` resolves from here, so a base class's call reaches the override
        self.self_cls = self_cls if self_cls is not None else cls
        # inside `with accelerator.accumulate(model):` the test that lets a prepared optimizer act
        # (`accelerator.sync_gradients`) and the networks handed to it; else None
        self.synced: tuple[str, frozenset[str]] | None = None
        self.via = via
        self.depth = depth
        self.local_funcs: dict[str, cst.FunctionDef] = {}
        self.no_grad = False
        self.autocast = False
        self.grad_conditional = False
        self.returns: list["_Value"] = []
        self.stack = stack
        self.name = name
        # `def save_on_master(*args, **kwargs)`: the caller's frame, its call, and the arguments
        # that `*args` / `**kwargs` received, for a call that passes them on
        self.forwarded: tuple["_Frame", cst.Call, list[cst.Arg]] | None = None
        self.branches = 0  # branches of this function's `if`s being walked (tests not folded)
        # dicts bound in such a branch over what the name held before (None: not a known dict),
        # merged with it once the `if` is left
        self.rebound: list[tuple[str, "_Dict | None"]] = []
        # local names holding a loss a GradScaler scaled (`loss = scaler.scale(loss)`): the scaler,
        # and whether every path to here scaled it (False: assigned in a branch of an `if`)
        self.scaled: dict[str, tuple[str | None, bool]] = {}

    def carry(self, caller: "_Frame") -> None:
        """The caller's grad mode, autocast and accumulation context hold in this call too."""
        self.no_grad, self.autocast, self.grad_conditional = caller.no_grad, caller.autocast, caller.grad_conditional
        self.synced = caller.synced


class _Dict:
    """What is known about a dict being built for torch.save."""

    __slots__ = ("keys", "values", "owners", "unit", "computed")

    def __init__(self, unit: _Unit) -> None:
        self.keys: set[str] | None = set()
        self.values: dict[str, cst.BaseExpression] = {}
        self.owners: set[str] = set()  # objects whose state_dict() is a value (resolved where it was added)
        self.unit = unit
        self.computed = False  # an entry's key is computed (`{**ckpt, f"optim{i}": ...}`): what it holds is not known

    def copy(self) -> "_Dict":
        d = _Dict(self.unit)
        d.keys = set(self.keys) if self.keys is not None else None
        d.values = dict(self.values)
        d.owners = set(self.owners)
        d.computed = self.computed
        return d

    def merge(self, other: "_Dict") -> None:
        self.owners |= other.owners
        self.computed = self.computed or other.computed
        if other.keys is None or self.keys is None:
            self.keys = None
        else:
            self.keys |= other.keys
            self.values.update(other.values)


class _Value:
    """What an expression evaluates to, as far as roles go (for returns and arguments)."""

    __slots__ = ("canon", "elems", "dict", "divided", "built")

    def __init__(self, canon: str | None = None, elems: list["_Value"] | None = None,
                 dict_: _Dict | None = None, divided: bool | None = False,
                 built: "tuple[cst.Call, _Frame] | None" = None) -> None:
        self.canon = canon
        self.elems = elems
        self.dict = dict_
        self.divided = divided
        self.built = built  # a call that may construct the object (`return torch.optim.AdamW(...)`), in its frame
