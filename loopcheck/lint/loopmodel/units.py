"""One parsed file as the builder sees it: its imports, top-level functions and classes, and the
project modules it reaches (loaded through the run's project)."""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterator

import libcst as cst

from loopcheck.lint.loopmodel.facts import Role
from loopcheck.lint.loopmodel.nodes import _ATOMS, _dotted, _target_names, _walk_statements
from loopcheck.lint.loopmodel.torch_api import EMA_CLASSES, OPTIMIZER_CLASSES, SCHEDULER_CLASSES, _EMA_RE
from loopcheck.lint.positions import node_code
from loopcheck.lint.summary import MODULE_PART
from loopcheck.lint.syntax import classes_of

if TYPE_CHECKING:
    from loopcheck.lint.loopmodel.builder import _Builder


_SETS_LR = re.compile(r"\[\s*['\"]lr['\"]\s*\]\s*=(?!=)")
# nodes whose rendering is exactly their source text (others may add a trailing comma)
_RENDERED_EXACTLY = classes_of((cst.BaseExpression, cst.Parameters)) - {cst.StarredElement}


class _Class:
    def __init__(self, name: str, node: cst.ClassDef, unit: "_Unit") -> None:
        self.name = name
        self.node = node
        self.unit = unit
        self.bases = [b for b in (_dotted(a.value) for a in node.bases if not a.keyword) if b]
        # of a followed module, each method read is a part of it (`Class.method`)
        note = unit.note
        self.methods: dict[str, cst.FunctionDef] = (
            _Noted(lambda method: note(f"{name}.{method}")) if note is not None else {})
        for stmt in node.body.body:
            if type(stmt) is cst.FunctionDef:
                self.methods[stmt.name.value] = stmt

    def read_whole(self) -> None:
        """The analysis reads every method of the class (its whole node), not one by one."""
        if type(self.methods) is _Noted:
            self.methods._everything()

    def base_classes(self, seen: set[int] | None = None) -> list["_Class"]:
        seen = seen if seen is not None else {id(self)}
        out: list[_Class] = []
        for base in self.bases:
            found = self.unit.lookup_class(base)
            if found is not None and id(found) not in seen:
                seen.add(id(found))
                out.append(found)
                out.extend(found.base_classes(seen))
        return out

    def method(self, name: str) -> tuple[cst.FunctionDef, "_Class"] | None:
        if name in self.methods:
            return self.methods[name], self
        for base in self.base_classes():
            if name in base.methods:
                return base.methods[name], base
        return None

    def _all_bases(self) -> list[str]:
        names = list(self.bases)
        for base in self.base_classes():
            names.extend(base.bases)
        return names

    def kind(self) -> Role | None:
        """The role an instance of this class plays, when the class says so."""
        if "_kind" not in self.__dict__:
            self.__dict__["_kind"] = self._kind()
        return self.__dict__["_kind"]

    def _kind(self) -> Role | None:
        names = [self.name] + self._all_bases()
        lasts = [n.rsplit(".", 1)[-1] for n in names]
        if any(_EMA_RE.search(n) or n in EMA_CLASSES for n in lasts):
            return Role.EMA
        if any(n in ("Optimizer",) or n in OPTIMIZER_CLASSES for n in lasts[1:]):
            return Role.OPTIMIZER
        if any(n in ("_LRScheduler", "LRScheduler") or n in SCHEDULER_CLASSES for n in lasts[1:]):
            return Role.SCHEDULER
        if any(n in ("Module", "Sequential", "ModuleList", "PreTrainedModel", "LightningModule") for n in lasts[1:]):
            return Role.CRITERION if self.name.endswith("Loss") else Role.MODEL
        if "DataLoader" in lasts[1:]:
            return Role.LOADER  # a project's own loader class (a graph library's, a prefetching one)
        if self._sets_learning_rate():
            return Role.SCHEDULER
        return None

    def _sets_learning_rate(self) -> bool:
        """A schedule written as a plain class: its `step()` writes `param_group["lr"]` and steps no
        optimizer (a warm-up wrapper that also steps the optimizer it holds is not a scheduler)."""
        step = self.method("step")
        if step is None or self.method("zero_grad") is not None:
            return False
        code = step[1].unit.text(step[0])
        return bool(_SETS_LR.search(code)) and not re.search(r"\.step\(", code)


