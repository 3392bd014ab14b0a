"""The JSONL run log and the findings table printed on stderr when a probe exits.

Log format (one JSON object per line, `type` first):
  header   versions, models, optimizer and scheduler settings, the probe's options
  metrics  every `every` steps: step, loss, grad norm, LR per group, step time, data wait, memory
  finding  each finding when it is first made
  end      steps, skipped steps and the final findings with their counts
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import re
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from loopcheck.catalog import lint_twin, page
from loopcheck.findings import Finding
from loopcheck.errors import ProbeUsageError

if TYPE_CHECKING:
    from loopcheck.probe.probe import Probe

LOG_VERSION = 1


class RunLog:
    def __init__(self, path: Path, stream: IO[str]) -> None:
        self.path = path
        self._stream = stream

    @classmethod
    def open(cls, path: Path) -> "RunLog":
        try:
            stream = open(path, "w", encoding="utf-8")
        except OSError as err:
            raise ProbeUsageError(f"cannot write the probe run log {path}: {err.strerror or err}") from None
        return cls(path, stream)

    def _write(self, record: dict[str, Any]) -> None:
        self._stream.write(json.dumps(record, default=_jsonable, allow_nan=False) + "\n")
        self._stream.flush()

    def header(self, probe: "Probe") -> None:
        import torch

        from loopcheck import __version__

        self._write({
            "type": "header",
            "version": LOG_VERSION,
            "loopcheck": __version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "world_size": probe.world_size,
            **_objects(probe),
            "options": probe.config.to_dict(),
        })

    def watched(self, probe: "Probe") -> None:
        """The objects watched from now on, after discovery found more while the run went."""
        self._write({"type": "watch", "step": probe.step, **_objects(probe)})

    def metrics(self, values: dict[str, Any]) -> None:
        self._write({"type": "metrics", **{k: _finite(v) for k, v in values.items()}})

    def finding(self, finding: Finding) -> None:
        self._write({"type": "finding", **_finding(finding)})

    def end(self, probe: "Probe") -> None:
        self._write({
            "type": "end", "step": probe.step, "skipped": probe.skipped,
            "findings": [_finding(f) for f in probe.findings],
        })

    def close(self) -> None:
        self._stream.close()


def _finding(f: Finding) -> dict[str, Any]:
    return {
        "code": f.code, "name": f.name, "severity": f.severity.value, "message": f.message,
        "step": f.step, "where": f.where, "rank": f.rank, "count": f.count, "lint": list(f.lint_twin),
    }


def _objects(probe: "Probe") -> dict[str, Any]:
    return {
        "models": [_model(name or type(m).__name__, m) for name, m in zip(probe.root_names, probe.models)],
        "optimizers": [_optimizer(o) for o in probe.optimizers],
        "schedulers": [_scheduler(s) for s in probe.schedulers],
        "scaler": _scaler(probe.scaler),
    }


def _model(name: str, model: Any) -> dict[str, Any]:
    params = list(model.parameters())
    return {
        "name": name, "class": type(model).__name__,
        "parameters": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in params if p.requires_grad),
    }


def _optimizer(opt: Any) -> dict[str, Any]:
    groups = [{k: v for k, v in g.items() if k != "params"} | {"params": len(g["params"])} for g in opt.param_groups]
    return {"class": type(opt).__name__, "groups": groups}


def _scheduler(s: Any) -> dict[str, Any]:
    try:
        state = {k: v for k, v in s.state_dict().items() if isinstance(v, (int, float, str, bool, list, tuple))}
    except Exception:
        state = {}
    return {"class": type(s).__name__, "state": state}


def _scaler(scaler: Any) -> dict[str, Any] | None:
    if scaler is None:
        return None
    return {
        "class": type(scaler).__name__, "enabled": scaler.is_enabled(), "device": getattr(scaler, "_device", None),
        "init_scale": getattr(scaler, "_init_scale", None), "growth_interval": getattr(scaler, "_growth_interval", None),
    }


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return value.tolist() if value.device.type == "cpu" and value.numel() <= 16 else f"<tensor {tuple(value.shape)}>"
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def fix_hint(code: str) -> str:
    """The first sentence of the rule page's Fix section: the table's 'what to do' column."""
    try:
        text = page(code).section("Fix")
    except KeyError:
        return ""
    text = re.sub(r"`([^`]*)`", r"\1", " ".join(text.split()))
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return match.group(1) if match else text


def findings_table(findings: list[dict[str, Any]], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False, pad_edge=False)
    for col in ("code", "severity", "where", "first step", "count", "finding / what to do"):
        table.add_column(col, overflow="fold")
    style = {"error": "bold red", "warning": "yellow", "info": "cyan"}
    for f in findings:
        rank = f" (rank {f['rank']})" if f.get("rank") is not None else ""
        twins = lint_twin(f["code"])
        before = f"\nBefore the run, `loopcheck lint` finds it as {', '.join(twins)}." if twins else ""
        text = f"{f['message']}\n[dim]{fix_hint(f['code'])}{before}[/]"
        table.add_row(
            f"{f['code']} {f['name']}", f"[{style.get(f['severity'], '')}]{f['severity']}[/]",
            (f.get("where") or "-") + rank, str(f.get("step", "-")), str(f.get("count", 1)), text,
        )
    return table


def print_summary(probe: "Probe", stream: IO[str] | None = None) -> None:
    from rich.console import Console

    console = Console(file=stream or sys.stderr)
    if not probe.models and not probe.optimizers:
        console.print("loopcheck probe: nothing to watch (no model ran a backward pass, no optimizer stepped)")
        return
    steps = f"{probe.step} steps" + (f", {probe.skipped} skipped by the GradScaler" if probe.skipped else "")
    if not probe.findings:
        console.print(f"loopcheck probe: {steps}, no findings")
        return
    console.print(findings_table([_finding(f) for f in probe.findings], f"loopcheck probe: {steps}"))
