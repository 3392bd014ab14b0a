"""Files a project saves itself: the file name each `torch.save` of the project writes (Fabric's
and accelerate's `save` too), and whether what it writes is tensors and plain values only.

A path is read as *templates*: its literal text with every part that is not known blanked to
`{}` (`os.path.join(out_dir, f"iter-{step:06d}.pth")` -> `{}/iter-{}.pth`). Names are followed
to what their function binds them to, a parameter to its default and to what the calls in its
module pass for it (`save_state(folder, "model.pt", sd)` names the file a helper's
`torch.save(sd, folder / fname)` writes). The same reading of a `torch.load` path says whether
the file loaded is one the project writes itself: both name the same file (a literal name, not
only a suffix), `iter-{}.pth` written and `iter-000500.pth` read included.

Files are read with the standard `ast` parser, only those whose text holds the word `save`, each
once per version of its text; nothing here needs libcst.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
from dataclasses import dataclass
from itertools import islice, product
from pathlib import Path
from typing import Any, Iterable

from loopcheck.lint.loopmodel.torch_api import SAVE_RECEIVERS
from loopcheck.lint.summary import ast_tree, content_digest

_HOLE = "{}"
_MAX = 24  # templates kept per expression
_DEPTH = 5  # names, parameters and call sites followed per expression


@dataclass(frozen=True)
class _Element:
    """The `index`-th element of what `source` holds (`a, b = source`)."""

    source: ast.AST
    index: int


@dataclass(frozen=True)
class SavedFile:
    """One save of the project."""

    path: str  # the file holding the save
    line: int
    names: frozenset[str]  # file-name templates (`iter-{}.pth`), informative ones only
    tensors_only: bool  # state dicts, tensors, plain containers and values (no module, no namespace)
    keys: frozenset[str] | None = None  # the literal keys of the dict saved, when it is one
    suffixes: frozenset[str] = frozenset()  # what its path can end with (`.pth`, `.cleanrl_model`)
    owners: frozenset[str] = frozenset()  # builders of the models whose state dicts it holds


def file_names(templates: Iterable[str]) -> set[str]:
    """The informative file names of path templates: the last part when its stem has a literal
    letter or digit (`iter-{}.pth`), else the folder above with it (`cache/{}.pt`)."""
    out = set()
    for template in templates:
        parts = template.replace("\\", "/").rstrip("/").split("/")
        name = parts[-1]
        stem = os.path.splitext(name)[0] if not name.startswith(".") else ""
        if re.search(r"[A-Za-z0-9]", stem.replace(_HOLE, "")):
            out.add(name)
        elif len(parts) > 1 and re.search(r"[A-Za-z0-9]", parts[-2].replace(_HOLE, "")):
            out.add(f"{parts[-2]}/{name}")
    return out


def _suffixes(templates: Iterable[str]) -> frozenset[str]:
    """The file-name suffixes of path templates (`.pth`; none for `{}`)."""
    found = (os.path.splitext(t.replace("\\", "/").rsplit("/", 1)[-1])[1] for t in templates)
    return frozenset(x for x in found if x and _HOLE not in x and re.fullmatch(r"\.\w+", x))


def same_file(loaded: str, saved: str) -> bool:
    """Whether two file-name templates can name the same file."""
    if loaded == saved:
        return True
    return bool(_pattern(saved).fullmatch(loaded) or _pattern(loaded).fullmatch(saved))


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile(".+".join(re.escape(part) for part in template.split(_HOLE)))


# ---- reading one module -------------------------------------------------------------------------


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


_SCOPE_KINDS = frozenset(_SCOPES)
_DEFINITION_KINDS = frozenset({*_FUNCTIONS, ast.ClassDef})
_BINDING_KINDS = frozenset({ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension, ast.withitem})


def _ast_fields(kind: type) -> tuple[str, ...]:
    """The fields of an `ast` node type that may hold nodes the module walk enters (a name's
    load or store context left out: no question starts there)."""
    found = _AST_FIELDS[kind] = tuple(f for f in getattr(kind, "_fields", ()) if f != "ctx")
    return found


_AST_FIELDS: dict[type, tuple[str, ...]] = {}
# nodes with no child the walk enters and no fact of their own: their parent is noted, and they
# are not visited (names and constants are most of a module's nodes)
_LEAF_KINDS = frozenset({ast.Name, ast.Constant, *ast.operator.__subclasses__(), *ast.unaryop.__subclasses__(),
                         *ast.cmpop.__subclasses__(), *ast.boolop.__subclasses__()})


class _Module:
    """Scopes, bindings and calls of one `ast` module, enough to follow a path's names."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parent: dict[int, ast.AST] = {}
        self.binds: dict[tuple[int, str], list[ast.AST | None]] = {}  # (scope, name) -> values
        self.calls: dict[str, list[ast.Call]] = {}  # callee's last name -> calls
        self.torch_names = {"torch"}  # what `torch` is imported as (`import torch as th`)
        self.defined: set[str] = set()  # classes and functions defined here
        self.imported: dict[str, str] = {}  # name -> the (last part of the) module it is imported from
        self.modules: set[str] = set()  # names of imported modules
        self._names: dict[int, dict[str, list[ast.Name]]] = {}  # id(scope) -> name -> its Name nodes
        parent, leaves = self.parent, _LEAF_KINDS
        stack: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
        while stack:
            node, scope = stack.pop()
            kind = type(node)
            inner = node if kind in _SCOPE_KINDS else scope
            if kind in _DEFINITION_KINDS:
                self.defined.add(node.name)
            elif kind is ast.Import:
                self.torch_names.update(a.asname for a in node.names if a.name == "torch" and a.asname)
                self.modules.update((a.asname or a.name).rsplit(".", 1)[-1] for a in node.names)
            elif kind is ast.ImportFrom:
                for a in node.names:  # `from utils import save_checkpoint`, `from . import ckpt`
                    self.imported[a.asname or a.name] = (node.module or "").rsplit(".", 1)[-1]
                    self.modules.add(a.asname or a.name)
            elif kind is ast.Call:
                last = _last(node.func)
                if last:
                    self.calls.setdefault(last, []).append(node)
            elif kind in _BINDING_KINDS:
                self._note_binding(node, scope)
            for field in _AST_FIELDS.get(kind) or _ast_fields(kind):
                value = getattr(node, field, None)
                if isinstance(value, ast.AST):
                    parent[id(value)] = node
                    if type(value) not in leaves:
                        stack.append((value, inner))
                elif type(value) is list:
                    for child in value:
                        if isinstance(child, ast.AST):
                            parent[id(child)] = node
                            if type(child) not in leaves:
                                stack.append((child, inner))

    def names_in(self, scope: ast.AST) -> dict[str, list[ast.Name]]:
        """The names read or written anywhere under `scope` (nested scopes too), by name: found
        in one walk per scope, however many loads in it ask."""
        found = self._names.get(id(scope))
        if found is None:
            found = self._names[id(scope)] = {}
            for node in ast.walk(scope):
                if type(node) is ast.Name:
                    found.setdefault(node.id, []).append(node)
        return found

    def _note_binding(self, node: ast.AST, scope: ast.AST) -> None:
        targets: list[tuple[ast.AST, ast.AST | None]] = []
        if isinstance(node, ast.Assign):
            targets = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            targets = [(node.target, node.value)]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [(node.target, None)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            opened = node.context_expr
            # `with open(path, "wb") as f:` -> f names the file at `path`
            value = opened.args[0] if isinstance(opened, ast.Call) and _last(opened.func) == "open" and opened.args else None
            targets = [(node.optional_vars, value)]
        for target, value in targets:
            if isinstance(target, ast.Name):
                self.binds.setdefault((id(scope), target.id), []).append(value)
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                owner = self.class_of(scope)
                if owner is not None:
                    self.binds.setdefault((id(owner), target.attr), []).append(value)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for i, element in enumerate(target.elts):
                    if isinstance(element, ast.Name):
                        part = _Element(value, i) if value is not None else None
                        self.binds.setdefault((id(scope), element.id), []).append(part)  # type: ignore[arg-type]

    def scope_of(self, node: ast.AST) -> ast.AST:
        current = self.parent.get(id(node))
        while current is not None and not isinstance(current, _SCOPES):
            current = self.parent.get(id(current))
        return current if current is not None else self.tree

    def class_of(self, scope: ast.AST) -> ast.ClassDef | None:
        """The class a method (or a class body) belongs to."""
        if isinstance(scope, ast.ClassDef):
            return scope
        owner = self.parent.get(id(scope)) if isinstance(scope, _FUNCTIONS) else None
        return owner if isinstance(owner, ast.ClassDef) else None

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        scope = self.scope_of(node)
        return scope if isinstance(scope, _FUNCTIONS) else None

    # -- what a name holds ----------------------------------------------------------------------

    def values(self, node: ast.Name | ast.Attribute, depth: int = 0) -> list[ast.AST | None]:
        """`_values`, with the elements of unpacked tuples picked out (`a, b = pair`)."""
        out: list[ast.AST | None] = []
        for value in self._values(node):
            out += self._pick(value, depth) if isinstance(value, _Element) else [value]
        return out

    def _pick(self, element: "_Element", depth: int) -> list[ast.AST | None]:
        source = element.source
        if isinstance(source, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in source.elts):
            return [source.elts[element.index]] if element.index < len(source.elts) else [None]
        if isinstance(source, (ast.Name, ast.Attribute)) and depth < 3:
            out: list[ast.AST | None] = []
            for value in self.values(source, depth + 1):
                out += self._pick(_Element(value, element.index), depth + 1) if value is not None else [None]
            return out
        return [None]

    def _values(self, node: ast.Name | ast.Attribute) -> list[ast.AST | None]:
        """What a name (or `self.x`) can hold: each binding in its function, its parameter's
        default and each argument the module's calls pass for it, else its module-level bindings
        (`self.x`: its class attribute and what the class's methods assign); None stands for a
        value not known."""
        scope = self.scope_of(node)
        if isinstance(node, ast.Attribute):
            owner = self.class_of(scope)
            if owner is None or not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                return [None]
            return list(self.binds.get((id(owner), node.attr), [])) or [None]
        found = list(self.binds.get((id(scope), node.id), []))
        if isinstance(scope, _FUNCTIONS):
            param = _parameter(scope, node.id)
            if param is not None:
                index, default = param
                passed = self._passed(scope, index, node.id)
                found += [default, *passed] if default is not None else passed or [None]
        if not found and scope is not self.tree:
            found = list(self.binds.get((id(self.tree), node.id), []))
        return found or [None]

    def _passed(self, func: ast.FunctionDef | ast.AsyncFunctionDef, index: int | None, name: str) -> list[ast.AST | None]:
        out: list[ast.AST | None] = []
        method = _is_method(func)
        for call in self.calls.get(func.name, []):
            value = argument(call, method, index, name)
            if value is not None:
                out.append(value)
        return out


def argument(call: ast.Call, method: bool, index: int | None, name: str) -> ast.AST | None:
    """What `call` passes for parameter `name` (at `index`) of a function (`method`: one whose
    first parameter is `self` or `cls`, which a call through an attribute does not pass)."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    value = next((k.value for k in call.keywords if k.arg == name), None)
    if value is None and index is not None:
        position = index - 1 if method and isinstance(call.func, ast.Attribute) else index
        if 0 <= position < len(call.args):
            value = call.args[position]
    return value


def _is_method(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return bool(func.args.args) and func.args.args[0].arg in ("self", "cls")


def _parameter(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> tuple[int | None, ast.AST | None] | None:
    """(position, default) of a parameter, None when the function has no such parameter."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    for i, arg in enumerate(positional):
        if arg.arg == name:
            offset = len(positional) - len(args.defaults)
            return i, args.defaults[i - offset] if i >= offset else None
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if arg.arg == name:
            return None, default
    return None


def _last(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


# ---- path templates -----------------------------------------------------------------------------

# calls whose result is the path their arguments join (`os.path.join`, `Path(...)`, `str(p)`)
_JOINS = frozenset({"join", "joinpath", "Path", "PurePath", "PosixPath", "str", "fspath", "abspath", "realpath",
                    "expanduser", "normpath", "resolve", "absolute"})


def templates(module: _Module, node: ast.AST | None, depth: int = 0) -> set[str]:
    """The path templates an expression can hold."""
    if node is None or depth > _DEPTH:
        return {_HOLE}
    if isinstance(node, ast.Constant):
        return {node.value} if isinstance(node.value, str) else {_HOLE}
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else _HOLE for v in node.values]
        return {"".join(parts)}
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Div):
            return _combine(templates(module, node.left, depth + 1), templates(module, node.right, depth + 1), "/")
        if isinstance(node.op, ast.Add):
            return _combine(templates(module, node.left, depth + 1), templates(module, node.right, depth + 1), "")
        if isinstance(node.op, ast.Mod):
            return {re.sub(r"%[-#0 +.\d]*[a-zA-Z]", _HOLE, t) for t in templates(module, node.left, depth + 1)}
        return {_HOLE}
    if isinstance(node, ast.Call):
        last = _last(node.func)
        if last == "format" and isinstance(node.func, ast.Attribute):
            return {re.sub(r"\{[^{}]*\}", _HOLE, t) for t in templates(module, node.func.value, depth + 1)}
        if last in _JOINS or "path" in last.lower():
            found = {""}
            if isinstance(node.func, ast.Attribute) and last in ("joinpath", "resolve", "absolute"):
                found = templates(module, node.func.value, depth + 1)
            for arg in node.args:
                found = _combine(found, templates(module, arg, depth + 1), "/")
            return found - {""} or {_HOLE}
        named = next((k.value for k in node.keywords if k.arg == "filename"), None)  # a hub download
        return templates(module, named, depth + 1) if named is not None else {_HOLE}
    if isinstance(node, (ast.Name, ast.Attribute)):
        found: set[str] = set()
        for value in module.values(node):
            found |= templates(module, value, depth + 1)
        return set(islice(found, _MAX)) or {_HOLE}
    return {_HOLE}


