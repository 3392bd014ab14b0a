"""The lint engine: files -> libcst modules -> rules -> suppressions -> findings.

Per file: read the bytes, decode them (PEP 263 coding cookies honoured), skip files that cannot
hold a training loop, parse once with libcst, run each enabled rule over one shared
`FileContext` (the loop model is built once, on first use), drop duplicates, apply suppression
comments, sort. Nothing a file contains makes the engine raise: unreadable, undecodable and
unparsable files, and rules that fail, become `LintError` entries while the rest still runs.
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from loopcheck.findings import Finding
from loopcheck.lint.discovery import discover  # noqa: F401  (re-exported: discovery lives there)

if TYPE_CHECKING:  # libcst is imported when a file is parsed: a run served by the cache never needs it
    import libcst as cst

# A file with none of these words cannot hold anything a rule looks for by itself...
_RELEVANT = re.compile(
    rb"torch|optim|backward|\.step\(|zero_grad|save|load|DataLoader|\.eval\(|\.train\(|no_grad|inference_mode|"
    rb"autocast|[Ss]caler|sampler|set_epoch|[Ee]ma|EMA|swa|softmax|sigmoid|[Ll]oss|state_dict|accelerat|lightning|"
    rb"fabric|deepspeed|\bgrad\b|update_parameters|transformers|timm"
)
# ... unless it imports a local module that could carry the loop.
_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import|import[ \t]+([\w. ,]+))", re.M)

_RECURSION_FLOOR = 10_000  # deep but legal nesting is walked recursively by libcst and the model


@dataclass
class LintError:
    """A file that could not be checked (or a rule that failed on it)."""

    path: str
    line: int | None
    message: str
    code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": self.path, "line": self.line, "message": self.message}
        if self.code is not None:
            data["code"] = self.code
        return data


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    errors: list[LintError] = field(default_factory=list)
    suppressions_used: list[Any] = field(default_factory=list)
    skipped: bool = False  # nothing a rule could find: not parsed


@dataclass
class LintReport:
    findings: list[Finding]
    errors: list[LintError]
    files_checked: int
    files_skipped: int


def _everything(code: str) -> bool:
    return True


# ------------------------------------------------------------------------------------------
# one file
# ------------------------------------------------------------------------------------------


def _decode(data: bytes, path: str) -> tuple[str | None, LintError | None]:
    nul = data.find(b"\0")
    if nul != -1:
        return None, LintError(path, data.count(b"\n", 0, nul) + 1, "file contains NUL bytes (not a Python source file)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        return None, LintError(path, getattr(exc, "lineno", None) or 1, f"cannot decode: {exc.msg if hasattr(exc, 'msg') else exc}")
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        line = data.count(b"\n", 0, exc.start) + 1 if isinstance(exc, UnicodeDecodeError) else 1
        return None, LintError(path, line, f"cannot decode as {encoding}: {exc.reason if isinstance(exc, UnicodeDecodeError) else exc}")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, None


def _may_matter(data: bytes, path: str, project: Any) -> bool:
    if _RELEVANT.search(data):
        return True
    if project is None or path.startswith("<"):
        return False
    for match in _IMPORT.finditer(data):
        if match.group(1) is not None:
            names = [match.group(1).decode("ascii", "replace")]
        else:
            names = [n.strip().split(" ")[0] for n in match.group(2).decode("ascii", "replace").split(",")]
        for name in names:
            level = len(name) - len(name.lstrip("."))
            try:
                if name and project.resolve(path, name.lstrip("."), level) is not None:
                    return True
            except (OSError, ValueError):
                continue
    return False


def _syntax_error(exc: cst.ParserSyntaxError, text: str, path: str) -> LintError:
    # CPython's own message is usually more precise about the line; ask it (only on failure)
    try:
        compile(text, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as py_exc:
        if py_exc.lineno:
            column = f" (column {py_exc.offset})" if py_exc.offset else ""
            return LintError(path, py_exc.lineno, f"syntax error: {py_exc.msg}{column}")
    except (ValueError, RecursionError, MemoryError):
        pass
    message = str(exc.message).strip().splitlines()[0] if exc.message else "invalid syntax"
    return LintError(path, exc.raw_line, f"syntax error: {message} (column {exc.raw_column + 1})")


def check_source(
    source: str | bytes,
    path: str,
    *,
    enabled: Callable[[str], bool] = _everything,
    project: Any = None,
) -> FileResult:
    """Lint one file's contents; `path` is used for reporting and to resolve local imports."""
    result = FileResult(path)
    if isinstance(source, bytes):
        data = source
        text, error = _decode(source, path)
        if error is not None:
            result.errors.append(error)
            return result
        assert text is not None
    else:
        text = source
        if "\0" in text:
            result.errors.append(LintError(path, text.count("\n", 0, text.index("\0")) + 1,
                                           "file contains NUL bytes (not a Python source file)"))
            return result
        data = text.encode("utf-8", "surrogatepass")
    if not text.strip():
        return result
    if not _may_matter(data, path, project):
        result.skipped = True
        return result
    old_limit = sys.getrecursionlimit()
    if old_limit < _RECURSION_FLOOR:
        sys.setrecursionlimit(_RECURSION_FLOOR)
    try:
        return _check_parsed(text, path, enabled, project, result)
    finally:
        sys.setrecursionlimit(old_limit)