def _constant_truth(node: cst.BaseExpression | None) -> bool | None:
    """The truth of a literal constant (`True`, `False`, `None`, `0`, `1`), else None."""
    if type(node) is cst.Name and node.value in ("True", "False", "None"):  # type: ignore[union-attr]
        return node.value == "True"  # type: ignore[union-attr]
    if type(node) is cst.Integer:
        try:
            return int(node.value.replace("_", ""), 0) != 0  # type: ignore[union-attr]
        except ValueError:
            return None
    return None


class _Noted(dict):
    """Top-level functions or classes of a followed module, by name: each name looked up is a
    part of the module the analysis read (`Project.note_part`), a walk over all of them reads
    the whole module."""

    def __init__(self, note: Callable[[str], None]) -> None:
        super().__init__()
        self.note = note

    def __getitem__(self, name: str) -> Any:
        self.note(name)
        return super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:
        self.note(name)
        return super().get(name, default)

    def __contains__(self, name: object) -> bool:
        self.note(name)  # type: ignore[arg-type]
        return super().__contains__(name)

    def _everything(self) -> None:
        self.note("*")

    def __iter__(self) -> Iterator[str]:
        self._everything()
        return super().__iter__()

    def items(self) -> Any:
        self._everything()
        return super().items()

    def values(self) -> Any:
        self._everything()
        return super().values()

    def keys(self) -> Any:
        self._everything()
        return super().keys()