def _combine(left: set[str], right: set[str], sep: str) -> set[str]:
    out = set()
    for a, b in islice(product(left, right), _MAX):
        out.add(b if sep and b.startswith("/") else (f"{a}{sep}{b}" if a else b))
    return out


# ---- what is saved ------------------------------------------------------------------------------

# names of what pickles as a class rather than tensors: modules, optimizers, option namespaces
_PICKLED = frozenset({
    "model", "models", "net", "network", "module", "optimizer", "optim", "opt", "scheduler", "sched", "encoder",
    "decoder", "discriminator", "generator", "ema", "scaler", "tokenizer", "args", "config", "cfg", "hparams",
    "trainer", "self", "engine", "pipeline", "pipe", "learner", "agent", "policy", "critic", "actor",
})
_HOLDS_STATE = frozenset({"dict", "state", "states", "sd", "weights", "params", "data", "tensor", "tensors"})
_PLAIN_CALLS = frozenset({"dict", "OrderedDict", "list", "tuple", "defaultdict", "cpu", "detach", "clone", "item",
                          "tolist", "to", "half", "float", "contiguous", "stack", "cat", "tensor", "zeros", "ones"})


def _tokens(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [t for t in re.split(r"[^a-z0-9]+", spaced.lower()) if t]


def _pickles_class(name: str) -> bool:
    """`model`, `ema_model`, `netG`, `args`: spelled like an object that pickles as its class
    (`model_state`, `trainer_state` are named after what they hold: plain)."""
    tokens = _tokens(name.rsplit(".", 1)[-1])
    if not tokens or set(tokens) & _HOLDS_STATE:
        return False
    return tokens[-1] in _PICKLED or (len(tokens) == 2 and tokens[0] in _PICKLED and len(tokens[1]) <= 2)


def tensors_only(module: _Module, node: ast.AST | None, depth: int = 0) -> bool:
    """Whether a saved object holds state dicts, tensors and plain values only (as far as can be
    told: a name is judged by what it is bound to, else by how it is spelled)."""
    if node is None or depth > _DEPTH:
        return True
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Dict):
        return all(tensors_only(module, v, depth + 1) for v in node.values)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(tensors_only(module, v, depth + 1) for v in node.elts)
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        return tensors_only(module, node.elt, depth + 1)
    if isinstance(node, ast.DictComp):
        return tensors_only(module, node.value, depth + 1)
    if isinstance(node, ast.Call):
        last = _last(node.func)
        if last in ("state_dict", "get_rng_state", "getstate"):
            return True
        if last in ("deepcopy", "copy") and node.args:
            return tensors_only(module, node.args[0], depth + 1)
        if last in _PLAIN_CALLS:
            head = node.func.value if isinstance(node.func, ast.Attribute) else None
            inner = [head] if head is not None else []
            return all(tensors_only(module, a, depth + 1) for a in [*inner, *node.args, *(k.value for k in node.keywords)])
        if last.endswith("Tensor") or last.startswith("from_numpy"):
            return True  # `torch.ByteTensor(...)`
        dotted = _dotted(node.func)
        if dotted.split(".", 1)[0] in ("np", "numpy") or last == "numpy":
            return False  # NumPy arrays and RNG states unpickle NumPy classes the 2.6 default refuses
        if "models." in f"{dotted}." or last in ("create_model", "from_pretrained", "from_config", "build_model"):
            return False  # a model factory (`torchvision.models.resnet18(...)`, `timm.create_model`)
        if last[:1].isupper() or _pickles_class(last):
            return False  # a constructed object, a model built by a helper
        return True
    if isinstance(node, ast.Name):
        if _pickles_class(node.id):
            return False
        return all(value is None or tensors_only(module, value, depth + 1) for value in module.values(node))
    if isinstance(node, ast.Attribute):
        return not _pickles_class(node.attr)
    if isinstance(node, ast.IfExp):
        return tensors_only(module, node.body, depth + 1) and tensors_only(module, node.orelse, depth + 1)
    if isinstance(node, (ast.Subscript, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp)):
        return True
    return False