def _check_parsed(text: str, path: str, enabled: Callable[[str], bool], project: Any, result: FileResult) -> FileResult:
    import libcst as cst

    from loopcheck.lint.rules.base import FileContext, all_rules, required_pattern
    from loopcheck.lint.positions import register_source

    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        result.errors.append(_syntax_error(exc, text, path))
        return result
    except RecursionError:
        result.errors.append(LintError(path, None, "too deeply nested to parse"))
        return result
    except Exception as exc:  # noqa: BLE001 - the parser's own failures must not stop the run
        result.errors.append(LintError(path, None, f"cannot parse: {type(exc).__name__}: {_one_line(exc)}"))
        return result
    register_source(module, text)
    if project is not None and not path.startswith("<"):
        from loopcheck.lint.project import remember

        remember(path, text, module)
    ctx = FileContext(path, text, module, project)
    try:
        ctx.model  # noqa: B018 - built once here, so a failure is reported once
    except RecursionError:
        result.errors.append(LintError(path, None, "too deeply nested to analyse"))
        return result
    except Exception as exc:  # noqa: BLE001
        result.errors.append(LintError(path, None, f"internal error while analysing: {type(exc).__name__}: {_one_line(exc)}"))
        return result
    findings: list[Finding] = []
    for rule_cls in all_rules():
        if not enabled(rule_cls.code):
            continue
        try:
            required = required_pattern(rule_cls)
            if required is not None and not ctx.mentions(required):
                continue  # the rule cannot find anything in this file
            findings.extend(rule_cls().check(ctx))
        except RecursionError:
            result.errors.append(LintError(path, None, f"rule {rule_cls.code} failed: too deeply nested", code=rule_cls.code))
        except Exception as exc:  # noqa: BLE001 - one failing rule must not hide the others
            result.errors.append(LintError(
                path, None, f"rule {rule_cls.code} failed: {type(exc).__name__}: {_one_line(exc)}", code=rule_cls.code))
    findings = _dedupe(findings)
    from loopcheck.lint.fixes import attach_fixes

    findings = attach_fixes(findings, ctx)  # the `fix` field of findings whose code has a fixer
    if findings:
        result.findings, result.suppressions_used = _suppress(findings, path, ctx.lines, project)
    result.findings.sort(key=_order)
    return result


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _order(f: Finding) -> tuple:
    return (f.path or "", f.line or 0, f.column or 0, f.code)


