"""`loopcheck lint`: find files, check them (through the cache), apply configuration, report.

The engine checks one file at a time and knows nothing of configuration files; this module
resolves each file's configuration, filters and re-grades the engine's findings with it
(`per-file-ignores`, `severity`), adds unused-suppression findings, runs the fixer for `--fix`
and `--diff`, keeps only the findings located in the files being linted (evidence may come
from other modules, findings never land in them), renders the report and decides the exit code:

    0  no finding at or above the fail level (or --exit-zero)
    1  findings at or above the fail level (or, with --diff, fixes to apply)
    2  a file could not be read or parsed, a path does not exist, or a usage / configuration error

`-` as a path reads the source from standard input (`--stdin-filename` names it, for the
configuration, local imports and the report); `--watch` runs again whenever a file changes.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, TextIO

from loopcheck.catalog import page
from loopcheck.errors import ConfigError
from loopcheck.findings import Finding
from loopcheck.lint.config import Config, Overrides, Resolver, lint_codes
from loopcheck.lint.output import FileError, Format, Report
from loopcheck.lint.output.report import cell_of, plural
from loopcheck.lint.real_paths import RealPaths
from loopcheck.lint.suppress import UNUSED_CODE, unused

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
STDIN = "-"


@dataclass
class LintOptions:
    paths: list[Path] = field(default_factory=lambda: [Path(".")])
    format: str = "text"
    select: str | None = None
    extend_select: str | None = None
    ignore: str | None = None
    fail_on: str | None = None
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    statistics: bool = False
    output: Path | None = None
    jobs: int | None = None
    no_cache: bool = False
    config: Path | None = None
    isolated: bool = False
    warn_unused_suppressions: bool = False
    force_exclude: bool = False
    runtime_log: Path | None = None  # a probe run log: mark the findings that run confirmed
    respect_gitignore: bool = True
    extend_exclude: tuple[str, ...] = ()
    stdin_filename: str | None = None
    exit_zero: bool = False
    quiet: bool = False
    add_noqa: bool = False
    show_fixes: bool = False
    watch: bool = False
    watch_interval: float = 0.5


class UsageError(Exception):
    """A bad combination of options: reported in one line, exit code 2."""


class EnabledCodes:
    """A picklable `enabled(code) -> bool` for the engine (worker processes receive it)."""

    def __init__(self, codes: Iterable[str]) -> None:
        self.codes = frozenset(codes)

    def __call__(self, code: str) -> bool:
        return code in self.codes


@dataclass
class FileOutcome:
    """The post-configuration results of one checked file."""

    findings: list[Finding]
    errors: list[FileError]


def _say(message: str) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")


def display_path(path: str | Path) -> str:
    """A path as reported: relative to the working directory when inside it, '/' separators."""
    p = Path(path)
    if p.is_absolute():
        try:
            return p.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return p.as_posix()
    return p.as_posix()


def _validate(opts: LintOptions) -> Format:
    try:
        fmt = Format.parse(opts.format)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if opts.config is not None and opts.isolated:
        raise UsageError("--config and --isolated cannot be used together")
    if opts.unsafe_fixes and not (opts.fix or opts.diff):
        raise UsageError("--unsafe-fixes only applies together with --fix or --diff")
    if opts.statistics and fmt in (Format.SARIF, Format.GITHUB):
        raise UsageError(f"--statistics cannot be combined with --format {fmt.value}")
    if opts.jobs is not None and opts.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    stdin = [p for p in opts.paths if str(p) == STDIN]
    if len(stdin) > 1:
        raise UsageError("`-` (standard input) can be given once")
    if opts.stdin_filename is not None and not stdin:
        raise UsageError("--stdin-filename names standard input: give `-` as the path")
    if opts.add_noqa and (opts.fix or opts.diff):
        raise UsageError("--add-noqa cannot be combined with --fix or --diff")
    if opts.watch and (stdin or opts.fix or opts.diff or opts.add_noqa or opts.output):
        raise UsageError("--watch cannot be combined with `-`, --fix, --diff, --add-noqa or --output")
    if opts.add_noqa and stdin:
        raise UsageError("--add-noqa rewrites files: it cannot read standard input")
    if opts.show_fixes and not (opts.fix or opts.diff):
        raise UsageError("--show-fixes only applies together with --fix or --diff")
    return fmt


def run(opts: LintOptions) -> int:
    """Run `loopcheck lint` with these options; returns the exit code."""
    try:
        fmt = _validate(opts)
        overrides = Overrides.from_cli(opts.select, opts.extend_select, opts.ignore, opts.fail_on)
        resolver = Resolver(overrides, config_file=opts.config, isolated=opts.isolated)
        return _Run(opts, fmt, resolver).execute()
    except (UsageError, ConfigError) as exc:
        _say(f"error: {exc}")
        return EXIT_ERROR


class _Run:
    def __init__(self, opts: LintOptions, fmt: Format, resolver: Resolver) -> None:
        self.opts = opts
        self.fmt = fmt
        self.resolver = resolver
        self.sources: dict[str, list[str]] = {}  # display path (and cell) -> lines, for text snippets
        self.real = RealPaths()  # `os.path.realpath`, each folder's once per run (`once` starts afresh)
        self.stdin_data: bytes | None = None

    # -- files ---------------------------------------------------------------------------------

    def collect(self, quiet: bool = False) -> tuple[list[Path], list[Any]]:
        """The files to check, and the named paths that do not exist (a folder without Python
        files is a warning, not an error)."""
        from loopcheck.lint.discovery import discover

        files, problems = discover(
            [str(p) for p in self.opts.paths if str(p) != STDIN],
            excluded=self.excluded,
            respect_gitignore=self.opts.respect_gitignore,
            force_exclude=self.opts.force_exclude,
            notebooks=True,
        )
        errors = []
        for problem in problems:
            if Path(problem.path).is_dir():  # a folder without Python files is not an error
                if not (quiet or self.opts.quiet):
                    _say(f"warning: {problem.path}: {problem.message}")
            else:
                errors.append(problem)
        return files, errors

    def excluded(self, path: Path, below: Path | None) -> bool:
        """The configured `exclude` / `extend-exclude` (and --extend-exclude) for a path found
        under the named folder `below` (None: a named path, or --force-exclude)."""
        if self.resolver.for_path(path).is_excluded(path, below=below):
            return True
        from loopcheck.lint.config import path_matches

        return any(path_matches(path, Path.cwd(), pattern, below=below) for pattern in self.opts.extend_exclude)

    # -- the run -------------------------------------------------------------------------------

    def execute(self) -> int:
        if self.opts.watch:
            from loopcheck.lint.watch import watch

            return watch(self.once, self.snapshot, self.opts.watch_interval, _say)
        return self.once()

    def snapshot(self) -> object:
        """What a change of would change the report: the files to check and their stamps, and
        the configuration and ignore files of the working directory."""
        files, _ = self.collect(quiet=True)
        stamps = []
        for f in [*files, *(Path(n) for n in ("pyproject.toml", "loopcheck.toml", ".gitignore", ".ignore"))]:
            try:
                st = f.stat()
                stamps.append((str(f), st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append((str(f), None, None))
        return stamps

    def stdin_path(self) -> Path | None:
        if not any(str(p) == STDIN for p in self.opts.paths):
            return None
        return Path(self.opts.stdin_filename or STDIN)

    def once(self) -> int:
        self.sources = {}
        self.real = RealPaths()
        files, problems = self.collect()
        stdin = self.stdin_path()
        if stdin is not None:
            if self.stdin_data is None:
                self.stdin_data = sys.stdin.buffer.read()
            excluded = self.opts.force_exclude and self.opts.stdin_filename and self.excluded(stdin, None)
            if not excluded:
                files.append(stdin)
        for problem in problems:
            _say(f"error: {problem.path}: {problem.message}")
        configs = {f: self.resolver.for_path(f) for f in files}
        outcomes = self.check(files, configs)
        fixed, diffs, notes, done = 0, [], [], []
        if self.opts.fix or self.opts.diff:
            fixed, diffs, notes, done = self.apply_fixes(files, configs, outcomes)
        linted = {self.key(f) for f in files}
        findings: list[Finding] = []
        errors: list[FileError] = []
        seen: set[tuple] = set()
        failing = 0
        for f in files:
            outcome = outcomes[f]
            errors.extend(outcome.errors)
            for finding in outcome.findings:
                where = Path(finding.path) if finding.path else f
                if self.key(where) not in linted:
                    continue  # found in a module this file uses, which is not being linted (or is excluded)
                # a helper module's event reached from two scripts is one finding, not two
                k = (finding.code, self.key(where), finding.line, finding.column, cell_of(finding))
                if k in seen:
                    continue
                seen.add(k)
                findings.append(finding.with_(path=self.shown(where, stdin)))
                if finding.severity >= configs[f].fail_on:
                    failing += 1
        errors = [replace(e, path=self.shown(Path(e.path), stdin)) for e in errors]
        shown_errors = errors + [_file_error(p) for p in problems] if self.fmt.machine else errors
        if self.opts.runtime_log is not None:
            findings = _confirmed(findings, self.opts.runtime_log)
        report = Report(findings=findings, errors=shown_errors, files_checked=len(files), fixed=fixed)
        if self.opts.show_fixes and done:
            from loopcheck.lint.fixes.files import fixed_lines

            report.notes.append(f"Fixed {plural(len(done), 'finding')}:")
            report.notes.extend(fixed_lines((self.shown(Path(f.path or p), stdin), f) for p, f in done))
        report.notes.extend(notes)
        trouble = bool(errors or problems)
        if self.opts.add_noqa:
            return self.add_noqa(findings, trouble)
        if self.opts.diff:
            self.write("".join(diffs))
            self.stderr_notes(report)
            if diffs:
                flags = "--fix --unsafe-fixes" if self.opts.unsafe_fixes else "--fix"
                _say(f"{plural(len(diffs), 'file')} would be changed by `loopcheck lint {flags}`")
            return EXIT_ERROR if trouble else (EXIT_FINDINGS if diffs else EXIT_OK)
        if stdin is not None and self.opts.fix:
            sys.stdout.buffer.write(self.stdin_data or b"")  # the fixed source; the report goes to stderr
            sys.stdout.flush()
            from loopcheck.lint.output.text import concise

            sys.stderr.write(concise(report))
            self.stderr_notes(report)
        elif files or not problems or self.fmt.machine:
            self.render(report)
        if trouble:
            return EXIT_ERROR
        return EXIT_FINDINGS if failing and not self.opts.exit_zero else EXIT_OK

    def key(self, path: Path) -> Path:
        return Path(self.real(path))

    def shown(self, path: Path, stdin: Path | None) -> str:
        """The path as reported (standard input without a name is `-`)."""
        if stdin is not None and self.key(path) == self.key(stdin) and self.opts.stdin_filename is None:
            return STDIN
        return display_path(path)

    def stderr_notes(self, report: Report) -> None:
        from loopcheck.lint.output.text import error_lines

        sys.stderr.write(error_lines(report))
        for note in report.notes:
            _say(note)

    def add_noqa(self, findings: list[Finding], trouble: bool) -> int:
        from loopcheck.lint.noqa import add_to_file
        from loopcheck.lint.notebook import is_notebook

        by_file: dict[str, list[Finding]] = {}
        for f in findings:
            by_file.setdefault(f.path or "", []).append(f)
        added = 0
        for path, group in sorted(by_file.items()):
            if is_notebook(path):
                _say(f"warning: {path}: --add-noqa does not rewrite notebooks ({plural(len(group), 'finding')} left)")
                continue
            try:
                added += add_to_file(Path(path), group)
            except (OSError, ValueError) as exc:
                _say(f"error: {path}: cannot add noqa comments: {exc}")
                trouble = True
        _say(f"Added {plural(added, 'noqa comment')}.")
        return EXIT_ERROR if trouble else EXIT_OK

    def check(self, files: list[Path], configs: dict[Path, Config]) -> dict[Path, FileOutcome]:
        from loopcheck.lint import cache as cache_mod
        from loopcheck.lint.summary import stored_in

        use_cache = not (self.opts.no_cache or self.opts.fix or self.opts.diff)
        cache = cache_mod.Cache(cache_mod.project_root()) if use_cache and files else None
        with stored_in(cache.summaries if cache else None, cache.prepare if cache else None):
            try:
                return self._check(files, configs, cache)
            finally:
                if cache is not None:
                    cache.close()

    def _check(self, files: list[Path], configs: dict[Path, Config], cache: Any) -> dict[Path, FileOutcome]:
        from loopcheck.lint.notebook import is_notebook

        stdin = self.stdin_path()
        outcomes: dict[Path, FileOutcome] = {}
        data: dict[Path, bytes] = {}
        todo: list[Path] = []
        kept: dict[Path, Any] = {}  # files whose kept result is used: its cache entry
        here: list[Path] = []  # checked in this process: standard input
        for f in files:
            if stdin is not None and f == stdin:
                data[f] = self.stdin_data or b""
                here.append(f)
                continue
            try:
                data[f] = f.read_bytes()
            except OSError as exc:
                outcomes[f] = FileOutcome([], [FileError(str(f), None, f"cannot read: {exc.strerror or exc}")])
                continue
            if cache is not None and not is_notebook(f):  # a notebook's cell numbers are not cached
                entry = cache.get(f, data[f], self.cache_key(configs[f]))
                if entry is not None:
                    outcomes[f] = FileOutcome(entry.findings, entry.errors)
                    kept[f] = entry
                    continue
            todo.append(f)
        union: set[str] = set()
        for f in todo + here:
            union |= configs[f].enabled_codes
        promise = not (self.opts.fix or self.opts.diff)
        reported_into: dict[str, set[str]] = {}
        results = list(_check_files(todo, EnabledCodes(union), self.opts.jobs, promise, cache, reported_into))
        # A file whose kept result was used may have gained an importer that reports into it: its
        # result is made again (the analyses just made are kept, so this costs little).
        stale = [f for f, entry in kept.items() if _reported_beyond(reported_into, f, entry, self.real)]
        if stale:
            for f in stale:
                del outcomes[f]
            again = set().union(*(configs[f].enabled_codes for f in stale))
            results += list(_check_files(stale, EnabledCodes(again), self.opts.jobs, promise, cache))
        for f in here:
            results.append((f, _check_one((str(f), EnabledCodes(union), data[f], self.opts.stdin_filename is not None))))
        for f, result in results:
            outcome = self.postprocess(f, configs[f], result, data[f])
            if promise:
                # worked out with the run's codes: good for a file that checks exactly those
                same = enabled_for(configs[f], f).codes == union
                applied = getattr(result, "fixes_applied", None) if same else None
                outcome = self.promise_only_applied(f, configs[f], outcome, data[f], applied)
            outcomes[f] = outcome
            if cache is not None and f not in here and not is_notebook(f):
                cache.put(f, data[f], self.cache_key(configs[f]), outcome.findings, outcome.errors,
                          getattr(result, "consulted", None))
        return outcomes

    def promise_only_applied(self, f: Path, config: Config, outcome: FileOutcome, data: bytes,
                             applied: dict | None = None) -> FileOutcome:
        """Drop the fixes `--fix` would not apply (they are tried, as a fix run would, unless
        the worker that analysed the file already did: `applied`)."""
        from loopcheck.lint.output.report import fix_kind

        if outcome.errors or not any(fix_kind(x) for x in outcome.findings):
            return outcome
        from loopcheck.lint.fixes.files import SourceText, keep_applied

        try:
            text = SourceText.decode(data).text
        except ValueError:
            return outcome
        mine = [x for x in outcome.findings if self.key(Path(x.path or f)) == self.key(f)]
        others = [x for x in outcome.findings if self.key(Path(x.path or f)) != self.key(f)]
        kept = keep_applied(mine, text, str(f), enabled_for(config, f), applied)
        return FileOutcome(kept + others, outcome.errors)

    def cache_key(self, config: Config) -> str:
        return f"{config.fingerprint()}:{int(self.opts.warn_unused_suppressions)}"

    def postprocess(self, f: Path, config: Config, result: Any, data: bytes) -> FileOutcome:
        return apply_config(f, config, result, data, warn_unused=self.opts.warn_unused_suppressions)

    # -- fixes ---------------------------------------------------------------------------------

    def apply_fixes(
        self, files: list[Path], configs: dict[Path, Config], outcomes: dict[Path, FileOutcome]
    ) -> tuple[int, list[str], list[str], list[tuple[Path, Finding]]]:
        """Fix the files that have fixable findings: (findings fixed, unified diffs, notes on
        what was not fixed and why, the fixed findings with their files)."""
        from loopcheck.lint.fixes import applicability
        from loopcheck.lint.fixing import fix_source
        from loopcheck.lint.fixes.files import SourceText
        from loopcheck.lint.notebook import is_notebook

        allowed = {"safe", "unsafe"} if self.opts.unsafe_fixes else {"safe"}
        stdin = self.stdin_path()
        fixed = 0
        diffs: list[str] = []
        notes: list[str] = []
        done: list[tuple[Path, Finding]] = []
        for f in files:
            outcome = outcomes[f]
            name = self.shown(f, stdin)
            if is_notebook(f):
                waiting = sum(1 for x in outcome.findings if x.extra.get("fixable"))
                if waiting:
                    notes.append(f"{name}: {plural(waiting, 'fixable finding')} not fixed: --fix does not rewrite notebooks")
                continue
            if outcome.errors or not any(applicability(x.code) in allowed for x in outcome.findings):
                continue
            try:
                data = self.stdin_data or b"" if f == stdin else f.read_bytes()
                source = SourceText.decode(data)
            except (OSError, ValueError) as exc:
                notes.append(f"{name}: not fixed: {getattr(exc, 'strerror', None) or exc}")
                continue
            config = configs[f]
            result = fix_source(source.text, str(f), unsafe=self.opts.unsafe_fixes, enabled=enabled_for(config, f))
            for finding, why in result.rejected:
                notes.append(f"{name}:{finding.line}:{finding.column}: {finding.code} not fixed: {why}")
            if not result.fixed or result.source == source.text:
                continue
            try:
                new = source.encode(result.source)
            except ValueError as exc:
                notes.append(f"{name}: not fixed: {exc}")
                continue
            fixed += len(result.fixed)
            done.extend((f, x) for x in result.fixed)
            if self.opts.diff:
                shown = name if f == stdin else display_path(f.resolve())
                diffs.append("".join(difflib.unified_diff(
                    source.text.splitlines(keepends=True), result.source.splitlines(keepends=True),
                    fromfile=f"a/{shown}", tofile=f"b/{shown}",
                )))
                continue
            if f == stdin:
                self.stdin_data = new
            else:
                f.write_bytes(new)
            # check the fixed file again, as a whole (suppressions, local imports and all)
            again = _check_one((str(f), enabled_for(config, f), new if f == stdin else None,
                                f != stdin or self.opts.stdin_filename is not None))
            outcomes[f] = self.postprocess(f, config, again, new)
        return fixed, diffs, notes, done

    # -- output --------------------------------------------------------------------------------

    def write(self, text: str) -> None:
        with self.stream() as out:
            out.write(text)

    def stream(self) -> Any:
        if self.opts.output is None:
            return _Borrowed(sys.stdout)
        try:
            return self.opts.output.open("w", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {self.opts.output}: {exc.strerror or exc}") from None

    def render(self, report: Report) -> None:
        from loopcheck.lint.output import machine, sarif, text

        if report.errors and not self.fmt.machine:
            sys.stderr.write(text.error_lines(report))
        if report.notes and self.fmt is not Format.TEXT:
            for note in report.notes:
                _say(note)
        with self.stream() as out:
            if self.fmt is Format.JSON:
                out.write(machine.json_statistics(report) if self.opts.statistics else machine.json_report(report))
            elif self.fmt is Format.SARIF:
                out.write(sarif.sarif(report))
            elif self.fmt is Format.GITHUB:
                out.write(machine.github(report))
            elif self.fmt is Format.CONCISE:
                out.write(text.statistics_text(report) if self.opts.statistics else text.concise(report))
            else:
                text.full(report, text.console(out, colour=self.opts.output is None), self.source_lines,
                          statistics=self.opts.statistics, quiet=self.opts.quiet)

    def source_lines(self, finding: Finding) -> list[str]:
        """The lines a finding's line number counts in: its file's, or its notebook cell's."""
        path, cell = finding.path or "", cell_of(finding)
        key = f"{path}\0{cell}"
        if key not in self.sources:
            if cell is not None:
                from loopcheck.lint.notebook import cell_lines

                self.sources[key] = cell_lines(path, cell)
            elif path == STDIN or (self.opts.stdin_filename and Path(path).resolve() == Path(self.opts.stdin_filename).resolve()):
                self.sources[key] = (self.stdin_data or b"").decode("utf-8", errors="replace").splitlines()
            else:
                try:
                    self.sources[key] = Path(path).read_bytes().decode("utf-8", errors="replace").splitlines()
                except OSError:
                    self.sources[key] = []
        return self.sources[key]


