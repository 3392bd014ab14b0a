"""`loopcheck report LOG [--png FILE]`: the findings and terminal plots of a probe run log.

Reads the JSONL log (see sink.py for its records), prints the run's header line, the findings
table and braille charts of loss, gradient norm and LR with the findings' steps marked below
each chart; `--png` draws the same three plots with matplotlib (the optional `plot` extra).
Exit code: 0, or 1 when the run had error-level findings; 2 when the log cannot be used.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from loopcheck.probe.sink import LOG_VERSION, findings_table

_BRAILLE = 0x2800
_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row][column] within a cell
_SERIES = (("loss", "loss"), ("grad_norm", "gradient norm"), ("lr", "learning rate"))


class LogError(Exception):
    """The file is missing, unreadable or not a probe run log."""


def read_log(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LogError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise LogError(f"{path} is a directory, not a probe run log") from None
    except (OSError, UnicodeDecodeError) as err:
        raise LogError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    records: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise LogError(f"{path}:{number}: not valid JSON ({err.msg}); the log is corrupt or truncated") from None
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise LogError(f"{path}:{number}: a run-log record is a JSON object with a 'type'")
        records.append(record)
    if not records:
        raise LogError(f"{path} is empty: not a probe run log")
    head = records[0]
    if head.get("type") != "header":
        raise LogError(f"{path} is not a loopcheck probe run log (it does not start with a header record)")
    if head.get("version") != LOG_VERSION:
        raise LogError(f"{path}: run-log version {head.get('version')!r} is not supported (expected {LOG_VERSION})")
    return records


def render_report(log: Path, png: Path | None = None) -> int:
    out = Console()
    err = Console(stderr=True)
    try:
        records = read_log(Path(log))
        findings, steps, metrics = _summarise(records)
    except LogError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    head = records[0]
    # what was watched in the end: the header's objects, or those of the last `watch` record
    watched = next((r for r in reversed(records) if r["type"] == "watch"), head)
    models = ", ".join(f"{m.get('name')} ({m.get('trainable', 0):,} trainable)" for m in watched.get("models", [])) or "none"
    optimizers = ", ".join(o.get("class", "?") for o in watched.get("optimizers", [])) or "none"
    schedulers = ", ".join(s.get("class", "?") for s in watched.get("schedulers", [])) or "none"
    out.print(
        f"run of {steps} steps  ·  torch {head.get('torch')}  ·  model {models}  ·  optimizer {optimizers}  ·  "
        f"scheduler {schedulers}", highlight=False,
    )
    if findings:
        out.print(findings_table(findings, f"{len(findings)} finding(s)"))
    else:
        out.print("no findings")
    marks = sorted({f["step"] for f in findings if isinstance(f.get("step"), int)})
    for key, title in _SERIES:
        xs, ys = _series(metrics, key)
        if len(xs) >= 2:
            for line in chart(title, xs, ys, marks):
                out.print(line)
    if png is not None:
        code = write_png(png, metrics, marks, err)
        if code:
            return code
        out.print(escape(f"plots written to {png}"), highlight=False, soft_wrap=True)
    return 1 if any(f.get("severity") == "error" for f in findings) else 0


def _summarise(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int, list[dict[str, Any]]]:
    metrics = [r for r in records if r["type"] == "metrics" and isinstance(r.get("step"), int)]
    end = next((r for r in reversed(records) if r["type"] == "end"), None)
    if end is not None and isinstance(end.get("findings"), list):
        findings = end["findings"]
        steps = end.get("step", 0)
    else:  # the run did not reach its end (a crash): use the findings as they were logged
        findings = [r for r in records if r["type"] == "finding"]
        steps = metrics[-1]["step"] if metrics else 0
    for f in findings:
        if not isinstance(f, dict) or not {"code", "message"} <= f.keys():
            raise LogError("a finding record lacks its code or message; the log is corrupt")
        f.setdefault("name", "")
        f.setdefault("severity", "warning")
    return findings, steps, metrics


def _series(metrics: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for m in metrics:
        value = m.get(key)
        if isinstance(value, list):  # the LR of each param group: plot the first
            value = value[0] if value else None
        if isinstance(value, (int, float)) and math.isfinite(value):
            xs.append(m["step"])
            ys.append(float(value))
    return xs, ys


def chart(title: str, xs: Sequence[int], ys: Sequence[float], marks: Sequence[int],
          width: int = 60, height: int = 5) -> list[Text]:
    """A braille line chart (2x4 dots per character) with the finding steps marked underneath."""
    logscale = min(ys) > 0 and max(ys) / min(ys) > 100
    vals = [math.log10(v) for v in ys] if logscale else list(ys)
    lo, hi = min(vals), max(vals)
    span = hi - lo or 1.0
    x0, x1 = xs[0], xs[-1]
    xspan = (x1 - x0) or 1
    cols, rows = width * 2, height * 4
    grid = [[0] * width for _ in range(height)]

    def plot(px: int, py: int) -> None:
        grid[py // 4][px // 2] |= _DOTS[py % 4][px % 2]

    points = [(round((x - x0) / xspan * (cols - 1)), round((hi - v) / span * (rows - 1))) for x, v in zip(xs, vals)]
    for (ax, ay), (bx, by) in zip(points, points[1:]):
        steps = max(abs(bx - ax), abs(by - ay), 1)
        for k in range(steps + 1):
            plot(ax + (bx - ax) * k // steps, ay + (by - ay) * k // steps)
    if len(points) == 1:
        plot(*points[0])
    label = (lambda v: f"{10 ** v:.3g}") if logscale else (lambda v: f"{v:.3g}")
    pad = max(len(label(hi)), len(label(lo)))
    lines = [Text(f"{title}{' (log scale)' if logscale else ''}", style="bold")]
    for r, row in enumerate(grid):
        axis = label(hi) if r == 0 else label(lo) if r == height - 1 else ""
        lines.append(Text(f"{axis:>{pad}} ┤") + Text("".join(chr(_BRAILLE + c) for c in row), style="cyan"))
    under = [" "] * width
    for step in marks:
        if x0 <= step <= x1:
            under[min(width - 1, round((step - x0) / xspan * (cols - 1)) // 2)] = "▲"
    lines.append(Text(" " * pad + " └") + Text("".join(under), style="bold red"))
    lines.append(Text(f"{'':>{pad}}  step {x0}".ljust(pad + 2 + width - len(str(x1))) + str(x1), style="dim"))
    return lines


def write_png(path: Path, metrics: list[dict[str, Any]], marks: Sequence[int], err: Console) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        err.print(escape("error: --png needs matplotlib: pip install 'loopcheck[plot]'"), highlight=False, soft_wrap=True)
        return 2
    fig, axes = plt.subplots(len(_SERIES), 1, figsize=(9, 7), sharex=True)
    for ax, (key, title) in zip(axes, _SERIES):
        xs, ys = _series(metrics, key)
        if xs:
            ax.plot(xs, ys, linewidth=1.2)
            if min(ys) > 0 and max(ys) / min(ys) > 100:
                ax.set_yscale("log")
        for step in marks:
            ax.axvline(step, color="red", alpha=0.5, linewidth=1)
        ax.set_ylabel(title)
    axes[-1].set_xlabel("optimizer step")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        err.print(f"[red]error:[/] {escape(f'cannot write {path}: {exc.strerror or exc}')}", highlight=False, soft_wrap=True)
        return 2
    finally:
        plt.close(fig)
    return 0
