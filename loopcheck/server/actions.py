"""Code actions: a finding's own fix, a `# noqa` comment for it, and fixing the whole file.

Kinds: `quickfix` for the first two, `source.fixAll.loopcheck` for the third (the kind editors
run on save with `"editor.codeActionsOnSave"`). A fix marked unsafe on its rule page is offered
as a quick fix with "(unsafe)" in its title, never preferred, and is applied by "fix all" only
with the `unsafeFixes` setting, as `--unsafe-fixes` does on the command line.
"""

from __future__ import annotations

import io
import tokenize
from typing import Any, Iterable

from lsprotocol import types

from loopcheck.findings import Finding
from loopcheck.lint.fixes.edits import edits_between
from loopcheck.lint.suppress import scan_file
from loopcheck.server.convert import Positions

FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.loopcheck"


def wanted(kind: str, only: Iterable[str] | None) -> bool:
    """Whether an action of `kind` is asked for (`only` holds kinds or their parents)."""
    if not only:
        return True
    return any(kind == o or kind.startswith(o + ".") for o in only)


def workspace_edit(uri: str, version: int | None, edits: list[types.TextEdit], versioned: bool) -> types.WorkspaceEdit:
    """Edits of one document; tied to the document version when the client supports it, so an
    edit computed for an older text is refused rather than applied in the wrong place."""
    if versioned:
        document = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=document, edits=edits)])
    return types.WorkspaceEdit(changes={uri: edits})


def fix_action(finding: Finding, diagnostic: types.Diagnostic, edit: types.WorkspaceEdit) -> types.CodeAction:
    fix = finding.fix or {}
    unsafe = fix.get("applicability") == "unsafe"
    title = f"Fix {finding.code}{' (unsafe)' if unsafe else ''}: {fix.get('message') or finding.name}"
    return types.CodeAction(
        title=title,
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        edit=edit,
        is_preferred=not unsafe,
    )


def fix_edits(finding: Finding, positions: Positions) -> list[types.TextEdit]:
    return [positions.text_edit(e) for e in (finding.fix or {}).get("edits", [])]


def noqa_action(finding: Finding, diagnostic: types.Diagnostic, edit: types.WorkspaceEdit) -> types.CodeAction:
    return types.CodeAction(
        title=f"Silence {finding.code} on this line (# noqa)",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        edit=edit,
    )


def fix_all_action(edit: types.WorkspaceEdit, unsafe: bool) -> types.CodeAction:
    title = "Fix all loopcheck findings" + (" (unsafe fixes included)" if unsafe else " with safe fixes")
    return types.CodeAction(title=title, kind=FIX_ALL, edit=edit)


def text_edits_between(old: str, new: str, positions: Positions) -> list[types.TextEdit]:
    """Minimal edits turning old into new (the fixer's whole-file result)."""
    return [positions.text_edit(e.to_dict()) for e in edits_between(old, new)]


# --- # noqa -----------------------------------------------------------------------------------


def _statement(text: str, line: int) -> tuple[int, int]:
    """First and last physical line of the logical line holding `line` (a compound statement's
    header only)."""
    start: int | None = None
    try:
        for kind, _, (row, _), (end_row, _), _ in tokenize.generate_tokens(io.StringIO(text).readline):
            if kind in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
                continue
            if kind == tokenize.NEWLINE:
                if start is not None and start <= line <= row:
                    return start, row
                start = None
                continue
            if start is None:
                if row > line:
                    break
                start = row
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return line, line


def noqa_edit(text: str, line: int, code: str) -> dict[str, Any] | None:
    """The edit that silences `code` at `line`: the code added to a `# noqa: ...` (or
    `# loopcheck: ignore[...]`) comment already on the statement, or a new `# noqa: CODE` at
    the end of the statement's last line. None when the statement already silences every code."""
    lines = text.splitlines()
    first, last = _statement(text, line)
    table = scan_file(lines)
    for n in range(first, last + 1):
        for s in table.by_line.get(n, ()):
            if s.codes is None:
                return None
            # add to the directive's code list: after the last code, inside `]` for ignore[...]
            at = s.end_column - (1 if s.kind == "ignore" else 0)
            return {"line": n, "column": at, "end_line": n, "end_column": at, "content": f", {code}"}
    if last > len(lines):
        return None
    content = lines[last - 1]
    end = len(content) + 1
    stripped = len(content.rstrip()) + 1
    return {"line": last, "column": stripped, "end_line": last, "end_column": end, "content": f"  # noqa: {code}"}
