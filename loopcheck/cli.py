"""The `loopcheck` command line: lint, rules, explain, init, report, run, server.

Each command is a thin shell: it parses options and hands over to the module that does the
work, so that importing the CLI never imports torch (only `init`'s template writer and `report`
do, and only when they run).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from loopcheck import __version__
from loopcheck.catalog import catalog, page

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find the silent bugs of hand-written PyTorch training loops.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loopcheck {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Find the silent bugs of hand-written PyTorch training loops."""
    try:
        catalog()  # every command reads the rule pages: a broken install says so, once, here
    except (RuntimeError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None


@app.command()
def rules(
    family: Optional[str] = typer.Argument(None, help="Only codes starting with this prefix, e.g. LC2 or LP."),
) -> None:
    """List the rule codes with their names and severities."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("code", "name", "severity", "finds"):
        table.add_column(col)
    for code, p in catalog().items():
        if family and not code.startswith(family.upper()):
            continue
        table.add_row(code, p.name, p.severity.value, p.summary)
    out = Console()
    if not out.is_terminal:  # piped: never cut names to an assumed 80 columns
        out = Console(width=max(out.width, 200))
    out.print(table)


@app.command()
def explain(code: str = typer.Argument(..., help="A rule code, e.g. LC102.")) -> None:
    """Print a rule's page: what it finds, why it matters, bad and good code, the fix."""
    _print_page(code)


@app.command("rule")
def rule(code: str = typer.Argument(..., help="A rule code, e.g. LC102.")) -> None:
    """Print a rule's page (the same as `explain`, named as in Ruff)."""
    _print_page(code)


def _print_page(code: str) -> None:
    from rich.markdown import Markdown

    try:
        p = page(code)
    except KeyError as exc:
        err.print(f"[red]error:[/] {exc.args[0]}")
        raise typer.Exit(2) from None
    out = Console()
    if out.is_terminal:
        out.print(Markdown(p.text))
    else:
        typer.echo(p.text)


@app.command()
def lint(
    paths: List[Path] = typer.Argument(None, help="Files and directories to check (default: the current directory); `-` reads standard input."),
    format: str = typer.Option("text", "--format", "--output-format", "-f", help="text, concise, json, sarif or github."),
    select: Optional[str] = typer.Option(None, "--select", help="Only these codes or prefixes, comma-separated (LC1,LC201)."),
    extend_select: Optional[str] = typer.Option(None, "--extend-select", help="Add codes to the configured selection."),
    ignore: Optional[str] = typer.Option(None, "--ignore", help="Skip these codes or prefixes, comma-separated."),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", help="Lowest severity that makes the exit code 1: error, warning or info."),
    fix: bool = typer.Option(False, "--fix", help="Apply safe fixes in place."),
    unsafe_fixes: bool = typer.Option(False, "--unsafe-fixes", help="With --fix or --diff, also apply fixes that may change behaviour."),
    diff: bool = typer.Option(False, "--diff", help="Show the fixes as a unified diff; write nothing."),
    statistics: bool = typer.Option(False, "--statistics", help="Print the number of findings per code."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file instead of stdout."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Files checked in parallel (default: number of cores)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the .loopcheck_cache."),
    config: Optional[Path] = typer.Option(None, "--config", help="Use this pyproject.toml or loopcheck.toml instead of searching."),
    isolated: bool = typer.Option(False, "--isolated", help="Ignore every configuration file."),
    warn_unused_noqa: bool = typer.Option(False, "--warn-unused-suppressions", help="Report suppressions that suppress nothing (LC001)."),
    runtime_log: Optional[Path] = typer.Option(None, "--runtime-log", help="A probe run log (JSONL): mark the findings that run confirmed."),
    force_exclude: bool = typer.Option(False, "--force-exclude", help="Apply the excludes (configured, .gitignore, virtualenvs) to files named on the command line too (for pre-commit)."),
    extend_exclude: Optional[str] = typer.Option(None, "--extend-exclude", help="More globs to exclude, comma-separated."),
    respect_gitignore: bool = typer.Option(True, "--respect-gitignore/--no-respect-gitignore", help="Skip what .gitignore, .ignore and git's excludes ignore."),
    stdin_filename: Optional[str] = typer.Option(None, "--stdin-filename", help="The name of the source read from `-` (configuration, local imports, report)."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when findings are reported (2 still means a file could not be checked)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print the findings only: no summary, hints or warnings."),
    add_noqa: bool = typer.Option(False, "--add-noqa", help="Add `# noqa: CODE` comments to the lines of the findings, in place."),
    show_fixes: bool = typer.Option(False, "--show-fixes", help="With --fix or --diff, list the fixes applied."),
    watch: bool = typer.Option(False, "--watch", "-w", help="Check again whenever a file changes (polling; Ctrl-C stops)."),
) -> None:
    """Check training scripts for silent training-loop bugs."""
    from loopcheck.lint.command import LintOptions, run

    options = LintOptions(
        paths=list(paths or [Path(".")]), format=format, select=select, extend_select=extend_select,
        ignore=ignore, fail_on=fail_on, fix=fix, unsafe_fixes=unsafe_fixes, diff=diff,
        statistics=statistics, output=output, jobs=jobs, no_cache=no_cache, config=config,
        isolated=isolated, warn_unused_suppressions=warn_unused_noqa, force_exclude=force_exclude,
        runtime_log=runtime_log,
        extend_exclude=tuple(p.strip() for p in (extend_exclude or "").split(",") if p.strip()),
        respect_gitignore=respect_gitignore, stdin_filename=stdin_filename, exit_zero=exit_zero,
        quiet=quiet, add_noqa=add_noqa, show_fixes=show_fixes, watch=watch,
    )
    raise typer.Exit(run(options))


@app.command()
def init(
    path: Path = typer.Argument(Path("train.py"), help="Where to write the training script."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
) -> None:
    """Write the reference training loop as a standalone train.py to start from."""
    from loopcheck.reference.template import write_template

    raise typer.Exit(write_template(path, force=force, console=err))


@app.command()
def report(
    log: Path = typer.Argument(..., help="A probe run log (JSONL) written with probe(..., log=...)."),
    png: Optional[Path] = typer.Option(None, "--png", help="Also write the plots to this PNG file (needs matplotlib)."),
) -> None:
    """Summarise a probe run log: findings, and plots of loss, grad norm and LR."""
    from loopcheck.probe.report import render_report

    raise typer.Exit(render_report(log, png=png))


@app.command()
def server() -> None:
    """Run the language server on stdin/stdout, for editors (needs the `server` extra)."""
    from loopcheck.server import missing_dependency

    problem = missing_dependency()
    if problem is not None:
        from rich.markup import escape

        err.print(f"[red]error:[/] {escape(problem)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    from loopcheck.server.app import serve

    serve()

@app.command(
    "run",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False},
)
def run_command(
    ctx: typer.Context,
    target: str = typer.Argument(..., metavar="SCRIPT [ARGS]...", help="The training script (or, with -m, a module) and its own arguments."),
    module: bool = typer.Option(False, "-m", help="Run a module, as python -m does."),
    log: Path = typer.Option(Path("loopcheck-run.jsonl"), "--log", help="Where to write the probe's run log (JSONL)."),
    every: Optional[int] = typer.Option(None, "--every", min=1, help="Read device statistics every N optimizer steps."),
    check_every: Optional[int] = typer.Option(
        None, "--check-every", min=1,
        help="Measure every gradient (norms, resets, graph marks) on one optimizer step in N (default 4, on the CPU up to 16 as their cost asks; 1: every step).",
    ),
    ignore: Optional[str] = typer.Option(None, "--ignore", help="LP codes or prefixes to leave out, comma-separated."),
) -> None:
    """Run a training script unchanged under the probe; print its findings when it ends."""
    from loopcheck.probe.run import run

    options = {name: value for name, value in (("every", every), ("check_every", check_every)) if value is not None}
    if ignore:
        options["ignore"] = [c for c in ignore.split(",") if c.strip()]
    raise typer.Exit(run(target, ctx.args, module=module, log=log, **options))


def main() -> None:
    """The `loopcheck` command (console script and `python -m loopcheck`).

    The process ends without the interpreter's orderly teardown: a lint of a large project
    leaves hundreds of megabytes of syntax trees, and releasing them one object at a time, with
    a last full garbage collection, costs seconds after the work is done. Everything the
    command writes is flushed first; nothing it does relies on exit handlers."""
    try:
        app()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be written anyway
            pass
    os._exit(code)