# calls that hand back the module they are called on (`Net().to(device)`)
_SAME_MODULE = frozenset({"to", "cuda", "cpu", "eval", "train", "half", "float", "double", "bfloat16",
                          "requires_grad_"})


def builders(module: _Module, node: ast.AST | None, depth: int = 0) -> set[str]:
    """The classes or factories a model is built by (`Generator(...).to(device)` -> Generator)."""
    if node is None or depth > _DEPTH:
        return set()
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _SAME_MODULE:
            return builders(module, func.value, depth + 1)
        last = _last(func)
        return {last} if last else set()
    if isinstance(node, ast.Attribute) and node.attr in ("module", "_orig_mod"):
        return builders(module, node.value, depth + 1)
    if isinstance(node, ast.IfExp):
        return builders(module, node.body, depth + 1) | builders(module, node.orelse, depth + 1)
    if isinstance(node, (ast.Name, ast.Attribute)):
        found: set[str] = set()
        for value in module.values(node):
            found |= builders(module, value, depth + 1)
        return found
    return set()


def state_owners(module: _Module, node: ast.AST | None, depth: int = 0) -> set[str]:
    """The builders of the models whose `state_dict()` a saved object holds."""
    if node is None or depth > _DEPTH:
        return set()
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict":
        return builders(module, node.func.value)
    if isinstance(node, ast.Dict):
        return set().union(*(state_owners(module, v, depth + 1) for v in node.values))
    if isinstance(node, ast.Name):
        return set().union(*(state_owners(module, v, depth + 1) for v in module.values(node)))
    return set()


