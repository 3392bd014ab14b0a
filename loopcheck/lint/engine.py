"""The lint engine: files -> the run's project -> loop models -> rules -> suppressions -> findings.

A run (`check_files`) shares one `Project` per project root and process: every module is parsed
at most once, and what is derived from it (walk, positions, value index, the findings of its
model) is kept for the run. Per file: read the bytes, decode them (PEP 263 coding cookies
honoured), skip files that cannot hold a training loop, parse, run each enabled rule over one
shared `FileContext` (the loop model is built once, on first use), drop duplicates.

A finding is reported in the file where the defect is. The files that import a linted file
(found backwards through the project's imports) are analysed too, and the findings their models
make in it are added: the training step lives here while the scheduler and the epoch loop are
set up in the caller, so a file gets the same findings linted alone or with its whole project.
Then suppression comments apply and the findings are sorted.

Nothing a file contains makes the engine raise: unreadable, undecodable and unparsable files,
and rules that fail, become `LintError` entries while the rest still runs.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import sys
import tokenize
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence, TypeVar

from loopcheck.findings import Finding
from loopcheck.lint.bitmasks import Rows, selected
from loopcheck.lint.discovery import discover  # noqa: F401  (re-exported: discovery lives there)
from loopcheck.lint.real_paths import RealPaths
from loopcheck.lint.stack_room import with_room

if TYPE_CHECKING:  # libcst is imported when a file is parsed: a run served by the cache never needs it
    import libcst as cst

# A file with none of these words cannot hold anything a rule looks for by itself...
_RELEVANT = re.compile(
    rb"torch|\bbackward\(|zero_grad|no_grad|inference_mode|DataLoader|state_dict|set_epoch|GradScaler|lightning|"
    rb"deepspeed|\baccelerate\b|Accelerator|[Oo]ptimi[sz]er\b|\.eval\(|\.train\(|\.step\(|transformers|timm|fabric"
)
# ... unless a project module it imports, directly or not, names PyTorch or its ecosystem (words
# of the module's text, lower case: a duck-typed training step in a module that imports nothing
# still says `backward(` itself).
_RELEVANT_WORDS = (
    "torch", "zero_grad", "no_grad", "inference_mode", "dataloader", "state_dict", "set_epoch", "gradscaler",
    "lightning", "deepspeed", "transformers", "timm",
)

T = TypeVar("T")

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
    # what `--fix` would fix in this file, per kind of fix, worked out where it was analysed
    # (`check_files(promise_fixes=True)`; see `fixes.files.keep_applied`)
    fixes_applied: dict[str, list[tuple[str, int, int]]] | None = None
    # the other project files the result depends on (absolute paths): for an analysis, those it
    # read; for a file's result from `check_files`, also the files whose analyses report into it
    # and what those read
    consulted: list[str] | None = None
    # the questions about other files the result depends on, with their answers:
    # (kind, path, argument, answer), see `Project.answer`; and the files they were answered from
    facts: list[tuple[str, str, Any, Any]] | None = None
    sources: list[str] | None = None


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


# coding cookies of packages that rewrite UTF-8 source when it is imported (f-strings on old
# Pythons, and the like): the file is UTF-8 text, the codec just is not installed here
_TRANSFORM_CODECS = frozenset({"future_fstrings", "future-fstrings", "future_annotations", "tokenize_rt"})


def _decode(data: bytes, path: str) -> tuple[str | None, LintError | None]:
    nul = data.find(b"\0")
    if nul != -1:
        return None, LintError(path, data.count(b"\n", 0, nul) + 1, "file contains NUL bytes (not a Python source file)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        message = exc.msg if hasattr(exc, "msg") else str(exc)
        if not message.startswith("unknown encoding: ") or message.split(": ", 1)[1].strip() not in _TRANSFORM_CODECS:
            return None, LintError(path, getattr(exc, "lineno", None) or 1, f"cannot decode: {message}")
        encoding = "utf-8"  # a source-transforming codec over UTF-8 text, installed where the code runs
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        line = data.count(b"\n", 0, exc.start) + 1 if isinstance(exc, UnicodeDecodeError) else 1
        return None, LintError(path, line, f"cannot decode as {encoding}: {exc.reason if isinstance(exc, UnicodeDecodeError) else exc}")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, None


def _may_matter(data: bytes, path: str, project: Any) -> bool:
    """Whether a rule could find anything in this file: it mentions PyTorch or a word of a
    training loop, or a project module it imports (transitively) does. Most of a standard
    library or a web application is neither, and is not parsed at all."""
    if _RELEVANT.search(data):
        return True
    if project is None or path.startswith("<") or not hasattr(project, "reach_mentions"):
        return False
    if project.summary(Path(path)) is None:
        return True  # Python cannot read it either: the parser says why
    return project.reach_mentions(Path(path), _RELEVANT_WORDS)


_PY2_LINES = (
    (re.compile(r"^\s*print\s+(?![\s=(.,)\]}:;+*/%&|^<>!-])\S"), "`print` statement"),
    (re.compile(r"^\s*except\s+[\w.]+\s*,\s*\w+\s*:"), "`except E, name:` clause"),
    (re.compile(r"^\s*raise\s+[\w.]+\s*,"), "`raise E, message` statement"),
    (re.compile(r"^\s*exec\s+[\"'\w]"), "`exec` statement"),
)


def python2_syntax(text: str, exc: SyntaxError) -> tuple[int, str] | None:
    """(line, what) of the first Python 2 construct when that is why the file does not parse."""
    msg = exc.msg or ""
    if msg.startswith("Missing parentheses in call to 'print'") and exc.lineno:
        return exc.lineno, "`print` statement"
    if msg.startswith("Missing parentheses in call to 'exec'") and exc.lineno:
        return exc.lineno, "`exec` statement"
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in _PY2_LINES:
            if pattern.match(line):
                return number, what
    return None


def _syntax_error(exc: cst.ParserSyntaxError, text: str, path: str) -> LintError:
    # CPython's own message is usually more precise about the line; ask it (only on failure)
    try:
        compile(text, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as py_exc:
        old = python2_syntax(text, py_exc)
        if old is not None:
            line, what = old
            return LintError(path, line, f"Python 2 syntax: {what} at line {line}; loopcheck reads Python 3")
        if py_exc.lineno:
            column = f" (column {py_exc.offset})" if py_exc.offset else ""
            return LintError(path, py_exc.lineno, f"syntax error: {py_exc.msg}{column}")
    except (ValueError, RecursionError, MemoryError):
        pass
    message = str(exc.message).strip().splitlines()[0] if exc.message else "invalid syntax"
    return LintError(path, exc.raw_line, f"syntax error: {message} (column {exc.raw_column + 1})")


def _one_run(check: Callable[..., T]) -> Callable[..., T]:
    """`check` is one run of the engine: the files on disk are taken as unchanged while it runs
    (`project.steady_files`: each file's size and time are read once)."""

    @functools.wraps(check)
    def run(*args: Any, **kwargs: Any) -> T:
        from loopcheck.lint.project import steady_files

        with steady_files():
            return check(*args, **kwargs)

    return run


@_one_run
def check_source(
    source: str | bytes,
    path: str,
    *,
    enabled: Callable[[str], bool] = _everything,
    project: Any = None,
    on_disk: bool = False,
    parsed: Any = None,
) -> FileResult:
    """Lint one file's contents; `path` is used for reporting and to resolve local imports.

    `on_disk`: the contents are the file as the project reads it (on disk, or an editor buffer
    the project overlays; `check_file`). Only then does the run's project keep its parse and
    findings, and do the files importing it add the findings their models make in it; an edited
    text in memory (a fix attempt) stands alone. `parsed`: the text's libcst module when the
    caller has parsed it already."""
    result = FileResult(path)
    with _consulting(project) as read:
        text = _text_to_check(source, path, project, result)
        if text is None:
            return result
        with _deep_recursion():
            seen = project if on_disk or project is None else _Transient(project, text)
            return with_room(_check_parsed, text, path, enabled, seen, result, parsed, read)


def _text_to_check(source: str | bytes, path: str, project: Any, result: FileResult) -> str | None:
    """The text to analyse, or None: undecodable (an error in `result`), empty, or unable to hold
    anything a rule looks for (`result.skipped`)."""
    if isinstance(source, bytes):
        data = source
        text, error = _decode(source, path)
        if error is not None:
            result.errors.append(error)
            return None
        assert text is not None
    else:
        text = source
        if "\0" in text:
            result.errors.append(LintError(path, text.count("\n", 0, text.index("\0")) + 1,
                                           "file contains NUL bytes (not a Python source file)"))
            return None
        data = text.encode("utf-8", "surrogatepass")
    if not text.strip():
        return None
    if not _may_matter(data, path, project):
        result.skipped = True
        return None
    return text


@contextmanager
def _deep_recursion() -> Iterator[None]:
    old_limit = sys.getrecursionlimit()
    if old_limit < _RECURSION_FLOOR:
        sys.setrecursionlimit(_RECURSION_FLOOR)
    try:
        yield
    finally:
        sys.setrecursionlimit(old_limit)


class _Transient:
    """A project seen through a text that may not be the file on disk (a fix attempt): it
    resolves and loads the other modules, but neither keeps this text's parse or findings nor
    adds dependents'. While the text is the file's, the analysis the project kept is reused
    (a fix run lints the unchanged file first)."""

    def __init__(self, project: Any, text: str) -> None:
        self._project = project
        self._text = text

    def __getattr__(self, name: str) -> Any:
        if name in ("remember", "keep_findings", "dependents", "parses"):
            raise AttributeError(name)
        return getattr(self._project, name)

    def findings_of(self, path: str, codes: tuple[str, ...]) -> tuple[list, list] | None:
        if not hasattr(self._project, "parsed_as") or self._project.parsed_as(path, self._text) is None:
            return None
        return self._project.findings_of(path, codes)


def _check_parsed(text: str, path: str, enabled: Callable[[str], bool], project: Any, result: FileResult,
                  parsed: Any = None, read: Any = None) -> FileResult:
    kept = project.findings_of(path, _codes_key(enabled)) if hasattr(project, "findings_of") else None
    if kept is not None:  # analysed earlier in this run, for a module it imports
        findings, lines = kept[0], text.splitlines()
        result.errors.extend(kept[1])
    else:
        analysed = _analyse(text, path, enabled, project, result.errors, parsed, read)
        if analysed is None:
            return result
        findings, lines = analysed
    if _real(path) and project is not None and hasattr(project, "dependents"):
        findings = _scoped(findings, path) + _from_dependents(path, enabled, project)
    if findings:
        result.findings, result.suppressions_used = _suppress(_dedupe(findings), path, lines, project)
    result.findings.sort(key=_order)
    return result


def _analyse(
    text: str, path: str, enabled: Callable[[str], bool], project: Any, errors: list[LintError], parsed: Any = None,
    read: Any = None,
) -> tuple[list[Finding], list[str]] | None:
    """Every finding the rules make from this file's model (unsuppressed; some may point into
    project files the model followed), and the file's lines; None when it cannot be analysed
    (the reason appended to `errors`). `read`: the project files read so far for this analysis
    (kept with its findings, which stay valid while those are unchanged)."""
    import libcst as cst

    from loopcheck.lint.positions import register_source
    from loopcheck.lint.context import FileContext
    from loopcheck.lint.tree_from_ast import read_module
    from loopcheck.lint.rules.base import all_rules, required_pattern

    module = parsed
    if module is None and hasattr(project, "parsed_as"):
        module = project.parsed_as(path, text)
    try:
        if module is None:
            module = read_module(text)
            if hasattr(project, "parses"):
                project.parses[os.path.abspath(path)] += 1
    except cst.ParserSyntaxError as exc:
        errors.append(_syntax_error(exc, text, path))
        return None
    except RecursionError:
        errors.append(LintError(path, None, "too deeply nested to parse"))
        return None
    except Exception as exc:  # noqa: BLE001 - the parser's own failures must not stop the run
        errors.append(LintError(path, None, f"cannot parse: {type(exc).__name__}: {_one_line(exc)}"))
        return None
    register_source(module, text)
    if _real(path) and hasattr(project, "remember"):
        project.remember(path, text, module)
    ctx = FileContext(path, text, module, project)
    try:
        ctx.model  # noqa: B018 - built once here, so a failure is reported once
    except RecursionError:
        errors.append(LintError(path, None, "too deeply nested to analyse"))
        return None
    except Exception as exc:  # noqa: BLE001
        errors.append(LintError(path, None, f"internal error while analysing: {type(exc).__name__}: {_one_line(exc)}"))
        return None
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
            errors.append(LintError(path, None, f"rule {rule_cls.code} failed: too deeply nested", code=rule_cls.code))
        except Exception as exc:  # noqa: BLE001 - one failing rule must not hide the others
            errors.append(LintError(
                path, None, f"rule {rule_cls.code} failed: {type(exc).__name__}: {_one_line(exc)}", code=rule_cls.code))
    findings = _dedupe(findings)
    from loopcheck.lint.fixes import attach_fixes

    findings = attach_fixes(findings, ctx)  # the `fix` field of findings whose code has a fixer
    if read is not None:
        _lines_read(findings, path, read, project)
    if _real(path) and hasattr(project, "keep_findings"):
        project.keep_findings(path, _codes_key(enabled), (findings, [e for e in errors if e.path == path]), read)
    return findings, ctx.lines


def _lines_read(findings: list[Finding], path: str, read: Any, project: Any) -> None:
    """Lines of other files in the findings (a finding located there, a message citing one): the
    analysis depends on where they are, not only on the text it read there (`Project.note_lines`;
    all of such a file's text when the project cannot place them)."""
    here = os.path.abspath(path)
    note = getattr(project, "note_lines", None)
    for finding in findings:
        for other, line in [(finding.path, finding.line), *finding.extra.get("cites", ())]:
            if not other or os.path.abspath(other) == here:
                continue
            if note is not None and line is not None:
                note(read, other, line)
            else:
                read.files[os.path.abspath(other)] = None


def _real(path: str) -> bool:
    return bool(path) and not path.startswith("<")


def _scoped(findings: Iterable[Finding], path: str) -> list[Finding]:
    """The findings located in `path` (a finding without a path is in the analysed file)."""
    here = os.path.abspath(path)
    return [f for f in findings if not f.path or f.path == path or os.path.abspath(f.path) == here]


def reports_into(analysed: str, located: str) -> bool:
    """Whether a finding the model of `analysed` makes in the file `located` is reported there. A
    test module's are not, outside the tests: it runs the project's code with toy arguments
    (defaults, a wrong type inside `pytest.raises`, a mock), and what that code does with them
    is no defect of it; the code's own callers and its own entry points speak for it."""
    return not _is_test_module(analysed) or _is_test_module(located)


def _is_test_module(path: str) -> bool:
    parts = Path(path).parts
    name = parts[-1] if parts else ""
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or any(part in ("tests", "test") for part in parts[:-1]))


