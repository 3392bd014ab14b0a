"""`loopcheck lint`: find files, check them (through the cache), apply configuration, report.

The engine checks one file at a time and knows nothing of configuration files; this module
resolves each file's configuration, filters and re-grades the engine's findings with it
(`per-file-ignores`, `severity`), adds unused-suppression findings, runs the fixer for `--fix`
and `--diff`, renders the report and decides the exit code:

    0  no finding at or above the fail level
    1  findings at or above the fail level (or, with --diff, fixes to apply)
    2  a file could not be read or parsed, a path does not exist, or a usage / configuration error
"""

from __future__ import annotations

import difflib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, TextIO

from loopcheck.catalog import page
from loopcheck.errors import ConfigError
from loopcheck.findings import Finding
from loopcheck.lint.config import Config, Overrides, Resolver, lint_codes
from loopcheck.lint.output import FileError, Format, Report
from loopcheck.lint.output.report import plural
from loopcheck.lint.suppress import UNUSED_CODE, unused

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


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
        self.sources: dict[str, list[str]] = {}  # display path -> lines, for text snippets

    # -- files ---------------------------------------------------------------------------------

    def collect(self) -> tuple[list[Path], list[FileError]]:
        from loopcheck.lint.engine import discover

        files, problems = discover([str(p) for p in self.opts.paths])
        errors: list[FileError] = []
        for problem in problems:
            if Path(problem.path).is_dir():  # a folder without Python files is not an error
                _say(f"warning: {problem.path}: {problem.message}")
            else:
                errors.append(_file_error(problem))
        named = [Path(p).resolve() for p in self.opts.paths]
        kept: list[Path] = []
        for f in files:
            path = Path(f)
            resolved = path.resolve()
            if resolved in named:  # a file named on the command line
                if not (self.opts.force_exclude and self.resolver.for_path(path).is_excluded(path)):
                    kept.append(path)
                continue
            # the deepest named folder it was found in: only what lies below it can be excluded
            below = max((d for d in named if d in resolved.parents), key=lambda d: len(d.parts), default=None)
            if self.opts.force_exclude:
                below = None
            if not self.resolver.for_path(path).is_excluded(path, below=below):
                kept.append(path)
        return kept, errors

    # -- the run -------------------------------------------------------------------------------

    def execute(self) -> int:
        files, errors = self.collect()
        configs = {f: self.resolver.for_path(f) for f in files}
        outcomes = self.check(files, configs)
        fixed = 0
        diffs: list[str] = []
        if self.opts.fix or self.opts.diff:
            fixed, diffs = self.apply_fixes(files, configs, outcomes)
        findings: list[Finding] = []
        seen: set[tuple] = set()
        failing = 0
        for f in files:
            outcome = outcomes[f]
            errors.extend(outcome.errors)
            for finding in outcome.findings:
                # a helper module's event reached from two scripts is one finding, not two
                key = (finding.code, finding.path, finding.line, finding.column)
                if key in seen:
                    continue
                seen.add(key)
                findings.append(finding.with_(path=display_path(finding.path or f)))
                if finding.severity >= configs[f].fail_on:
                    failing += 1
        errors = [FileError(display_path(e.path), e.line, e.message, e.code) for e in errors]
        if self.opts.runtime_log is not None:
            findings = _confirmed(findings, self.opts.runtime_log)
        report = Report(findings=findings, errors=errors, files_checked=len(files), fixed=fixed)
        if self.opts.diff:
            self.write("".join(diffs))
            if errors:
                from loopcheck.lint.output.text import error_lines

                sys.stderr.write(error_lines(report))
            if diffs:
                flags = "--fix --unsafe-fixes" if self.opts.unsafe_fixes else "--fix"
                _say(f"{plural(len(diffs), 'file')} would be changed by `loopcheck lint {flags}`")
            return EXIT_ERROR if errors else (EXIT_FINDINGS if diffs else EXIT_OK)
        self.render(report)
        if errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if failing else EXIT_OK

    def check(self, files: list[Path], configs: dict[Path, Config]) -> dict[Path, FileOutcome]:
        from loopcheck.lint import cache as cache_mod

        use_cache = not (self.opts.no_cache or self.opts.fix or self.opts.diff)
        cache = cache_mod.Cache(cache_mod.project_root()) if use_cache and files else None
        outcomes: dict[Path, FileOutcome] = {}
        data: dict[Path, bytes] = {}
        todo: list[Path] = []
        for f in files:
            try:
                data[f] = f.read_bytes()
            except OSError as exc:
                outcomes[f] = FileOutcome([], [FileError(str(f), None, f"cannot read: {exc.strerror or exc}")])
                continue
            if cache is not None:
                entry = cache.get(f, data[f], self.cache_key(configs[f]))
                if entry is not None:
                    outcomes[f] = FileOutcome(entry.findings, entry.errors)
                    continue
            todo.append(f)
        union: set[str] = set()
        for f in todo:
            union |= configs[f].enabled_codes
        for f, result in _check_files(todo, EnabledCodes(union), self.opts.jobs):
            outcome = self.postprocess(f, configs[f], result, data[f])
            outcomes[f] = outcome
            if cache is not None:
                cache.put(f, data[f], self.cache_key(configs[f]), outcome.findings, outcome.errors)
        return outcomes

    def cache_key(self, config: Config) -> str:
        return f"{config.fingerprint()}:{int(self.opts.warn_unused_suppressions)}"

    def postprocess(self, f: Path, config: Config, result: Any, data: bytes) -> FileOutcome:
        return apply_config(f, config, result, data, warn_unused=self.opts.warn_unused_suppressions)

    # -- fixes ---------------------------------------------------------------------------------

    def apply_fixes(self, files: list[Path], configs: dict[Path, Config], outcomes: dict[Path, FileOutcome]) -> tuple[int, list[str]]:
        """Fix the files that have fixable findings; returns (findings fixed, unified diffs)."""
        from loopcheck.lint.engine import check_file
        from loopcheck.lint.fixes import applicability, fix_source

        allowed = {"safe", "unsafe"} if self.opts.unsafe_fixes else {"safe"}
        fixed = 0
        diffs: list[str] = []
        for f in files:
            outcome = outcomes[f]
            if outcome.errors or not any(applicability(x.code) in allowed for x in outcome.findings):
                continue
            try:
                source = f.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            config = configs[f]
            result = fix_source(source, str(f), unsafe=self.opts.unsafe_fixes, enabled=enabled_for(config, f))
            if not result.fixed or result.source == source:
                continue
            fixed += len(result.fixed)
            if self.opts.diff:
                name = display_path(f.resolve())
                diffs.append("".join(difflib.unified_diff(
                    source.splitlines(keepends=True), result.source.splitlines(keepends=True),
                    fromfile=f"a/{name}", tofile=f"b/{name}",
                )))
                continue
            with f.open("w", encoding="utf-8", newline="") as fh:
                fh.write(result.source)
            # check the fixed file again, as a whole (suppressions, local imports and all)
            again = check_file(str(f), enabled=enabled_for(config, f))
            outcomes[f] = self.postprocess(f, config, again, result.source.encode("utf-8"))
        return fixed, diffs

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
                text.full(report, text.console(out, colour=self.opts.output is None), self.source_lines, statistics=self.opts.statistics)

    def source_lines(self, path: str) -> list[str]:
        if path not in self.sources:
            try:
                self.sources[path] = Path(path).read_bytes().decode("utf-8", errors="replace").splitlines()
            except OSError:
                self.sources[path] = []
        return self.sources[path]


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
    if reports_unused(config, f, warn_unused) and not result.errors:
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


def _file_error(e: Any) -> FileError:
    if isinstance(e, FileError):
        return e
    return FileError(str(getattr(e, "path", "")), getattr(e, "line", None), str(getattr(e, "message", e)), getattr(e, "code", None))


def _check_files(files: list[Path], enabled: EnabledCodes, jobs: int | None) -> Iterable[tuple[Path, Any]]:
    """Engine results of each file, in parallel processes when there are enough files."""
    from loopcheck.lint.engine import check_files

    return zip(files, check_files(files, enabled=enabled, jobs=jobs))