# ---- saves and loads of a module ----------------------------------------------------------------


def dict_keys(module: _Module, node: ast.AST | None, depth: int = 0) -> frozenset[str] | None:
    """The literal keys of a dict expression (a name followed to its bindings); None: unknown."""
    if node is None or depth > _DEPTH:
        return None
    if isinstance(node, ast.Dict):
        if any(k is None or not (isinstance(k, ast.Constant) and isinstance(k.value, str)) for k in node.keys):
            return None
        return frozenset(k.value for k in node.keys)  # type: ignore[union-attr]
    if isinstance(node, ast.Call) and _last(node.func) in ("dict", "OrderedDict") and not node.args:
        return frozenset(k.arg for k in node.keywords if k.arg) if all(k.arg for k in node.keywords) else None
    if isinstance(node, ast.Name):
        found = [dict_keys(module, v, depth + 1) for v in module.values(node)]
        if not found or any(f is None for f in found):
            return None
        return frozenset().union(*found)  # type: ignore[arg-type]
    return None


def _save_call(call: ast.Call, torch_names: set[str]) -> tuple[ast.AST | None, ast.AST | None] | None:
    """(object, path) of a save call: `torch.save(obj, f)`, `fabric.save(path, state)`,
    `accelerator.save(obj, f)`; None for any other call."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != "save":
        return None
    receiver = _dotted(func.value)
    if receiver not in torch_names and receiver not in SAVE_RECEIVERS:
        return None
    fabric = receiver.rsplit(".", 1)[-1] == "fabric"
    names = ("path", "state") if fabric else ("obj", "f")
    args: list[ast.AST | None] = [*call.args[:2], None, None][:2]
    for k in call.keywords:
        if k.arg in names:
            args[names.index(k.arg)] = k.value
    path, obj = (args[0], args[1]) if fabric else (args[1], args[0])
    return obj, path


@dataclass(frozen=True)
class _Helper:
    """A project function that saves what it is given (`save_checkpoint(state, filename)`)."""

    name: str
    method: bool  # its first parameter is `self` or `cls`
    obj: tuple[int | None, str] | None  # the parameter holding the saved object, if one does
    saved: SavedFile  # the save inside it


def _direct_saves(module: _Module, path: str) -> tuple[list[SavedFile], list[_Helper]]:
    saves, helpers = [], []
    for call in module.calls.get("save", []):
        found = _save_call(call, module.torch_names)
        if found is None:
            continue
        obj, target = found
        converted = isinstance(call.func, ast.Attribute) and _dotted(call.func.value).rsplit(".", 1)[-1] == "fabric"
        paths = templates(module, target)
        saved = SavedFile(
            path, call.lineno, frozenset(file_names(paths)), converted or tensors_only(module, obj),
            dict_keys(module, obj), _suffixes(paths), frozenset(state_owners(module, obj)),
        )
        saves.append(saved)
        func = module.function_of(call)
        if func is not None:
            params = _parameters(func)
            used = _names_in(module, target) | _names_in(module, obj)
            if used & set(params):
                own = obj.id if isinstance(obj, ast.Name) and obj.id in params else None
                helpers.append(_Helper(func.name, _is_method(func), (params[own], own) if own else None, saved))
    return saves, helpers


def _parameters(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, int | None]:
    positional = [*func.args.posonlyargs, *func.args.args]
    found: dict[str, int | None] = {a.arg: i for i, a in enumerate(positional)}
    found.update((a.arg, None) for a in func.args.kwonlyargs)
    return found


def _names_in(module: _Module, node: ast.AST | None) -> set[str]:
    """The names an expression reads, and those its names' bindings in the function read."""
    if node is None:
        return set()
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    scope = module.scope_of(node)
    for name in list(names):
        for value in module.binds.get((id(scope), name), []):
            value = value.source if isinstance(value, _Element) else value
            if value is not None:
                names |= {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    return names


def _calls_helper(module: _Module, path: str, call: ast.Call, helper: _Helper) -> bool:
    """Whether `call` calls the project save helper: by its name where it is defined or imported
    from its module, as `self.helper(...)` in its own module, or as `module.helper(...)`."""
    home = Path(helper.saved.path).stem
    same = os.path.realpath(path) == os.path.realpath(helper.saved.path)
    func = call.func
    if isinstance(func, ast.Name):
        return same or module.imported.get(func.id) in (home, "") or (home == "__init__" and func.id in module.imported)
    receiver = _dotted(func.value) if isinstance(func, ast.Attribute) else ""
    if receiver in ("self", "cls"):
        return same
    return receiver.rsplit(".", 1)[-1] == home and home in module.modules


def _helper_calls(module: _Module, path: str, helpers: dict[str, list[_Helper]]) -> list[SavedFile]:
    """The saves made by calling a project save helper: the file names its arguments give, and
    what the argument it saves holds."""
    out = []
    for name, found in helpers.items():
        for call in module.calls.get(name, []):
            for helper in found:
                if not _calls_helper(module, path, call, helper):
                    continue
                obj = argument(call, helper.method, *helper.obj) if helper.obj else None
                if helper.obj and obj is None:
                    continue  # what it saves is not known here
                paths = set()
                for arg in [*call.args, *(k.value for k in call.keywords)]:
                    if arg is not obj:
                        paths |= templates(module, arg)
                names = frozenset(file_names(paths)) | helper.saved.names
                suffixes = _suffixes(paths) | helper.saved.suffixes
                if helper.obj is None:
                    saved = SavedFile(path, call.lineno, names, helper.saved.tensors_only, helper.saved.keys,
                                      suffixes, helper.saved.owners)
                else:
                    saved = SavedFile(path, call.lineno, names, tensors_only(module, obj), dict_keys(module, obj),
                                      suffixes, frozenset(state_owners(module, obj)))
                out.append(saved)
    return out


# ---- the loads of a module ----------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """What a `load(...)` call of the linted file can be told apart by."""

    names: frozenset[str]  # file-name templates of its path
    suffixes: frozenset[str]  # the suffixes its path can end with
    keys: frozenset[str]  # keys read from what it returns (here, or where its function is called)
    returned_by: str  # the function returning the loaded object ('' when none does)
    receivers: frozenset[str] = frozenset()  # builders of the model whose `load_state_dict` takes it
    pretrained: bool = False  # its path is named like weights from elsewhere (`pretrained`, `name_or_path`)


def loads_in(module: _Module) -> dict[int, list[Load]]:
    """The `load(...)` calls of a module, by line."""
    out: dict[int, list[Load]] = {}
    for call in module.calls.get("load", []):
        target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "f"), None)
        if target is None:
            continue
        keys, returned = _keys_read(module, call)
        func = module.function_of(call)
        paths = templates(module, target)
        out.setdefault(call.lineno, []).append(Load(
            frozenset(file_names(paths)), _suffixes(paths), frozenset(keys),
            func.name if returned and func is not None else "", frozenset(_receivers(module, call)),
            bool(_ELSEWHERE.search(" ".join(sorted(_path_words(module, target))))),
        ))
    return out


