"""torch.distributed support: rank discovery and the per-sample exchange of findings and metrics.

At each sampling point every rank sends its new findings and its metrics through the existing
process group (one all_gather_object call); rank 0 merges them, prints and writes the log. With
on_finding="raise" the ranks also stop together: the per-step sentinel is all-reduced, and a
finding made on one rank stops every rank at the next exchange, instead of leaving the others
waiting in a collective for a rank that has left.
"""

from __future__ import annotations

from typing import Any

from loopcheck.findings import Finding, Severity


def rank_and_size() -> tuple[int, int]:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - builds without distributed support
        return 0, 1
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def exchange(metrics: dict[str, Any], findings: list[Finding], rank: int,
             stop: Finding | None = None) -> tuple[dict[str, Any], list[Finding], list[Finding]]:
    """All ranks call this at the same step; returns (metrics merged over ranks, other ranks' findings,
    the finding each rank that wants the run stopped (on_finding="raise") stops on)."""
    import torch.distributed as dist

    payload = {"metrics": metrics, "findings": [f.to_dict() for f in findings],
               "stop": stop.to_dict() if stop is not None else None}
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, payload)
    remote = [
        _finding(item) for r, part in enumerate(gathered) if r != rank for item in part["findings"]
    ]
    stops = [_finding(part["stop"]) for part in gathered if part["stop"] is not None]
    return merge_metrics([part["metrics"] for part in gathered]), remote, stops


def all_ranks_max(flag: Any) -> None:
    """Reduce a one-element tensor to its maximum over the ranks, in place (the sentinel's all-reduce)."""
    import torch.distributed as dist

    dist.all_reduce(flag, op=dist.ReduceOp.MAX)


def merge_metrics(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean over ranks of each number (max for memory); other values come from rank 0."""
    merged = dict(parts[0])
    for key, value in parts[0].items():
        values = [p.get(key) for p in parts]
        if key in ("step", "skipped") or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            continue
        merged[key] = max(values) if key.startswith("memory") or key.endswith("_max") else sum(values) / len(values)
    merged["ranks"] = len(parts)
    return merged


def _finding(data: dict[str, Any]) -> Finding:
    data = dict(data)
    data["severity"] = Severity(data["severity"])
    return Finding(**data)
