"""torch.distributed support: rank discovery and the per-sample exchange of findings and metrics.

At each sampling point every rank sends its new findings and its metrics through the existing
process group (one all_gather_object call); rank 0 merges them, prints and writes the log.
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


def exchange(metrics: dict[str, Any], findings: list[Finding], rank: int) -> tuple[dict[str, Any], list[Finding]]:
    """All ranks call this at the same step; returns (metrics merged over ranks, other ranks' findings)."""
    import torch.distributed as dist

    payload = {"metrics": metrics, "findings": [f.to_dict() for f in findings]}
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, payload)
    remote = [
        _finding(item) for r, part in enumerate(gathered) if r != rank for item in part["findings"]
    ]
    return merge_metrics([part["metrics"] for part in gathered]), remote


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
