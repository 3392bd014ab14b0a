"""LP201 memory that grows step after step; LP202 loss graphs kept alive across steps.

LP202: at each backward a small marker object is stored in the `metadata` dict of the loss's
autograd node and of the nodes just below it, and at the first forward pass of each watched model
in a step in the node of its output; the node owns that dict, so a weak reference to the marker
lives exactly as long as the graph node does. A loss appended to a list, or summed into a running
total without `.item()` / `.detach()`, keeps its node alive, and model outputs kept in a list
(`preds.append(logits)`) keep theirs, however deep below the loss they sit (the graphs of the steps
`Probe.watched` names are marked: a kept graph is kept at every step); in a correct loop
they die within a step or two. What is reported is growth: `_MIN_RETAINED` graphs from different steps
alive at once, `retain_steps` after their backward. One graph kept a while (the last loss of an
epoch held by a variable until the next epoch) is bounded and not a finding.

LP201: every `every` steps the allocated memory is sampled: the CUDA caching allocator's count
on a GPU (a host-side counter, no sync), the process's resident set size on a CPU.
"""

from __future__ import annotations

import os
import weakref
from collections import deque
from typing import Any

import torch

from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.stats import float_tensors

_KEY = "loopcheck"
_MIN_RETAINED = 3  # old graphs alive at the same time before LP202 is reported
_MAX_NODES = 8
_MIB = 1024 * 1024


class _Marker:
    __slots__ = ("step", "__weakref__")

    def __init__(self, step: int) -> None:
        self.step = step


class RetainedGraphDetector(Detector):
    codes = ("LP202",)
    first_optimizer_steps = True
    # graphs are marked at watched steps, and looked at again only around them
    watched_only = frozenset({"on_forward", "on_backward", "on_step"})

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._live: deque[tuple[int, weakref.ref]] = deque()
        self._old: list[tuple[int, weakref.ref]] = []  # graphs past the window, alive when last looked at
        self._output_step: dict[int, int] = {}  # per model: the step whose output is marked

    def on_forward(self, root: int, module: Any, output: Any) -> None:
        step = self.probe.step
        if self._output_step.get(root) == step or not self.probe.watched(0):
            return
        for t in float_tensors(output):
            node = t.grad_fn
            if node is not None:
                self._output_step[root] = step
                meta = node.metadata
                if _KEY not in meta:
                    marker = meta[_KEY] = _Marker(step)
                    self._live.append((step, weakref.ref(marker)))
                return

    def on_backward(self, tensor: torch.Tensor) -> None:
        if not self.probe.watched(0):
            return
        node = tensor.grad_fn
        if node is None:
            return
        marker = _Marker(self.probe.step)
        marked = 0
        meta = node.metadata
        if _KEY not in meta:
            meta[_KEY] = marker
            marked = 1
        for child, _ in node.next_functions:  # the nodes just below the loss (their children are not marked)
            if child is None or marked >= _MAX_NODES or type(child).__name__ == "AccumulateGrad":
                continue
            meta = child.metadata
            if _KEY not in meta:
                meta[_KEY] = marker
                marked += 1
        if marked:
            self._live.append((marker.step, weakref.ref(marker)))

    def on_step(self, index: int, optimizer: Any) -> None:
        if index != 0:
            return
        horizon = self.probe.step - self.config.retain_steps
        live = self._live
        moved = False
        while live and live[0][0] < horizon:
            step, ref = live.popleft()
            if ref() is not None and (not self._old or self._old[-1][0] != step):
                self._old.append((step, ref))
                moved = True
        if not moved:
            return
        self._old = [(step, ref) for step, ref in self._old if ref() is not None]
        if len(self._old) >= _MIN_RETAINED:
            steps = [step for step, _ in self._old]
            self.report(
                "LP202",
                f"the autograd graphs built at steps {', '.join(map(str, steps[:3]))}"
                f"{' and later' if len(steps) > 3 else ''} are still alive {self.config.retain_steps}+ steps after "
                f"their backward: a loss or a model output is kept as a tensor, e.g. appended to a list "
                f"(preds.append(logits)) or summed into a running total; keep loss.item() or output.detach() instead",
            )
            self._old = []


class MemoryGrowthDetector(Detector):
    codes = ("LP201",)

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._samples: deque[tuple[int, int]] = deque(maxlen=self.config.memory_samples)
        self._device: torch.device | None = None
        self._statm = "/proc/self/statm"
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._last: int | None = None
        self._fd = -1

    def attach(self) -> None:
        for params in self.probe.opt_params:
            for p in params:
                if p.device.type == "cuda":
                    self._device = p.device
                    return
        try:
            # kept open and read again from its start: opening it costs far more than reading it
            self._fd = os.open(self._statm, os.O_RDONLY)
        except (OSError, AttributeError):
            self.enabled = False  # no cheap CPU counter on this platform
            return
        self.probe.hooks.callback(os.close, self._fd)

    def _read(self) -> int:
        if self._device is not None:
            return int(torch.cuda.memory_allocated(self._device))
        return int(os.pread(self._fd, 128, 0).split()[1]) * self._page

    def on_sample(self, step: int, final: bool) -> None:
        if final:
            return
        value = self._read()
        self._last = value
        self._samples.append((step, value))
        if len(self._samples) < (self._samples.maxlen or 0):
            return
        values = [v for _, v in self._samples]
        rises = sum(b > a for a, b in zip(values, values[1:]))
        growth = values[-1] - values[0]
        if rises >= len(values) - 2 and growth >= self.config.memory_growth_mb * _MIB:
            first, last = self._samples[0][0], self._samples[-1][0]
            per_step = growth / max(last - first, 1) / _MIB
            kind = "allocated CUDA memory" if self._device is not None else "resident memory (RSS)"
            self.report(
                "LP201",
                f"{kind} grew by {growth / _MIB:.0f} MiB between steps {first} and {last} "
                f"({per_step:.2f} MiB per step) in nearly every sample: something accumulates across steps",
                step=last,
            )
            self._samples.clear()

    def metrics(self) -> dict[str, Any]:
        return {} if self._last is None else {"memory_mb": round(self._last / _MIB, 1)}