def _from_dependents(path: str, enabled: Callable[[str], bool], project: Any) -> list[Finding]:
    """Findings located in `path` that the models of the project files importing it make: the
    training step lives here, the scheduler and the epoch loop in the caller's file. Each such
    file is analysed once per run and process (`Project.findings_of`)."""
    key = _codes_key(enabled)
    found: list[Finding] = []
    for dependent in project.dependents(Path(path)):
        if not reports_into(dependent, path):
            continue
        kept = project.findings_of(dependent, key)
        findings = kept[0] if kept is not None else _analyse_file(dependent, enabled, project)
        found.extend(f.with_(path=path) for f in _scoped(findings, path))
    return found


def _analyse_file(path: str, enabled: Callable[[str], bool], project: Any) -> list[Finding]:
    return _analysed(path, enabled, project).findings


def _analysed(path: str, enabled: Callable[[str], bool], project: Any) -> FileResult:
    """One file analysed on its own: every finding its model makes (unsuppressed, wherever they
    are located), its errors, or `skipped`."""
    result = FileResult(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        result.errors.append(LintError(path, None, f"cannot read: {exc.strerror or exc}"))
        return result
    with _consulting(project) as read:
        text = _text_to_check(data, path, project, result)
        if text is not None:
            with _deep_recursion():
                analysed = with_room(_analyse, text, path, enabled, project, result.errors, read=read)
            if analysed is not None:
                result.findings = analysed[0]
    _add_reads(result, read)
    return result


def _add_reads(result: FileResult, read: Any) -> None:
    """Add what a block read of the project (`Reads`) to what `result` depends on."""
    result.consulted = list(dict.fromkeys([*(result.consulted or ()), *_others(read, result.path)]))
    asked = {(k, p, a): v for k, p, a, v in result.facts or ()}
    asked.update(read.facts)
    result.facts = [(*question, answer) for question, answer in asked.items()]
    result.sources = list(dict.fromkeys([*(result.sources or ()), *read.sources]))


@contextmanager
def _consulting(project: Any) -> Iterator[Any]:
    """What the block reads of the project (`Project.consulting`), where the project records it."""
    if hasattr(project, "consulting"):
        with project.consulting() as read:
            yield read
    else:
        from loopcheck.lint.project import Reads

        yield Reads()


def _others(read: Any, path: str) -> list[str]:
    here = os.path.abspath(path)
    return [p for p in read.files if p != here]


_ALL_CODES: tuple[str, ...] = ()


def _codes_key(enabled: Callable[[str], bool]) -> tuple[str, ...]:
    """The codes `enabled` lets through: what a kept analysis of a file depends on."""
    global _ALL_CODES
    if not _ALL_CODES:  # from the rule pages: a run served by the cache never imports the rules
        from loopcheck.catalog import codes

        _ALL_CODES = tuple(codes("LC"))
    return tuple(c for c in _ALL_CODES if enabled(c))


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
            file_lines = _lines_of(where, project)
        k, u = apply_suppressions(group, file_lines)
        kept.extend(k)
        if where == path:
            used.extend(u)
    return kept, used


def _lines_of(path: str, project: Any) -> list[str]:
    from loopcheck.lint.project import parse_path

    parsed = parse_path(Path(path), project)
    return parsed.source.splitlines() if parsed is not None else []


def check_file(path: str | Path, *, enabled: Callable[[str], bool] = _everything, project: Any = None) -> FileResult:
    """Lint one file on disk."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return FileResult(name, errors=[LintError(name, None, f"cannot read: {exc.strerror or exc}")])
    if project is None:
        from loopcheck.lint.project import Project

        project = Project.for_path(name)
    return check_source(data, name, enabled=enabled, project=project, on_disk=True)


_PROJECTS: "dict[Path, Any]" = {}
_MAX_PROJECTS = 4


def known_projects() -> list[Any]:
    """The projects this process keeps (one per project root recently checked)."""
    return list(_PROJECTS.values())


def project_for(path: str | Path) -> Any:
    """The project `path` belongs to, shared by every file of it this process checks: each of
    its modules is parsed once (a parse is reused while the file's size and time are unchanged)."""
    from loopcheck.lint.project import Project, project_root

    if str(path).startswith("<"):
        return None
    root = project_root(Path(path))
    found = _PROJECTS.pop(root, None)
    if found is None:
        found = Project([root])
        while len(_PROJECTS) >= _MAX_PROJECTS:
            _PROJECTS.pop(next(iter(_PROJECTS))).close()
    _PROJECTS[root] = found  # most recently used last
    return found


def _project_in(path: str, known: dict[str, Any]) -> Any:
    """`project_for(path)`, asked once per folder in `known` (folder -> project): finding a
    project's root costs a stat per marker and folder."""
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in known:
        known[folder] = project_for(path)
    return known[folder]


# ------------------------------------------------------------------------------------------
# many files
# ------------------------------------------------------------------------------------------

_PARALLEL_MIN_FILES = 8


def _worker_setup() -> None:
    # A worker builds syntax trees and keeps them for the run. The trees hold no reference
    # cycles (reference counting frees them), but their many objects trigger the cyclic
    # collector over and over, each time walking every tree still alive: a third of a large
    # project's analysis. With a threshold of a million objects it runs when one is really
    # needed (the analysis leaves a few hundred objects in cycles per file).
    import gc

    gc.set_threshold(*_RELAXED)


_RELAXED = (1_000_000, 50, 50)


@contextmanager
def _collector_relaxed() -> Iterator[None]:
    """The pool workers' collector thresholds, for an analysis run in the caller's process;
    the caller's own thresholds come back afterwards."""
    import gc

    old = gc.get_threshold()
    gc.set_threshold(*_RELAXED)
    try:
        yield
    finally:
        # The trees the analysis keeps for the run go to the oldest generation unexamined: the
        # first collection under the old thresholds would otherwise walk all of them at once.
        gc.freeze()
        gc.unfreeze()
        gc.set_threshold(*old)


def _import_analysis() -> None:
    import loopcheck.lint.fixes  # noqa: F401
    from loopcheck.lint import stack_room
    from loopcheck.lint.rules.base import all_rules

    all_rules()
    stack_room.prepare()


class AnalysisStore(Protocol):
    """Where analyses outlive a run (the lint cache): an analysis is reused while its file and
    every project file it read are unchanged. One with a `derived` store (`cache.DerivedParts`)
    keeps each file's part of the facts derived from many files there too."""

    def analysis(self, path: str, codes: tuple[str, ...], promised: bool, answer: bool = True) -> FileResult | None:
        """The kept analysis while valid; with `answer` false, None as well when validity rests
        on asking questions again (`unsure` then tells it apart)."""

    def unsure(self, path: str, codes: tuple[str, ...]) -> bool:
        """Whether the last `analysis(answer=False)` of `path` stopped at questions to ask again."""

    def keep_analysis(self, result: FileResult, codes: tuple[str, ...], promised: bool) -> None: ...

    def learn(self, facts: Iterable[tuple[str, str, Any, Any]]) -> None:
        """Answers given in this run by analyses made in it: current, so not asked again."""


@_one_run
def check_files(
    files: Sequence[str | Path], *, enabled: Callable[[str], bool] = _everything, jobs: int | None = None,
    promise_fixes: bool = False, store: AnalysisStore | None = None,
    reported_into: dict[str, set[str]] | None = None,
) -> list[FileResult]:
    """Results of each file, in the files' order whatever the parallelism.

    Each file is analysed once, in the worker pool; so is each file outside `files` that imports
    one of them (its model may report into it). Then every finding goes to the file it is
    located in, and that file's suppression comments apply. A notebook (`.ipynb`) is a task of the
    pool too, its result placed in its cells by `notebook.check`. Files go to the workers in small
    chunks, the largest first, so that a run does not end with one worker busy on a large file
    the other could have taken earlier (cold runs of 100-170-file projects 2-11% faster than in
    folder order, which kept a package's files in one worker: a module imported by many is
    parsed once per worker either way, and the parses of a run moved by under 5%).

    `promise_fixes`: also work out, in the same worker, what `--fix` would fix in each file
    whose own findings carry fixes (`FileResult.fixes_applied`): the fix runs re-lint the file,
    which is cheap where its project is already parsed.

    `store`: analyses kept from earlier runs are reused while valid, and new ones are kept there;
    each result then lists in `consulted` every file it depends on besides its own.

    `reported_into`: filled, for each file outside `files` (real path) that the analyses of other
    files reported findings into, with those files: a result of it kept from an earlier run lacks
    what a file it did not depend on reports (a new importer)."""
    _PROJECTS.clear()  # a new run: nothing kept from an earlier one (pool workers start from here)
    if not files:
        return []
    names = [str(f) for f in files]
    from loopcheck.lint.project import parts_kept_in

    # the lint cache keeps derived facts by file, and each file's resolved imports (which files
    # import the ones linted: `_unlinted_dependents`)
    with parts_kept_in(getattr(store, "derived", None)):
        return _check_tasks(names, enabled, jobs, promise_fixes, store, reported_into)


def _check_tasks(names: list[str], enabled: Callable[[str], bool], jobs: int | None, promise_fixes: bool,
                 store: AnalysisStore | None, reported_into: dict[str, set[str]] | None) -> list[FileResult]:
    """`check_files` once its run is set up."""
    from loopcheck.lint.notebook import is_notebook

    real = RealPaths()  # each file's asked about several times below
    listed = {real(n) for n in names}
    tasks = [(n, enabled, promise_fixes) for n in names]
    tasks += [(n, enabled, False) for n in _unlinted_dependents([n for n in names if not is_notebook(n)], listed)]
    analyses = _analyses(tasks, enabled, jobs, store)
    located: dict[str, list[Finding]] = {}
    for analysis in analyses:
        if is_notebook(analysis.path):
            continue  # placed in its cells and suppressed already (`_analyse_one`)
        own = real(analysis.path)
        for f in analysis.findings:
            where = real(f.path or analysis.path)
            if where != own and not reports_into(own, where):
                continue
            located.setdefault(where, []).append(f)
            if reported_into is not None and where != own and where not in listed:
                reported_into.setdefault(where, set()).add(own)
    results = []
    for name, analysis in zip(names, analyses):
        if is_notebook(name):
            results.append(analysis)
            continue
        result = FileResult(name, errors=analysis.errors, skipped=analysis.skipped,
                            fixes_applied=analysis.fixes_applied)
        found = [f.with_(path=name) for f in located.get(real(name), ())]
        if found:
            result.findings, result.suppressions_used = _suppress(_dedupe(found), name, _text_lines(name), None)
            result.findings.sort(key=_order)
        results.append(result)
    if store is not None:
        # what each analysis read, as one dict: every file importing a module adds its reads to
        # that module's result, so a project's central analyses are merged into most results
        reads = _Reads({real(a.path): [*(a.consulted or ()), *(a.sources or ())] for a in analyses})
        projects: dict[str, Any] = {}
        for result in results:
            if is_notebook(result.path):
                continue  # not kept (its cell numbers are not cached)
            result.consulted = _depended_on(result.path, reads, _project_in(result.path, projects), real)
    return results


class _Reads:
    """What the analysis of each file (by real path) read, with the file itself, as a bit mask
    over the files met so far: a result's dependencies are the union over the files importing
    it, and a module most files import contributes to most results (merging path by path cost
    more than the rest of a re-lint of a large project)."""

    def __init__(self, reads: dict[str, list[str]]) -> None:
        self.reads = reads
        self.rows: Rows[str] = Rows()
        self.masks: dict[str, int] = {}

    def union(self, names: list[str], leave_out: tuple[str, ...]) -> list[str]:
        """The files read by the analyses of `names`, and those files, but `leave_out`."""
        mask = 0
        for name in names:
            found = self.masks.get(name)
            if found is None:
                found = self.masks[name] = self.rows.mask([os.path.abspath(name), *self.reads.get(name, ())])
            mask |= found
        for path in leave_out:
            i = self.rows.index.get(path)
            if i is not None and mask >> i & 1:
                mask ^= 1 << i
        return selected(self.rows.items, mask)


def _analyses(tasks: list[tuple[str, Callable[[str], bool], bool]], enabled: Callable[[str], bool], jobs: int | None,
              store: AnalysisStore | None) -> list[FileResult]:
    """The analysis of each task: kept in `store` and still valid, else made (and kept).

    Kept analyses whose file or a file they read changed are made again first; those that only
    asked questions about a changed file are judged after that, with the answers the new
    analyses gave (one derived over many files, like what the project saves, is then not worked
    out again)."""
    if store is None:
        return _analyse_all(tasks, enabled, jobs)
    from loopcheck.lint.notebook import is_notebook

    codes = _codes_key(enabled)
    found: list[FileResult | None] = [None] * len(tasks)
    books = {i for i, t in enumerate(tasks) if is_notebook(t[0])}  # made in the first round, never kept
    for answered in (False, True):
        kept = [found[i] if found[i] is not None or i in books else store.analysis(t[0], codes, t[2], answer=answered)
                for i, t in enumerate(tasks)]
        todo = [i for i, k in enumerate(kept)
                if k is None and (answered or i in books or not store.unsure(tasks[i][0], codes))]
        made = _analyse_all([tasks[i] for i in todo], enabled, jobs)
        for i, analysis in zip(todo, made):
            kept[i] = analysis
            if i in books:
                continue
            store.keep_analysis(analysis, codes, tasks[i][2])
            store.learn(analysis.facts or ())
        found = kept
    return found  # type: ignore[return-value]


def _analyse_all(tasks: list[tuple[str, Callable[[str], bool], bool]], enabled: Callable[[str], bool],
                 jobs: int | None) -> list[FileResult]:
    workers = min(jobs or os.cpu_count() or 1, len(tasks))
    if workers > 1 and len(tasks) >= _PARALLEL_MIN_FILES and _picklable(enabled):
        from concurrent.futures import ProcessPoolExecutor

        _import_analysis()  # once here rather than in every worker (they start as copies of this process)
        chunk = max(1, min(8, len(tasks) // (workers * 16)))
        from loopcheck.lint.project import file_stamp

        order = sorted(range(len(tasks)), key=lambda i: -(file_stamp(tasks[i][0]) or (0,))[0])
        results: list[FileResult | None] = [None] * len(tasks)
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_setup) as pool:
            for i, result in zip(order, pool.map(_analyse_one, [tasks[i] for i in order], chunksize=chunk)):
                results[i] = result
        return results  # type: ignore[return-value]
    with _collector_relaxed():
        return [_analyse_one(task) for task in tasks]


def _depended_on(path: str, reads: "_Reads", project: Any, real: RealPaths) -> list[str]:
    """Every file the result of `path` depends on besides its own: the files importing it (their
    analyses may report into it, whatever they report now), and what each of those analyses,
    and its own, read or answered questions from (`reads`, by the analysed file's real path)."""
    contributors = [real(path)] + (project.dependents(Path(path)) if project is not None else [])
    return reads.union(contributors, (os.path.abspath(path), real(path)))


def _analyse_one(args: tuple[str, Callable[[str], bool], bool]) -> FileResult:
    """One task of a run: a file's analysis, or a notebook's result (its findings in cells,
    suppressed: notebooks are not rewritten and nothing imports them)."""
    from loopcheck.lint.notebook import check as check_notebook, is_notebook

    path, enabled, promise_fixes = args
    project = project_for(path)
    if is_notebook(path):
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            return FileResult(path, errors=[LintError(path, None, f"cannot read: {exc.strerror or exc}")])
        return check_notebook(path, raw, enabled=enabled, project=project)
    result = _analysed(path, enabled, project)
    if promise_fixes and result.findings:
        from loopcheck.lint.fixes.files import SourceText, fixes_applied
        from loopcheck.lint.output.report import fix_kind

        kinds = {fix_kind(f) for f in _scoped(result.findings, path)} - {None}
        if kinds:
            try:
                text = SourceText.decode(Path(path).read_bytes()).text
            except (OSError, ValueError):
                return result  # the command works it out from the bytes it holds
            with _consulting(project) as read:  # what the fixed texts' checks read counts too
                result.fixes_applied = fixes_applied(kinds, text, path, enabled)
            _add_reads(result, read)
    return result


def _unlinted_dependents(names: list[str], linted: set[str] | None = None) -> list[str]:
    """The project files outside `names` that import one of them (none when `names` hold the
    whole project, as when its root is linted). `linted`: the real paths of `names`."""
    if linted is None:
        linted = {os.path.realpath(n) for n in names}
    by_project: dict[int, tuple[Any, list[str]]] = {}
    known: dict[str, Any] = {}
    for name in names:
        project = _project_in(name, known)
        if project is not None:
            by_project.setdefault(id(project), (project, []))[1].append(name)
    extra: dict[str, None] = {}
    for project, mine in by_project.values():
        if all(str(f) in linted for f in project.files()):
            continue
        extra.update((f, None) for f in project.dependents_of(mine) if f not in linted)
    return list(extra)


def _text_lines(path: str) -> list[str]:
    try:
        text, _ = _decode(Path(path).read_bytes(), path)
    except OSError:
        return []
    return text.splitlines() if text is not None else []


def check_paths(
    paths: Iterable[str | Path],
    *,
    enabled: Callable[[str], bool] = _everything,
    exclude: Sequence[str] = (),
    jobs: int | None = None,
) -> LintReport:
    """Lint files and folders; results come in file order whatever the parallelism."""
    files, errors = discover(paths, exclude)
    results = check_files(files, enabled=enabled, jobs=jobs)
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
