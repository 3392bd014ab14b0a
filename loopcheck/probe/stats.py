"""Shared pieces of the probe: the robust rolling level, output-tensor picking, fused reductions,
the queue of device values and the deliberate host reads."""

from __future__ import annotations

import bisect
import contextlib
import math
from collections import deque
from typing import Any, Callable, Iterable, Sequence

import torch

_HALF = (torch.float16, torch.bfloat16)


class RobustLevel:
    """Rolling median / MAD of a positive series on a log scale, for spike tests.

    Multiplicative noise (loss and gradient norms) is symmetric on a log scale, so a spike is a
    value whose log lies more than `z` robust deviations above the rolling median *and* at least
    `ratio` times the median itself. Nothing is judged before `warmup` values were seen.
    """

    def __init__(self, window: int, warmup: int, z: float, ratio: float) -> None:
        self.values: deque[float] = deque(maxlen=window)
        self._sorted: list[float] = []  # the same values in order: the median without a sort per value
        self.warmup = warmup
        self.z = z
        self.log_ratio = math.log(ratio)

    def median(self) -> float | None:
        if not self.values:
            return None
        return math.exp(_middle(self._sorted))

    def push(self, value: float) -> float | None:
        """Add a value; return the rolling median it is a spike against, or None."""
        if not math.isfinite(value) or value <= 0:
            return None
        x = math.log(value)
        verdict = None
        values, ordered = self.values, self._sorted
        n = len(ordered)
        if n >= self.warmup:
            med = _middle(ordered)
            # the deviation (a sort) is only needed for a value already `ratio` above the median
            if x - med > self.log_ratio and x - med > self.z * 1.4826 * _median([abs(v - med) for v in values]):
                verdict = math.exp(med)
        if n == values.maxlen:
            del ordered[bisect.bisect_left(ordered, values[0])]
        values.append(x)
        bisect.insort(ordered, x)
        return verdict


def _median(values: Iterable[float]) -> float:
    return _middle(sorted(values))


def _middle(ordered: list[float]) -> float:
    """The median of values already in order."""
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def float_tensors(output: Any) -> list[torch.Tensor]:
    """The floating-point tensors of a module output (a tensor, or a shallow tuple / list / dict)."""
    if isinstance(output, torch.Tensor):
        return [output] if output.is_floating_point() else []
    if isinstance(output, (tuple, list)):
        items: Sequence[Any] = output
    elif isinstance(output, dict):
        items = list(output.values())
    else:
        return []
    return [t for t in items if isinstance(t, torch.Tensor) and t.is_floating_point()]