# names of paths to weights that come from elsewhere (a hub, a download, a pretrained release)
_ELSEWHERE = re.compile(r"pretrained|name_or_path|\burl\b|_url|download|\bhub\b|_hub|hf_", re.I)


def _path_words(module: _Module, node: ast.AST) -> set[str]:
    """The names and attributes a path expression reads, with those its names are bound to."""
    words: set[str] = set()
    for part in [node, *(v for n in ast.walk(node) if isinstance(n, ast.Name) for v in module.values(n) if v is not None)]:
        words |= {n.id for n in ast.walk(part) if isinstance(n, ast.Name)}
        words |= {n.attr for n in ast.walk(part) if isinstance(n, ast.Attribute)}
    return words


def _receivers(module: _Module, load: ast.Call) -> set[str]:
    """Builders of the model `X.load_state_dict(torch.load(...))` loads into (also through one name
    or one key), and the function building it when that function returns it."""
    value: ast.AST = load
    parent = module.parent.get(id(value))
    if isinstance(parent, ast.Subscript) and parent.value is value:
        value, parent = parent, module.parent.get(id(parent))
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
        uses = module.names_in(module.scope_of(load)).get(name, [])
        consumers = [module.parent.get(id(n)) for n in uses]
        consumers = [module.parent.get(id(c)) if isinstance(c, ast.Subscript) else c for c in consumers]
    else:
        consumers = [parent]
    found: set[str] = set()
    for call in consumers:
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "load_state_dict":
            model = call.func.value
            found |= builders(module, model)
            func = module.function_of(load)
            returned = {_dotted(r.value) for r in ast.walk(func) if isinstance(r, ast.Return) and r.value is not None} if func else set()
            if func is not None and _dotted(model) in returned:
                found.add(func.name)
    return found