class _Borrowed:
    """A context manager around a stream this module must not close (stdout).

    A reader that goes away early (`loopcheck lint . | head`) is not an error: the rest of the
    report is dropped quietly and the exit code still tells the result.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __enter__(self) -> TextIO:
        return self.stream

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> bool:
        try:
            if kind is None:
                self.stream.flush()
        except BrokenPipeError:
            kind = BrokenPipeError
        if kind is BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())
            except (OSError, ValueError):
                pass
            finally:
                os.close(devnull)
            return True
        return False


def enabled_for(config: Config, path: Path) -> EnabledCodes:
    """The codes checked in one file (its per-file-ignores applied)."""
    return EnabledCodes(c for c in config.enabled_codes if config.is_enabled(c, path))


def apply_config(f: Path, config: Config, result: Any, data: bytes, *, warn_unused: bool = False) -> FileOutcome:
    """Apply a file's configuration to the engine's result for it: drop disabled codes
    (per-file-ignores included), re-grade severities, add LC001 findings when wanted."""
    findings: list[Finding] = []
    for finding in result.findings:
        where = Path(finding.path) if finding.path else f
        if not config.is_enabled(finding.code, where):
            continue
        severity = config.severity_of(finding.code, finding.severity)
        path = str(where.resolve())
        findings.append(finding.with_(severity=severity, path=path))
    errors = [_file_error(e) for e in result.errors]
    from loopcheck.lint.notebook import is_notebook

    if reports_unused(config, f, warn_unused) and not result.errors and not is_notebook(f):
        meta = page(UNUSED_CODE)
        enabled = [c for c in config.enabled_codes if config.is_enabled(c, f)]
        findings.extend(
            unused(
                data.decode("utf-8", errors="replace").splitlines(),
                result.suppressions_used or [],
                str(f.resolve()),
                active=lambda sel: any(code.startswith(sel) for code in enabled),
                known=lint_codes(),
                name=meta.name,
                severity=config.severity_of(UNUSED_CODE, meta.severity),
            )
        )
    return FileOutcome(findings, errors)


def reports_unused(config: Config, f: Path, warn_unused: bool = False) -> bool:
    """Whether LC001 (unused suppressions) is reported in f: asked for, or selected by name."""
    wanted = warn_unused or UNUSED_CODE in config.enabled_codes
    return wanted and not config.is_ignored(UNUSED_CODE, f)


def _confirmed(findings: list[Finding], log: Path) -> list[Finding]:
    from loopcheck.lint.runtime_link import confirm, runtime_findings
    from loopcheck.probe.report import LogError

    try:
        return confirm(findings, runtime_findings(log), display_path(log))
    except LogError as err:
        raise UsageError(f"--runtime-log: {err}") from None


_COLUMN = re.compile(r"^(?P<message>.*) \(column (?P<column>\d+)\)$")


def _file_error(e: Any) -> FileError:
    """A FileError from an engine or discovery error; a syntax error's "(column N)" becomes
    its column, so it is reported as `path:line:column:` like a finding."""
    if isinstance(e, FileError):
        return e
    message = str(getattr(e, "message", e))
    column = None
    found = _COLUMN.match(message)
    if found is not None and getattr(e, "line", None):
        message, column = found.group("message"), int(found.group("column"))
    return FileError(str(getattr(e, "path", "")), getattr(e, "line", None), message, getattr(e, "code", None),
                     column=column, cell=getattr(e, "cell", None))


def _check_one(args: tuple) -> Any:
    """The engine's result for one file given apart (`args`: path, enabled codes, and for
    standard input its bytes and whether it has a name to follow imports from); notebooks
    through notebook.py."""
    from loopcheck.lint.engine import check_file, check_source, project_for
    from loopcheck.lint.notebook import check as check_notebook, is_notebook

    path, enabled = args[0], args[1]
    data = args[2] if len(args) > 2 else None
    if is_notebook(path):
        try:
            raw = data if data is not None else Path(path).read_bytes()
        except OSError as exc:
            from loopcheck.lint.engine import FileResult, LintError

            return FileResult(path, errors=[LintError(path, None, f"cannot read: {exc.strerror or exc}")])
        return check_notebook(path, raw, enabled=enabled, project=project_for(path))
    if data is not None:
        return check_source(data, path, enabled=enabled, project=project_for(path) if args[3] else None)
    return check_file(path, enabled=enabled, project=project_for(path))


def _reported_beyond(reported_into: dict[str, set[str]], f: Path, entry: Any, real: RealPaths) -> bool:
    """Some file analysed in this run reports into `f` and is not among what `f`'s kept result
    (`entry`) depends on. Only the files with such a report have their dependencies listed and
    resolved: a kept result names hundreds, and resolving each (a system call per path
    component) was most of a warm run."""
    into = reported_into.get(real(f))
    return bool(into) and bool(into - {real(d) for d in entry.depends_on})


def _check_files(files: list[Path], enabled: EnabledCodes, jobs: int | None,
                 promise_fixes: bool = False, store: Any = None,
                 reported_into: dict[str, set[str]] | None = None) -> Iterable[tuple[Path, Any]]:
    """Engine results of each file, from one run of the engine (each file analysed once, in
    parallel processes when there are enough, or taken from `store` where still valid; notebooks
    in the same pool, never kept). `reported_into`: see `engine.check_files`."""
    from loopcheck.lint.engine import check_files

    results = check_files(files, enabled=enabled, jobs=jobs, promise_fixes=promise_fixes, store=store,
                          reported_into=reported_into)
    yield from zip(files, results)