class _Unit:
    """One parsed file: its imports, top-level functions and classes.

    `note`, for a module other than the analysed file: told each part of the module the
    analysis reads (a function or class by name, `MODULE_PART` for its other statements, "*"
    for all of it), so that a kept analysis depends only on those."""

    def __init__(self, path: str, module: cst.Module, builder: "_Builder",
                 note: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.module = module
        self.builder = builder
        self.note = note
        self.imports: dict[str, str] = {}  # local name -> dotted origin ("optim" -> "torch.optim")
        self.local_imports: dict[str, tuple[str, str | None, int]] = {}  # name -> (module, attr, level)
        self.functions: dict[str, cst.FunctionDef] = _Noted(note) if note is not None else {}
        self.classes: dict[str, _Class] = _Noted(note) if note is not None else {}
        self._units: dict[tuple[str, int], "_Unit | None"] = {}
        self._found: dict[tuple[str, str], Any] = {}  # (lookup, dotted name) -> its answer (`_looked_up`)
        self.top_level: list[cst.BaseStatement] = []
        for stmt in module.body:
            self._index(stmt, top=True)
        if note is not None:  # its imports and module-level names are read from here on
            note(MODULE_PART)

    def _index(self, stmt: cst.CSTNode, top: bool) -> None:
        if type(stmt) is cst.FunctionDef:
            self.functions.setdefault(stmt.name.value, stmt)
        elif type(stmt) is cst.ClassDef:
            self.classes.setdefault(stmt.name.value, _Class(stmt.name.value, stmt, self))
        elif type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                if type(small) in (cst.Import, cst.ImportFrom):
                    self.add_import(small)
            if top:
                self.top_level.append(stmt)
        elif type(stmt) in (cst.If, cst.Try) and top:
            # imports guarded by try/except ImportError or `if TYPE_CHECKING` still name modules
            for inner in _walk_statements(stmt):
                if type(inner) is cst.SimpleStatementLine:
                    for small in inner.body:
                        if type(small) in (cst.Import, cst.ImportFrom):
                            self.add_import(small)
            self.top_level.append(stmt)
        elif top:
            self.top_level.append(stmt)

    @cached_property
    def flags(self) -> dict[str, bool]:
        """Module-level names bound once to a constant (`USE_AMP = False`, `DEBUG = 0`) and never
        rebound (no other top-level assignment, no `global`): tests on them are folded."""
        found: dict[str, bool] = {}
        seen: set[str] = set()
        for stmt in self.module.body:
            for inner in _walk_statements(stmt):
                if type(inner) is not cst.SimpleStatementLine:
                    continue
                for small in inner.body:
                    targets = []
                    if type(small) is cst.Assign:
                        targets = [t.target for t in small.targets]
                    elif type(small) in (cst.AnnAssign, cst.AugAssign):
                        targets = [small.target]  # type: ignore[attr-defined]
                    for target in targets:
                        name = target.value if type(target) is cst.Name else None
                        if name is None:
                            continue
                        value = _constant_truth(getattr(small, "value", None)) if type(small) is not cst.AugAssign else None
                        if name in seen or value is None or inner is not stmt:
                            found.pop(name, None)
                        else:
                            found[name] = value
                        seen.add(name)
        if found and (self.note is not None or "global" in self._source()):
            found = {n: v for n, v in found.items() if not self._declared_global(n)}
        return found

    def _declared_global(self, name: str) -> bool:
        """Whether a `global` statement anywhere in the module names `name` (a function may
        rebind it). For a followed module the question is asked through the project, so an
        analysis depends on its answer, not on the whole text."""
        pattern = re.compile(rf"\bglobal\b[^\n]*\b{re.escape(name)}\b")
        project = self.builder.project
        if self.note is not None and hasattr(project, "searched"):
            return project.searched(self.path, pattern) is not False
        return bool(pattern.search(self._source()))

    def _source(self) -> str:
        from loopcheck.lint.positions import source_of

        return source_of(self.module)

    def add_import(self, node: cst.Import | cst.ImportFrom) -> None:
        if type(node) is cst.Import:
            for alias in node.names:
                full = _dotted(alias.name) or ""
                if alias.asname is not None and type(alias.asname.name) is cst.Name:
                    local = alias.asname.name.value
                    self.imports[local] = full
                    self.local_imports[local] = (full, None, 0)
                else:
                    root = full.split(".")[0]
                    self.imports[root] = root
                    self.local_imports[root] = (root, None, 0)
            return
        level = len(node.relative)
        module = _dotted(node.module) if node.module is not None else ""
        if type(node.names) is cst.ImportStar:
            return
        for alias in node.names:
            name = _dotted(alias.name) or ""
            local = name
            if alias.asname is not None and type(alias.asname.name) is cst.Name:
                local = alias.asname.name.value
            origin = f"{module}.{name}" if module else name
            self.imports[local] = ("." * level) + origin if level else origin
            self.local_imports[local] = (module or "", name, level)

    def text(self, node: cst.CSTNode) -> str:
        """Source text of a node of this file (rendered once per run: the same helper's nodes
        are asked for at each of its call sites)."""
        if type(node) in _ATOMS and not node.lpar:  # type: ignore[attr-defined]
            return node.value  # type: ignore[attr-defined]
        texts = self._texts
        found = texts.get(id(node))
        if found is None:
            found = texts[id(node)] = self._render(node)
        return found

    @cached_property
    def _texts(self) -> dict[int, str]:
        from loopcheck.lint.memo import fact

        return fact(self.module, "loopmodel.texts", dict)

    def _render(self, node: cst.CSTNode) -> str:
        if type(node) in _RENDERED_EXACTLY:
            return node_code(node, self.module).strip()
        from loopcheck.lint.positions import positions_for

        found = positions_for(self.module).text(node)
        if found is None:
            found = node_code(node, self.module)
        return found.strip()

    def qualify(self, node: cst.BaseExpression) -> str | None:
        dotted = _dotted(node)
        return self.qualify_dotted(dotted) if dotted is not None else None

    def qualify_dotted(self, dotted: str) -> str:
        """`nn.Linear` -> `torch.nn.Linear` through this file's imports (unchanged when not imported)."""
        root, _, rest = dotted.partition(".")
        origin = self.imports.get(root)
        if origin is None:
            return dotted
        return f"{origin}.{rest}" if rest else origin

    def unit_for(self, module: str, level: int) -> "_Unit | None":
        key = (module, level)
        if key not in self._units:
            self._units[key] = self.builder.load_unit(self.path, module, level)
        return self._units[key]

    def imported(self, name: str, seen: frozenset[int] = frozenset()) -> tuple["_Unit", str | None] | None:
        """(unit, attribute) for a local name imported from a project module; (unit, None) when
        the name is the module itself.

        `from package import name`, as Python binds it: what the package's `__init__` binds to
        `name` (a function, class or value it defines there, or what it imports under that name,
        followed), else the submodule `package/name`. `seen`: the units asked on the way (a
        cycle of re-exports resolves to nothing)."""
        entry = self.local_imports.get(name)
        if entry is None or id(self) in seen:
            return None
        module, attr, level = entry
        unit = self.unit_for(module, level)
        if attr is None:
            return (unit, None) if unit is not None else None
        if unit is not None:
            if attr in unit.local_imports:
                return unit.imported(attr, seen | {id(self)})
            if attr in unit.functions or attr in unit.classes or attr in unit.assigned:
                return unit, attr
        # `from package import module`
        sub = f"{module}.{attr}" if module else attr
        found = self.unit_for(sub, level)
        if found is not None:
            return found, None
        return (unit, attr) if unit is not None else None

    @cached_property
    def assigned(self) -> frozenset[str]:
        """Names the module's top-level statements bind other than by `def`, `class` or import
        (assignments, `for` and `with` targets, definitions under `if` or `try`)."""
        found: set[str] = set()
        for stmt in self.module.body:
            for inner in _walk_statements(stmt):
                kind = type(inner)
                if kind in (cst.FunctionDef, cst.ClassDef) and inner is not stmt:
                    found.add(inner.name.value)  # type: ignore[attr-defined]
                elif kind is cst.For:
                    found.update(_target_names(inner.target))  # type: ignore[attr-defined]
                elif kind is cst.With:
                    for item in inner.items:  # type: ignore[attr-defined]
                        if item.asname is not None:
                            found.update(_target_names(item.asname.name))
                elif kind is cst.SimpleStatementLine:
                    for small in inner.body:  # type: ignore[attr-defined]
                        if type(small) is cst.Assign:
                            for t in small.targets:
                                found.update(_target_names(t.target))
                        elif type(small) in (cst.AnnAssign, cst.AugAssign):
                            found.update(_target_names(small.target))  # type: ignore[attr-defined]
        return frozenset(found)

    def lookup_class(self, dotted: str) -> _Class | None:
        """The project class `dotted` names here (defined in this file or imported), else None."""
        return self._looked_up(self._lookup_class, dotted)

    def _looked_up(self, lookup: Callable[[str], Any], dotted: str) -> Any:
        """`lookup(dotted)`, asked once per name and analysis: a name is looked up at each of its
        calls, and the parts of other modules it reads were noted the first time."""
        key = (lookup.__name__, dotted)
        found = self._found.get(key, _UNSEEN)
        if found is _UNSEEN:
            found = self._found[key] = lookup(dotted)
        return found

    def _lookup_class(self, dotted: str) -> _Class | None:
        if dotted in self.classes:
            return self.classes[dotted]
        root, _, rest = dotted.partition(".")
        found = self.imported(root)
        if found is None:
            return None
        unit, attr = found
        if attr is not None and not rest:
            return unit.classes.get(attr)
        if attr is None and rest and "." not in rest:
            return unit.classes.get(rest)
        return None

    def lookup_function(self, dotted: str) -> tuple[cst.FunctionDef, "_Unit"] | None:
        """The project function `dotted` names here and the file defining it, else None."""
        return self._looked_up(self._lookup_function, dotted)

    def _lookup_function(self, dotted: str) -> tuple[cst.FunctionDef, "_Unit"] | None:
        if dotted in self.functions:
            return self.functions[dotted], self
        root, _, rest = dotted.partition(".")
        found = self.imported(root)
        if found is None:
            return None
        unit, attr = found
        if attr is not None and not rest and attr in unit.functions:
            return unit.functions[attr], unit
        if attr is None and rest and "." not in rest and rest in unit.functions:
            return unit.functions[rest], unit
        return None


_UNSEEN = object()
_CALLED = re.compile(r"(?<![\w.])(?<!def )(?<!class )([A-Za-z_]\w*)\s*\(")  # `name(`, not `obj.name(` or `def name(`
_SELF_CALL = re.compile(r"(?:self|cls|super\(\))\.([A-Za-z_]\w*)\s*\(")


def _self_called(source: str, with_super: bool = True) -> set[str]:
    """Names called as `self.name(`, `cls.name(` or (with `with_super`) `super().name(`. The word
    boundary before `self`/`cls` is checked by hand: a leading `\\b` makes the regex engine try
    every position."""
    found: set[str] = set()
    for match in _SELF_CALL.finditer(source):
        start = match.start()
        before = source[start - 1] if start else " "
        if source.startswith("super", start):
            if not with_super:
                continue
        elif before.isalnum() or before == "_":
            continue  # `myself.name(`: not `self`
        found.add(match.group(1))
    return found