def _keys_read(module: _Module, value: ast.AST) -> tuple[set[str], bool]:
    """The literal keys read from a value (`ckpt["model"]`, `ckpt.get("step")`, `"ema" in ckpt`)
    where it is used, following one name it is bound to; and whether its function returns it."""
    keys: set[str] = set()
    parent = module.parent.get(id(value))
    key = _key_of(module, value)
    if key is not None:
        return {key}, False
    if isinstance(parent, ast.Return):
        return keys, True
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return keys, False
    name = parent.targets[0].id
    scope = module.scope_of(value)
    returned = False
    for node in module.names_in(scope).get(name, ()):
        if isinstance(node.ctx, ast.Load):
            key = _key_of(module, node)
            if key is not None:
                keys.add(key)
            elif isinstance(module.parent.get(id(node)), ast.Return):
                returned = True
    return keys, returned


def _key_of(module: _Module, node: ast.AST) -> str | None:
    parent = module.parent.get(id(node))
    if isinstance(parent, ast.Subscript) and parent.value is node:
        index = parent.slice
        return index.value if isinstance(index, ast.Constant) and isinstance(index.value, str) else None
    if isinstance(parent, ast.Attribute) and parent.attr in ("get", "pop"):
        call = module.parent.get(id(parent))
        if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
            return call.args[0].value if isinstance(call.args[0].value, str) else None
    if isinstance(parent, ast.Compare) and node in parent.comparators and isinstance(parent.left, ast.Constant):
        return parent.left.value if isinstance(parent.left.value, str) else None
    return None


def answer(project: Any, kind: str, path: str, arg: str) -> Any:
    """The answer today to a question an analysis asked of one project file (`Project.answer`):
    "keys_read" (the keys read from what each call to function `arg` returns in it, as sorted
    lists) or "defines" (whether it defines a class or function called `arg`)."""
    module = _module_at(project, path)
    if kind == "defines":
        return module is not None and arg in module.defined
    return [sorted(keys) for keys in caller_keys(module, arg)] if module is not None else []


def caller_keys(module: _Module, function: str) -> list[set[str]]:
    """The keys read from what each call to `function` returns, in one module."""
    return [keys for keys in (_keys_read(module, call)[0] for call in module.calls.get(function, [])) if keys]