def finite_probe_value(t: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor that is finite exactly when every element of `t` is (no host sync).

    One reduction instead of `isfinite(t).all()`: a sum is NaN/Inf when any element is. Half
    precision is summed in float32 so that a large but finite activation cannot overflow the sum.
    """
    if t.requires_grad:
        t = t.detach()
    if t.dtype in _HALF:
        return t.sum(dtype=torch.float32)
    return t.sum()


def fused_norms(tensors: Sequence[torch.Tensor], dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """Per-tensor L2 norms as 0-d `dtype` tensors on each tensor's device, in one fused call if possible.

    float32 reduces half precision in float32 (a float16 norm overflows at 65504); float64 makes a
    norm of float32 or half values finite exactly when every value is. No host sync.
    """
    with no_grad():
        try:
            # float32, float16 and bfloat16 reduce to float32 in one call; float64 refuses the narrowing
            return list(torch._foreach_norm(tensors, 2, dtype=dtype))
        except (RuntimeError, TypeError, AttributeError):  # float64 tensors, older torch, unusual tensors
            pass
        try:
            return [n.to(dtype) for n in torch._foreach_norm(tensors, 2)]
        except (RuntimeError, TypeError, AttributeError):
            return [torch.linalg.vector_norm(t.to(torch.promote_types(t.dtype, dtype))).to(dtype) for t in tensors]


def no_grad() -> Any:
    """`torch.no_grad()`, or a reusable do-nothing context when grad mode is off already (the
    probe's per-step work runs with it off: entering a fresh no_grad costs a handful of calls)."""
    return torch.no_grad() if torch.is_grad_enabled() else _NOTHING


_NOTHING = contextlib.nullcontext()


def max_abs(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Per-tensor largest magnitude as 0-d tensors, in one fused call if possible (no host sync).

    Finite exactly when every value is, in the tensor's own dtype: unlike a sum or a norm it cannot
    overflow on large finite values.
    """
    with no_grad():
        try:
            return list(torch._foreach_norm(tensors, math.inf))
        except (RuntimeError, TypeError, AttributeError):  # older torch, unusual tensors
            return [torch.linalg.vector_norm(t, math.inf) for t in tensors]


def stack_scalars(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack 0-d tensors into a vector on the first one's device, in their promoted dtype (no host sync)."""
    with no_grad():
        try:
            return torch.stack(values)  # type: ignore[arg-type]
        except RuntimeError:  # several devices (a model split across GPUs)
            device = values[0].device
            return torch.stack([v.to(device, non_blocking=True) for v in values])


class Readings:
    """Device scalars queued between two samples and read to the host together: one sync.

    Detectors queue what they will judge at the next sample and keep the returned slice; at the
    sample the first `host()` call reads everything at once and the others reuse it. The probe
    seals the queue at every optimizer step: that step's scalars become one vector and are freed;
    on the CPU, where reading is no synchronisation, the vector is read at once and kept as floats.
    Hundreds of 0-d tensors kept alive until the sample each held a small allocation among the
    activations; on CPU that made the probe's cost depend on where memory happened to lie
    (1.01x to 1.07x between single-process runs of the overhead benchmark, 1.02x to 1.04x with
    the seal).
    """

    _COMPACT = 1024
    _LAG = 2  # steps after which every rank reads a CUDA verdict (see `tripped`)

    def __init__(self) -> None:
        # Whether every value is on the CPU (the probe's watched parameters are): reading one
        # by one is then cheaper than a stack, and no synchronisation.
        self.on_cpu = False
        self._parts: list[torch.Tensor | list[float]] = []  # device vectors, or host floats (CPU)
        self._watched = 0  # parts already given to the sentinel
        self._inflight: deque[tuple[torch.Tensor, Any, int]] = deque()  # (pinned verdict, CUDA event, step)
        self._steps = 0  # sentinel calls so far
        self._open: list[torch.Tensor | float] = []
        self._size = 0
        self._host: list[float] | None = None
        self._finite: bool | None = None
        self._bad = False  # a value sealed as host floats since the last sentinel was not finite

    def add(self, values: Sequence[torch.Tensor | float]) -> slice:
        """Queue `values` (0-d tensors; on the CPU also numbers read already); return where they sit."""
        start = self._size
        self._open.extend(values)
        self._size += len(values)
        self._host = self._finite = None
        if len(self._open) >= self._COMPACT:
            self.seal()
        return slice(start, self._size)

    def seal(self) -> None:
        """Stack the values queued so far into one vector (no host sync) and let the scalars go."""
        if self._open:
            if self.on_cpu:
                values = []
                for v in self._open:  # (a loop, not a comprehension: one call less at every step)
                    values.append(v if type(v) is float else v.item())
                self._parts.append(values)
                # judged now: the sentinel of a CPU run only asks whether one of them was not finite
                if not math.isfinite(sum(values)) and not all(map(math.isfinite, values)):
                    self._bad = True
            else:
                self._parts.append(stack_scalars(self._open))
            self._open = []

    def tripped(self, combine: Callable[[torch.Tensor], None] | None = None,
                device: torch.device | None = None) -> bool:
        """The per-step sentinel: whether a value queued since the last call is NaN/Inf, without a
        sync (the queue is sealed first).

        On the CPU the new values are checked at once, as host floats (a sum, and only when that is
        not finite an element-wise test). On CUDA their verdict is
        copied to pinned host memory behind an event and looked at once the event has passed, a
        step or two later; other devices wait for the periodic read.

        `combine` (torch.distributed with on_finding="raise") reduces the step's verdict over the
        ranks in place, one all-reduce per step on `device`, so that every rank trips at the same
        step; on CUDA each verdict is then read exactly `_LAG` steps later on every rank, waiting
        for its event if the device is that far behind.
        """
        self.seal()
        if combine is None and self.on_cpu:  # every part is host floats, judged as it was sealed
            self._watched = len(self._parts)
            self._steps += 1
            bad, self._bad = self._bad, False
            return bad
        new = self._parts[self._watched:]
        self._watched = len(self._parts)
        self._steps += 1
        if combine is None:
            bad = False
            for part in new:
                if type(part) is list:
                    bad = bad or not (math.isfinite(sum(part)) or all(map(math.isfinite, part)))
                elif part.device.type == "cpu":
                    bad = bad or not (math.isfinite(float(part.sum())) or bool(torch.isfinite(part).all()))
                elif part.device.type == "cuda":
                    with torch.no_grad():
                        self._watch(torch.isfinite(part).all().logical_not())
            return self._arrived(lockstep=False) or bad
        with torch.no_grad():
            flag = torch.zeros((), device=device)
            for part in new:
                if type(part) is list:
                    part = torch.tensor(part, dtype=torch.float64)
                flag = torch.maximum(flag, torch.isfinite(part.to(flag.device)).all().logical_not().float())
            combine(flag)
            if flag.device.type != "cuda":
                return bool(flag > 0)
            self._watch(flag > 0)
        return self._arrived(lockstep=True)

    def _watch(self, bad: torch.Tensor) -> None:
        host = torch.empty((), dtype=torch.bool, pin_memory=True)
        host.copy_(bad, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._inflight.append((host, event, self._steps))

    def _arrived(self, lockstep: bool) -> bool:
        bad = False
        inflight = self._inflight
        while inflight:
            host, event, at = inflight[0]
            if lockstep:
                if self._steps - at < self._LAG:
                    break
                event.synchronize()  # only waits when the device is more than _LAG steps behind
            elif not event.query():
                break
            inflight.popleft()
            bad = bad or bool(host)
        return bad

    def host(self) -> list[float]:
        """Every queued value as a Python float (NaN and Inf kept), read once per sample."""
        if self._host is None:
            self.seal()
            parts = self._parts
            if all(type(part) is list for part in parts):  # read at each step already (CPU)
                self._host = [x for part in parts for x in part]
            else:
                tensors = [torch.tensor(part, dtype=torch.float64) if type(part) is list else part
                           for part in parts]
                flat = tensors[0] if len(tensors) == 1 else _cat(tensors)
                self._host = host_read(flat).double().tolist()
        return self._host

    def all_finite(self) -> bool:
        """Whether every queued value is finite: one pass over the host values, cached per sample."""
        if self._finite is None:
            host = self.host()
            # A sum is finite when every term is, and only overflows on huge values: check those one by one.
            self._finite = math.isfinite(sum(host)) or all(map(math.isfinite, host))
        return self._finite

    def clear(self) -> None:
        self._parts, self._open, self._size, self._host, self._finite = [], [], 0, None, None
        self._watched = 0
        self._bad = False
        self._inflight.clear()


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        device = parts[0].device
        return torch.cat([p if p.device == device else p.to(device, non_blocking=True) for p in parts])


def host_read(tensor: torch.Tensor) -> torch.Tensor:
    """Copy a device tensor to the host: the probe's only, deliberate synchronisation points.

    Under `torch.cuda.set_sync_debug_mode` these intended reads (every N steps) are exempt, so a
    sync-debug run shows only the synchronisations of the training loop itself.
    """
    if tensor.device.type != "cuda":
        return tensor.detach()
    mode = torch.cuda.get_sync_debug_mode()
    if mode:
        torch.cuda.set_sync_debug_mode(0)
    try:
        return tensor.detach().cpu()
    finally:
        if mode:
            torch.cuda.set_sync_debug_mode(mode)