def _dedupe(findings: Iterable[Finding]) -> list[Finding]:
    seen: set[tuple] = set()
    out: list[Finding] = []
    for f in findings:
        key = (f.code, f.path, f.line, f.column)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _suppress(findings: list[Finding], path: str, lines: list[str], project: Any) -> tuple[list[Finding], list[Any]]:
    """Apply suppression comments, each finding against the lines of the file it points into."""
    from loopcheck.lint.suppress import apply_suppressions

    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.path or path, []).append(f)
    kept: list[Finding] = []
    used: list[Any] = []
    for where, group in groups.items():
        if where == path:
            file_lines = lines
        else:
            file_lines = _lines_of(where)
        k, u = apply_suppressions(group, file_lines)
        kept.extend(k)
        if where == path:
            used.extend(u)
    return kept, used


def _lines_of(path: str) -> list[str]:
    from loopcheck.lint.project import parse_path

    parsed = parse_path(Path(path))
    return parsed.source.splitlines() if parsed is not None else []


def check_file(path: str | Path, *, enabled: Callable[[str], bool] = _everything, project: Any = None) -> FileResult:
    """Lint one file on disk."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return FileResult(name, errors=[LintError(name, None, f"cannot read: {exc.strerror or exc}")])
    if project is None:
        from loopcheck.lint.project import ProjectIndex

        project = ProjectIndex()
    return check_source(data, name, enabled=enabled, project=project)


# ------------------------------------------------------------------------------------------
# many files
# ------------------------------------------------------------------------------------------

_PARALLEL_MIN_FILES = 8


def _worker_setup() -> None:
    # A worker builds and drops one syntax tree after another. The trees hold no reference
    # cycles (reference counting frees them), but their many objects trigger the cyclic
    # collector over and over, each time walking the live tree. The collector counts objects
    # alive, not allocated: with a million, it runs when one is really needed (the analysis
    # leaves a few hundred objects in cycles per file). Only the pool's own processes are
    # tuned, never the caller's.
    import gc

    gc.set_threshold(1_000_000, 50, 50)


def _import_analysis() -> None:
    import loopcheck.lint.fixes  # noqa: F401
    from loopcheck.lint.rules.base import all_rules

    all_rules()


def _check_one(args: tuple[str, Callable[[str], bool]]) -> FileResult:
    path, enabled = args
    return check_file(path, enabled=enabled)


def check_paths(
    paths: Iterable[str | Path],
    *,
    enabled: Callable[[str], bool] = _everything,
    exclude: Sequence[str] = (),
    jobs: int | None = None,
) -> LintReport:
    """Lint files and folders; results come in file order whatever the parallelism."""
    files, errors = discover(paths, exclude)
    workers = min(jobs or os.cpu_count() or 1, len(files))
    results: list[FileResult]
    if workers > 1 and len(files) >= _PARALLEL_MIN_FILES and _picklable(enabled):
        from concurrent.futures import ProcessPoolExecutor

        _import_analysis()  # once here rather than in every worker (they start as copies of this process)

        # Small chunks, so the workers finish together; in folder order, so the modules of one
        # project that the files import stay in a worker's caches.
        chunk = max(1, min(8, len(files) // (workers * 16)))
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_setup) as pool:
            results = list(pool.map(_check_one, [(str(f), enabled) for f in files], chunksize=chunk))
    else:
        results = [_check_one((str(f), enabled)) for f in files]
    findings: list[Finding] = []
    for r in results:
        findings.extend(r.findings)
        errors.extend(r.errors)
    findings = _dedupe(findings)
    skipped = sum(1 for r in results if r.skipped)
    return LintReport(findings=findings, errors=errors, files_checked=len(files) - skipped, files_skipped=skipped)


def _picklable(obj: object) -> bool:
    import pickle

    try:
        pickle.dumps(obj)
    except Exception:  # noqa: BLE001
        return False
    return True
