"""Autofixes for `loopcheck lint --fix`: safe ones by default, unsafe ones on request.

The fixers, one module per rule family, and `describe_fix(finding, ctx)`: the `fix` field of a
finding, a minimal text replacement of the original source (the engine fills it for findings of
fixable codes; SARIF and JSON output carry it). Applying fixes to a file, pass after pass, is
`loopcheck.lint.fixing.fix_source`.

Whether a code's fix is safe or unsafe is read from the `fix:` line of its rule page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable
from weakref import WeakKeyDictionary

from loopcheck.catalog import page
from loopcheck.findings import Finding
from loopcheck.lint.fixes import amp, checkpoint, eval_mode, scheduler, zero_grad  # noqa: F401  (registers)
from loopcheck.lint.fixes.base import FIXERS, LOCAL, SourceIndex
from loopcheck.lint.fixes.fragment import fragment_of
from loopcheck.lint.fixes.edits import Edit

if TYPE_CHECKING:
    from loopcheck.lint.context import FileContext

__all__ = ["describe_fix", "attach_fixes", "fixable_codes", "applicability", "module_methods"]

_INDEXES: "WeakKeyDictionary[Any, SourceIndex]" = WeakKeyDictionary()


def applicability(code: str) -> str:
    """A code's fix kind, "safe", "unsafe" or "none", from its rule page's front block."""
    return page(code).fix if code in FIXERS else "none"


def fixable_codes() -> list[str]:
    return sorted(code for code in FIXERS if applicability(code) != "none")


def _index(ctx: "FileContext") -> SourceIndex:
    index = _INDEXES.get(ctx)
    if index is None:
        index = _INDEXES[ctx] = SourceIndex(ctx)
    return index


def describe_fix(finding: Finding, ctx: "FileContext") -> dict | None:
    """The fix of a finding as `{"applicability", "message", "edits"}`, or None when the code
    has no fixer or this occurrence cannot be fixed without guessing."""
    kind = applicability(finding.code)
    if kind == "none" or finding.path not in (None, ctx.path):
        return None
    fragment = fragment_of(ctx, finding) if finding.code in LOCAL else None
    local = fragment.context() if fragment is not None else None
    if local is not None:
        index, asked = _index(local), fragment.finding(finding)
    else:
        index, asked = _index(_parsed(ctx)), finding
    if not index.renders_source:
        return None
    change = FIXERS[finding.code](index, asked)
    if change is None:
        return None
    edits = index.edits(change.module)
    if local is not None:
        edits = fragment.edits(edits)
    if not edits or module_methods(ctx.source).touches(edits):
        return None
    return {"applicability": kind, "message": change.message, "edits": [e.to_dict() for e in edits]}


def _parsed(ctx: "FileContext") -> "FileContext":
    """The context fixers edit: on libcst's parse of the file (made once per context)."""
    found = _PARSED.get(ctx)
    if found is None:
        found = _PARSED[ctx] = ctx.on_parsed_tree()
    return found


_PARSED: "WeakKeyDictionary[Any, FileContext]" = WeakKeyDictionary()


def attach_fixes(findings: list[Finding], ctx: "FileContext") -> list[Finding]:
    """Fill the `fix` field of the findings that have a fixer (the others are returned as is)."""
    if not any(f.code in FIXERS and f.fix is None for f in findings):
        return findings
    out = []
    for f in findings:
        if f.code in FIXERS and f.fix is None:
            try:
                fix = describe_fix(f, ctx)
            except Exception:  # noqa: BLE001  (a fixer failure loses the fix, never the finding)
                fix = None
            if fix is not None:
                f = f.with_(fix=fix)
        out.append(f)
    return out


class ModuleMethods:
    """The line spans of the methods of `nn.Module` subclasses in a source: no fix touches them.

    A model's forward runs inside whatever context its caller chose (training, evaluation, a
    compiled graph); rewriting it (wrapping a loop in `no_grad`, moving calls) changes every
    caller at once, so the finding stays and the change is left to the author."""

    def __init__(self, spans: list[tuple[int, int, str]]) -> None:
        self.spans = spans

    def touches(self, edits: Iterable[Any]) -> str | None:
        for e in edits:
            line, end = (e.line, e.end_line) if isinstance(e, Edit) else (e["line"], e["end_line"])
            for start, stop, name in self.spans:
                if line <= stop and start <= end:
                    return name
        return None


_METHODS: dict[str, ModuleMethods] = {}


def module_methods(source: str) -> ModuleMethods:
    found = _METHODS.get(source)
    if found is None:
        if len(_METHODS) > 32:
            _METHODS.clear()
        found = _METHODS[source] = ModuleMethods(_module_method_spans(source))
    return found


def _module_method_spans(source: str) -> list[tuple[int, int, str]]:
    import ast

    from loopcheck.lint.summary import ast_tree

    tree = ast_tree(source)
    if tree is None:
        return []
    # classes sit among statements (nested in functions, `if` or `try` bodies at most): the much
    # larger expression trees are never walked
    classes: list[ast.ClassDef] = []
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        stmt = stack.pop()
        if type(stmt) is ast.ClassDef:
            classes.append(stmt)
        for attr in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(stmt, attr, None)
            if inner:
                stack.extend(reversed(inner))

    def base_name(b: ast.expr) -> str:
        return b.attr if isinstance(b, ast.Attribute) else b.id if isinstance(b, ast.Name) else ""

    modules = {"Module"}  # nn.Module, torch.nn.Module, a bare `Module`, and subclasses of those in the file
    while True:
        more = {c.name for c in classes if c.name not in modules and any(base_name(b) in modules for b in c.bases)}
        if not more:
            break
        modules |= more
    spans = []
    for c in classes:
        if c.name in modules and any(base_name(b) in modules for b in c.bases):
            for item in c.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([item.lineno] + [d.lineno for d in item.decorator_list])
                    spans.append((first, item.end_lineno or item.lineno, f"{c.name}.{item.name}"))
    return spans