def _reads_saved(keys: set[str], saved: frozenset[str]) -> bool:
    """Keys read back from a loaded dict are a training checkpoint's the project writes: at least
    half of them, two or more, one of them training state (the optimizer, the step). Weights or
    embeddings alone (`ckpt["model"]`, `data["string_to_param"]`) are laid out the same way in
    files others share."""
    from loopcheck.lint.rules._saves import TRAINING_STATE, key_item

    matched = keys & saved
    return (
        len(matched) >= max(2, (len(keys) + 1) // 2)
        and any(key_item(k, "state_dict") in TRAINING_STATE for k in matched)
    )


def _parse(source: bytes | str, path: str) -> _Module | None:
    tree = ast_tree(source)
    return _Module(tree) if tree is not None else None


# ---- the project --------------------------------------------------------------------------------

# suffixes too common to say whose file it is
_COMMON_SUFFIXES = frozenset({
    ".pt", ".pth", ".bin", ".ckpt", ".tar", ".pkl", ".pickle", ".model", ".safetensors", ".npz", ".npy", ".h5",
    ".zip", ".json", ".gz", ".data", ".state", ".params", ".weights", ".torch", ".th", ".dat", ".p", ".txt",
})


_MODULES: "dict[str, tuple[Any, _Module | None]]" = {}  # file -> (its stamp, its module)


def _module_at(project: Any, name: str, content: "_Content | None" = None) -> _Module | None:
    """The module of a project file, parsed once per version of its text (from `content` when
    the caller has read it)."""
    stamp = content.stamp if content is not None else project.stamp(name)  # an open buffer's version too
    cached = _MODULES.get(name)
    if cached is None or cached[0] != stamp:
        if len(_MODULES) > 4096:
            _MODULES.clear()
        if content is not None:
            data = content.data
        else:
            try:
                # what an analysis reading this module depends on is recorded where the module was
                # found (`Project.files_mentioning`: every part of it), or it is the file itself
                data = project.read(Path(name), noted=False)
            except OSError:
                return None
        cached = _MODULES[name] = (stamp, _parse(data, name))
    return cached[1]


@dataclass(frozen=True)
class _Content:
    """A project file's text as the project read it, its stamp (taken before) and its digest."""

    stamp: Any
    data: bytes
    digest: str


def _content(project: Any, name: str) -> _Content | None:
    """What a project file holds now; None when it cannot be read."""
    stamp = project.stamp(name)
    try:
        data = project.read(Path(name))
    except OSError:
        return None
    return _Content(stamp, data, content_digest(data))


def project_saves(project: Any) -> tuple[tuple[list[SavedFile], dict[str, list[_Helper]]], str, list[str]]:
    """Every save of the project's files and its save helpers (`_project_saves`), with a digest
    of both: an analysis that read them depends on that, not on the text of every file that
    mentions "save" (`Project.derived_value`)."""
    saves, helpers = _project_saves(project)
    rows = sorted(_row(s) for s in saves)
    kinds = sorted((name, sorted((_row(h.saved), repr(h.obj)) for h in found)) for name, found in helpers.items())
    inputs = project.files_mentioning("save") + sorted({f for h in helpers for f in project.files_mentioning(h)})
    return (saves, helpers), hashlib.sha1(repr((rows, kinds)).encode()).hexdigest()[:16], inputs


def _row(saved: SavedFile) -> tuple:
    return (saved.path, saved.line, sorted(saved.names), saved.tensors_only,
            saved.keys is None, sorted(saved.keys or ()), sorted(saved.suffixes), sorted(saved.owners))


def _project_saves(project: Any) -> tuple[list[SavedFile], dict[str, list[_Helper]]]:
    """Every save of the project's files as they are on disk, and its save helpers: the sum of
    each file's part (`_direct_part`, `_calls_part`), each kept by the file's content, so after
    an edit only the edited file's part is worked out again (in a new process too, while the
    lint cache keeps the parts: `Project.derived_part`)."""
    files = project.files_mentioning("save")
    stamps = tuple((f, project.stamp(f)) for f in files)
    cached = project.derived.get("saved_files")
    if cached is not None and cached[0] == stamps:
        return cached[1], cached[2]
    saves: list[SavedFile] = []
    helpers: dict[str, list[_Helper]] = {}
    for name in files:
        direct, found = _direct_part(project, name)
        saves += direct
        for helper in found:
            helpers.setdefault(helper.name, []).append(helper)
    for name in sorted({f for h in helpers for f in project.files_mentioning(h)}):
        saves += _calls_part(project, name, helpers)
    project.derived["saved_files"] = (stamps, saves, helpers)
    return saves, helpers


# ---- each file's part, as plain data --------------------------------------------------------------


def _direct_part(project: Any, name: str) -> tuple[list[SavedFile], list[_Helper]]:
    """The saves a file makes itself and its save helpers (`_direct_saves`): they depend on its
    text alone, so they are kept by its digest (whatever the file is called)."""
    content = _content(project, name)
    if content is None:
        return [], []

    def make() -> dict[str, Any]:
        module = _module_at(project, name, content)
        saves, helpers = _direct_saves(module, name) if module is not None else ([], [])
        return {"saves": [_save_doc(s) for s in saves],
                "helpers": [[h.name, h.method, h.obj, _save_doc(h.saved)] for h in helpers]}

    def read(part: dict[str, Any]) -> tuple[list[SavedFile], list[_Helper]]:
        return ([_save_of(d, name) for d in part["saves"]],
                [_Helper(str(n), bool(m), _parameter_of(o), _save_of(d, name)) for n, m, o, d in part["helpers"]])

    return project.derived_part(f"saves:{content.digest}", make, read)


def _calls_part(project: Any, name: str, helpers: dict[str, list[_Helper]]) -> list[SavedFile]:
    """The saves a file makes through the project's save helpers (`_helper_calls`): kept by its
    digest, its path (a call in the helper's own file is told apart) and the helpers its text
    names (one it never names cannot change them)."""
    content = _content(project, name)
    if content is None:
        return []
    # a call of a helper spells its name (a name found inside a longer word is only looked for)
    named = {h: found for h, found in helpers.items() if h.encode() in content.data}
    if not named:
        return []
    kinds = sorted((h, sorted((_row(x.saved), x.method, repr(x.obj)) for x in found)) for h, found in named.items())
    key = f"save-calls:{content.digest}:{hashlib.sha1(repr((os.path.realpath(name), kinds)).encode()).hexdigest()}"

    def make() -> dict[str, Any]:
        module = _module_at(project, name, content)
        return {"saves": [_save_doc(s) for s in _helper_calls(module, name, named)] if module is not None else []}

    return project.derived_part(key, make, lambda part: [_save_of(d, name) for d in part["saves"]])


def _save_doc(saved: SavedFile) -> list[Any]:
    """A save as plain data (its file left out: the part is kept by content)."""
    return [saved.line, sorted(saved.names), saved.tensors_only, sorted(saved.keys) if saved.keys is not None else None,
            sorted(saved.suffixes), sorted(saved.owners)]


def _save_of(doc: list[Any], path: str) -> SavedFile:
    line, names, only, keys, suffixes, owners = doc
    return SavedFile(path, int(line), _strings(names), bool(only), _strings(keys) if keys is not None else None,
                     _strings(suffixes), _strings(owners))


def _strings(doc: list[Any]) -> frozenset[str]:
    if not isinstance(doc, list) or not all(isinstance(x, str) for x in doc):
        raise TypeError("a list of strings was expected")
    return frozenset(doc)


def _parameter_of(doc: Any) -> tuple[int | None, str] | None:
    """A helper's parameter holding what it saves (`_Helper.obj`) read back."""
    if doc is None:
        return None
    index, name = doc
    if not (index is None or type(index) is int) or not isinstance(name, str):
        raise TypeError("a parameter (position, name) was expected")
    return index, name


def _saves_of(project: Any) -> tuple[list[SavedFile], dict[str, list[_Helper]]]:
    if hasattr(project, "derived_value"):
        return project.derived_value("saved_files")
    return _project_saves(project)


class ProjectFiles:
    """What the project saves, and what each load of one linted file reads."""

    def __init__(self, project: Any, path: str, source: str) -> None:
        self.here = os.path.realpath(path)
        # a text that is no file of the project (a snippet) is read alone
        on_disk = os.path.isfile(self.here) and hasattr(project, "files_mentioning") and project.covers(self.here)
        self.project = project if on_disk else None
        self.own = self._own_module(source, path)
        saves, helpers = _saves_of(self.project) if self.project is not None else ([], {})
        if self.own is not None:  # the linted text, which may differ from the file on disk
            direct, found = _direct_saves(self.own, path)
            mine = {name: list(kept) for name, kept in helpers.items()}  # the project's lists stay as derived
            for helper in found:
                mine.setdefault(helper.name, []).append(helper)
            saves = saves + direct + _helper_calls(self.own, path, mine)
        own_saves = [s for s in saves if s.tensors_only]
        pickled = {n for s in saves if not s.tensors_only for n in s.names}  # `torch.save(model, ...)`
        self.names = {n for s in own_saves for n in s.names} - pickled
        self.suffixes = {x for s in own_saves for x in s.suffixes} - _COMMON_SUFFIXES
        self.keys = [s.keys for s in own_saves if s.keys]
        self.owners = {o for s in own_saves for o in s.owners}
        self.loads = loads_in(self.own) if own_saves and self.own is not None else {}

    def _own_module(self, source: str, path: str) -> _Module | None:
        """The linted text's module: the project's parse of the file when the text is the file's
        (most runs), its own parse when it is not (an open buffer, a fix attempt)."""
        if self.project is not None and self.project.parsed_as(path, source) is not None:
            return _module_at(self.project, self.here)
        return _parse(source, path)

    def _defined(self, name: str) -> bool:
        """Whether the project defines a class or function of that name (a model it builds)."""
        if self.own is not None and name in self.own.defined:
            return True
        if self.project is None:
            return False
        return any(self.project.defines(f, name) for f in self.project.files_mentioning(name, every_part=False))

    def saved_here(self, line: int) -> bool:
        """Whether a load on this line reads a file the project writes with tensors only: the
        same file name, the project's own suffix, or read back with the keys a save writes."""
        for load in self.loads.get(line, ()):
            if any(same_file(loaded, saved) for loaded in load.names for saved in self.names):
                return True
            if load.suffixes & self.suffixes:
                return True
            if load.pretrained:
                continue  # only its file name could say it is the project's own
            reads = [set(load.keys)] if load.keys else []
            if load.returned_by and self.project is not None:
                if self.own is not None:
                    reads += caller_keys(self.own, load.returned_by)
                for name in self.project.files_mentioning(load.returned_by, every_part=False):
                    if name != self.here:
                        reads += self.project.keys_read(name, load.returned_by)
            if any(_reads_saved(keys, saved) for keys in reads for saved in self.keys):
                return True
            if any(self._defined(name) for name in load.receivers & self.owners):
                return True
        return False
