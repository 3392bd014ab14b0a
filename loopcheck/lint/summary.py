"""Module summaries: what the rest of a project needs to know about a module without its tree.

A summary is plain, picklable data: the module's imports (for the import graph and the cache's
dependencies), `__all__`, the functions and classes it defines, and the words of its text (for
the cheap "could tracing from here ever meet a softmax?" tests). It is read with the standard
`ast` parser (several times cheaper than libcst, and only its statements are walked; `ast_tree`
parses a text once per process for everything that reads it that way), or from the libcst tree
of a module the engine has parsed anyway (`summarize_parsed`, the same summary). Whether a
module must be parsed with libcst, and which files a cached result depends on, are decided from
summaries alone. `module_parts` splits a module into the parts an analysis may depend on.
"""

from __future__ import annotations

import ast
import codecs
import hashlib
import json
import os
import re
import tempfile
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import libcst as cst


@dataclass(frozen=True)
class ModuleSummary:
    path: str
    imports: tuple[tuple[str, int, tuple[str, ...]], ...]  # (module, level, imported names)
    exports: tuple[str, ...] | None  # `__all__` when it is a literal list or tuple
    functions: tuple[str, ...]  # top-level functions
    classes: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]  # (name, bases, methods)
    words: str = field(repr=False)  # every word of the text, lower case, space-separated

    def import_targets(self) -> list[tuple[str, int]]:
        """What an import may load: the module, and each imported name as a submodule
        (`from . import engine`, `from pkg import engine`)."""
        targets: dict[tuple[str, int], None] = {}
        for module, level, names in self.imports:
            if module or level:
                targets[(module, level)] = None
            for name in names:
                if name != "*":
                    targets[(f"{module}.{name}" if module else name, level)] = None
        return list(targets)

    def mentions_any(self, words: tuple[str, ...]) -> bool:
        """Whether a word of the module's text contains one of `words` (lower case)."""
        return any(word in self.words for word in words)


def summarize(source: bytes, path: str) -> ModuleSummary | None:
    """The summary of one module's source (None when Python cannot parse it)."""
    tree = ast_tree(source)
    if tree is None:
        return None
    imports: list[tuple[str, int, tuple[str, ...]]] = []
    exports: tuple[str, ...] | None = None
    # statements only (imports can sit in functions, classes, `if` and `try` bodies): an
    # expression never holds one, so the much larger expression trees are never walked
    stack: list[ast.stmt] = list(reversed(tree.body))
    while stack:
        stmt = stack.pop()
        kind = type(stmt)
        if kind is ast.Import:
            imports.extend((alias.name, 0, ()) for alias in stmt.names)  # type: ignore[attr-defined]
        elif kind is ast.ImportFrom:
            names = tuple(alias.name for alias in stmt.names)  # type: ignore[attr-defined]
            imports.append((stmt.module or "", stmt.level, names))  # type: ignore[attr-defined]
        else:
            for attr in ("body", "orelse", "finalbody", "handlers", "cases"):
                inner = getattr(stmt, attr, None)
                if inner:
                    stack.extend(reversed([s for s in inner if isinstance(s, (ast.stmt, ast.excepthandler, ast.match_case))]))  # type: ignore[misc]
    functions: list[str] = []
    classes: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            bases = tuple(ast.unparse(b) for b in stmt.bases)
            methods = tuple(s.name for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
            classes.append((stmt.name, bases, methods))
        elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            if isinstance(stmt.value, (ast.List, ast.Tuple)):
                exports = tuple(e.value for e in stmt.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return ModuleSummary(path, tuple(imports), exports, tuple(functions), tuple(classes), _words(source))


_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


def _words(source: bytes) -> str:
    """Every word of a text (comments and strings too), lower case: "may mention" is all the
    tests of a summary's words need."""
    return b" ".join(set(_WORD.findall(source))).decode("ascii").lower()


def summarize_parsed(module: "cst.Module", source: str, path: str) -> ModuleSummary:
    """The summary `summarize` makes of `source`, read from its libcst tree instead (a module
    the engine has parsed anyway: the standard parser need not read it again)."""
    import libcst as cst

    from loopcheck.lint.values import dotted, string_value  # (values reads this module's MODULE_PART)

    imports: list[tuple[str, int, tuple[str, ...]]] = []
    stack: list[cst.CSTNode] = list(reversed(module.body))
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if type(small) is cst.Import:
                    imports.extend((dotted(a.name) or "", 0, ()) for a in small.names)
                elif type(small) is cst.ImportFrom:
                    star = type(small.names) is cst.ImportStar
                    names = ("*",) if star else tuple(dotted(a.name) or "" for a in small.names)
                    module_name = (dotted(small.module) or "") if small.module is not None else ""
                    imports.append((module_name, len(small.relative), names))
        else:
            for part in _inner_parts(stmt):  # pushed part by part, as `summarize` does: same order
                stack.extend(reversed(part))
    functions: list[str] = []
    classes: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
    exports: tuple[str, ...] | None = None
    for stmt in module.body:
        if type(stmt) is cst.FunctionDef:
            functions.append(stmt.name.value)
        elif type(stmt) is cst.ClassDef:
            bases = tuple(_base_text(module, b) for b in stmt.bases if b.keyword is None and b.star != "**")
            body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
            classes.append((stmt.name.value, bases, tuple(s.name.value for s in body if type(s) is cst.FunctionDef)))
        elif type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                if (type(small) is cst.Assign and isinstance(small.value, (cst.List, cst.Tuple))
                        and any(type(t.target) is cst.Name and t.target.value == "__all__" for t in small.targets)):
                    values = [string_value(e.value) for e in small.value.elements if type(e) is cst.Element]
                    exports = tuple(v for v in values if v is not None)
    words = _words(source.encode("utf-8", "surrogatepass"))
    return ModuleSummary(path, tuple(imports), exports, tuple(functions), tuple(classes), words)


def _inner_parts(stmt: "cst.CSTNode") -> list[list]:
    """The statements directly inside a compound statement, in the order of `ast`'s fields that
    `summarize` walks (body, else, finally, handlers, match cases)."""
    import libcst as cst

    out: list[list] = []
    for attr in ("body", "orelse", "finalbody", "handlers", "cases"):
        part = getattr(stmt, attr, None)
        if part is None:
            continue
        if isinstance(part, (list, tuple)):  # handlers, cases
            out.append(list(part))
        elif isinstance(part, cst.If):  # `elif`: an `if` in the `else` branch
            out.append([part])
        elif isinstance(part, (cst.Else, cst.Finally)):
            out.append(_suite(part.body))
        elif isinstance(part, cst.BaseSuite):
            out.append(_suite(part))
    return out


def _suite(suite: "cst.BaseSuite") -> list:
    import libcst as cst

    if isinstance(suite, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=suite.body)]
    return list(suite.body)


def _base_text(module: "cst.Module", arg: "cst.Arg") -> str:
    """A base class as `ast.unparse` writes it (`summarize` keeps that text)."""
    text = module.code_for_node(arg.value).strip()  # normalised below: a built tree's rendering will do
    try:
        text = ast.unparse(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        pass
    return f"*{text}" if arg.star == "*" else text


class SummaryStore:
    """Summaries kept on disk by content hash (in the lint cache, whose folder names loopcheck's
    version), so a warm run, or one after an edit, summarises only the files that changed. JSON,
    never pickle: a cache folder inside a checked-out repository is not trusted code."""

    def __init__(self, folder: Path, prepare: "Callable[[Path], None] | None" = None) -> None:
        self.folder = folder
        self._prepare = prepare  # makes a folder of the cache (its marker files on first use)
        self._writable = True

    def summary(self, source: bytes, path: str) -> ModuleSummary | None:
        digest = content_digest(source)
        entry = self.folder / digest[:2] / f"{digest}.json"
        try:
            raw = json.loads(entry.read_text(encoding="utf-8"))
            if raw is None:
                return None
            return ModuleSummary(
                path,
                tuple((m, int(level), tuple(names)) for m, level, names in raw["imports"]),
                tuple(raw["exports"]) if raw["exports"] is not None else None,
                tuple(raw["functions"]),
                tuple((name, tuple(bases), tuple(methods)) for name, bases, methods in raw["classes"]),
                raw["words"],
            )
        except (OSError, ValueError, KeyError, TypeError):
            pass
        found = summarize(source, path)
        self._write(entry, None if found is None else {
            "imports": found.imports, "exports": found.exports, "functions": found.functions,
            "classes": found.classes, "words": found.words,
        })
        return found

    def _write(self, entry: Path, doc: object) -> None:
        if not self._writable:
            return
        try:
            if self._prepare is not None:
                self._prepare(entry.parent)
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh)
            os.replace(tmp, entry)
        except OSError:
            self._writable = False  # a read-only tree runs without it


_STORE: list[SummaryStore] = []


@contextmanager
def in_use(slot: list[Any], value: Any) -> Iterator[None]:
    """Put `value` in the one-item list `slot` meanwhile (None: leave it empty), for this process
    and the worker processes it forks: where a store of the lint cache is found while a run lasts."""
    old = list(slot)
    slot[:] = [value] if value is not None else []
    try:
        yield
    finally:
        slot[:] = old


def stored_in(folder: Path | None, prepare: "Callable[[Path], None] | None" = None) -> Any:
    """Keep summaries in `folder` meanwhile (None: in memory only), in this process and in the
    worker processes it forks."""
    return in_use(_STORE, SummaryStore(folder, prepare) if folder is not None else None)


def content_digest(source: bytes) -> str:
    """The digest a file's content is kept by (summaries, parts of derived facts)."""
    return hashlib.sha256(source).hexdigest()[:32]


def summary_of(source: bytes, path: str) -> ModuleSummary | None:
    """The summary of `source`, from the store when one is in use."""
    return _STORE[0].summary(source, path) if _STORE else summarize(source, path)


MODULE_PART = "<module>"  # the statements of a module outside its top-level functions and classes


def module_parts(text: str) -> dict[str, str] | None:
    """A digest of each part of a module: each top-level function and class by name (its
    decorators and text), each method of a top-level class as `Class.method`, and `MODULE_PART`
    for every other top-level statement together. A class's own part is its text with each
    method's lines replaced by the method's name. An analysis that read only some parts of a
    module depends only on their text: an edit elsewhere leaves their digests as they were, even
    when it moves them up or down. (Where a part sits matters to findings located in it or citing
    its lines: those depend on its lines too, `module_split`.) None when Python cannot parse the
    text."""
    split = module_split(text)
    return split[0] if split is not None else None


def module_split(text: str) -> tuple[dict[str, str], dict[str, list[tuple[int, int]]]] | None:
    """Each part's digest (`module_parts`), and the first and last line of each stretch of each
    part: with its text, what places every line of the part. None when Python cannot parse the
    text."""
    pieces = _pieces(text)
    if pieces is None:
        return None
    digests = {key: hashlib.sha1("\0".join(t for _, _, t in texts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
               for key, texts in pieces.items()}
    return digests, {key: [(first, last) for first, last, _ in texts] for key, texts in pieces.items()}


def part_holding(spans: dict[str, list[tuple[int, int]]], line: int) -> str | None:
    """The part holding `line`, by the parts' stretches (`module_split`); None between parts."""
    return next((key for key, stretches in spans.items() for first, last in stretches if first <= line <= last), None)


def _pieces(text: str) -> dict[str, list[tuple[int, int, str]]] | None:
    """Each part's stretches (`module_parts`): first line, last line, text."""
    tree = ast_tree(text)
    if tree is None:
        return None
    lines = text.splitlines(keepends=True)
    pieces: dict[str, list[tuple[int, int, str]]] = {}

    def add(key: str, first: int, last: int, mark: str = "") -> None:
        pieces.setdefault(key, []).append((first, last, "".join(lines[first - 1:last]) + mark))

    for stmt in tree.body:
        start, end = _span(stmt)
        if isinstance(stmt, ast.ClassDef):
            at = start
            for inner in _methods_apart(stmt):
                first, last = _span(inner)
                add(stmt.name, at, first - 1, f"\0def {inner.name}\n")  # the class's lines before it, and its name
                add(f"{stmt.name}.{inner.name}", first, last)
                at = last + 1
            if at <= end:  # the class's lines after its last method
                add(stmt.name, at, end)
            continue
        named = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
        add(stmt.name if named else MODULE_PART, start, end)  # type: ignore[attr-defined]
    return pieces


def calling_parts(text: str, form: str, name: str) -> list[str] | None:
    """The parts of a module (as `module_parts` names them) holding a call of `name(...)` (form
    "name") or of `<anything>.name(...)` (form "attr"), sorted; None when Python cannot parse the
    text. An analysis that searched the module's call sites depends on these and on which parts
    they are, not on the rest of the module."""
    tree = ast_tree(text)
    if tree is None:
        return None
    found: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            apart = {id(method) for method in _methods_apart(stmt)}
            for inner in stmt.body:
                if _calls(inner, form, name):
                    found.add(f"{stmt.name}.{inner.name}" if id(inner) in apart else stmt.name)  # type: ignore[attr-defined]
            if any(_calls(node, form, name) for node in [*stmt.decorator_list, *stmt.bases, *stmt.keywords]):
                found.add(stmt.name)
        elif _calls(stmt, form, name):
            named = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
            found.add(stmt.name if named else MODULE_PART)  # type: ignore[attr-defined]
    return sorted(found)


def _methods_apart(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The methods of a class that are parts of their own (`Class.method`): each one that does not
    share a line with what comes before it (one that does stays in the class's part)."""
    found = []
    at = _span(cls)[0]
    for inner in cls.body:
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first, last = _span(inner)
            if first >= at:
                found.append(inner)
                at = last + 1
    return found


def _calls(node: ast.AST, form: str, name: str) -> bool:
    for inner in ast.walk(node):
        if type(inner) is ast.Call:
            func = inner.func
            if (form == "name" and type(func) is ast.Name and func.id == name
                    or form == "attr" and type(func) is ast.Attribute and func.attr == name):
                return True
    return False


def _span(stmt: ast.stmt) -> tuple[int, int]:
    """First line (decorators included) and last line of a statement."""
    start = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", ())])
    return start, stmt.end_lineno or stmt.lineno


def all_parts_digest(parts: dict[str, str]) -> str:
    """One digest of every part of a module (`module_parts`): what an analysis that read all of
    them depends on. Comments and blank lines between the parts, or after the last, are not in
    it."""
    joined = "\0".join(f"{name}\0{digest}" for name, digest in sorted(parts.items()))
    return hashlib.sha1(joined.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# ---- one `ast` tree per text ----------------------------------------------------------------------

class _RecentTrees:
    """The `ast` trees of the texts asked for last, within a budget of source bytes (a tree takes
    some 30 times its text)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self.trees: "OrderedDict[tuple[bool, str], tuple[ast.Module | None, int]]" = OrderedDict()

    def get(self, key: tuple[bool, str]) -> "tuple[ast.Module | None, int] | None":
        found = self.trees.get(key)
        if found is not None:
            self.trees.move_to_end(key)
        return found

    def put(self, key: tuple[bool, str], tree: ast.Module | None, size: int) -> None:
        self.trees[key] = (tree, size)
        self.held += size
        while self.held > self.budget and len(self.trees) > 1:
            self.held -= self.trees.popitem(last=False)[1][1]

    def clear(self) -> None:
        self.trees.clear()
        self.held = 0


_TREES = _RecentTrees(4_000_000)
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)


def ast_tree(source: str | bytes) -> ast.Module | None:
    """The standard `ast` tree of a module's text (bytes: decoded as Python would), None when
    Python cannot parse it. Parsed once per process while recently asked for: the summary, the
    parts of a module, what it saves and where its statements start all read the same tree, so
    no caller may change it."""
    key = _tree_key(source)
    found = _TREES.get(key)
    if found is not None:
        return found[0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like are not ours to report
            tree: ast.Module | None = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    _TREES.put(key, tree, len(source))
    return tree


def _tree_key(source: str | bytes) -> tuple[bool, str]:
    """A text and its UTF-8 bytes share a key; bytes that declare another encoding have their own
    (the same bytes read as UTF-8 may be another text)."""
    if isinstance(source, str):
        return True, content_digest(source.encode("utf-8", "surrogatepass"))
    if source.startswith(codecs.BOM_UTF8):
        return True, content_digest(source[len(codecs.BOM_UTF8):])
    head = source[:source.find(b"\n", source.find(b"\n") + 1) + 1 or len(source)]
    cookie = _COOKIE.search(head) if b"coding" in head else None
    if cookie is not None and _encoding_name(cookie.group(1)) != "utf-8":
        return False, content_digest(source)
    return True, content_digest(source)


def _encoding_name(declared: bytes) -> str:
    try:
        return codecs.lookup(declared.decode("ascii")).name
    except (LookupError, UnicodeDecodeError):
        return ""
