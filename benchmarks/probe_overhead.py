"""Probe overhead on CPU: a small CNN trained in interleaved bare / probed / anomaly-mode blocks.

Prints the median over block pairs of (probed time / bare time) with a 95% interval, and for scale
the same ratio for `torch.autograd.detect_anomaly()`. The probe runs in its default configuration
(gradient, non-finite, LR, mode, memory and data checks every step; device statistics read every 20
steps). A block is as long as the probe's sampling interval, so every probed block includes one
reading of the device statistics. Wall-clock time is the measure; the process CPU time ratio is
printed too, because on a shared machine it is less disturbed by other processes.

glibc's malloc returns the activation memory to the system after each step and faults it in again
at the next (thousands of page faults per step, on both sides), which moves the ratio by a few
points between runs. Unless `--system-malloc` is given, the benchmark fixes glibc's mmap and trim
thresholds first, so freed activations stay in the heap; both variants run under the same setting.

    python benchmarks/probe_overhead.py [--blocks 30] [--steps 20] [--threads 1] [--system-malloc]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import math
import resource
import statistics
import time
import warnings

import torch
from torch import nn
from torch.nn import functional as F

import loopcheck


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


# mallopt() parameters (malloc.h); 32 MiB is the largest mmap threshold glibc accepts on 64-bit
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 * 1024 * 1024
_TRIM_THRESHOLD = 1024 * 1024 * 1024


def fix_malloc_thresholds() -> str:
    """Keep freed memory in glibc's heap (fixed mmap / trim thresholds); say what the run uses."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        version = libc.gnu_get_libc_version().decode()
    except (OSError, AttributeError, TypeError):
        return "the system's malloc (not glibc: thresholds left alone)"
    if not (libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)):
        return f"glibc {version} malloc (mallopt refused the thresholds: left alone)"
    return (f"glibc {version} malloc, fixed thresholds: mmap {_MMAP_THRESHOLD >> 20} MiB, "
            f"trim {_TRIM_THRESHOLD >> 20} MiB")


def median_interval(ordered: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval for the median: two order statistics.

    It covers the noise within this run only; runs differ from each other by more than that, so
    compare several.
    """
    n = len(ordered)
    k = max(int((n - 1.96 * math.sqrt(n)) / 2), 0)
    return ordered[k], ordered[n - 1 - k]


def run_block(model, opt, sched, data, steps: int) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(steps):
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20, help="steps per block (default: the probe's `every`)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--system-malloc", action="store_true",
                        help="leave glibc's malloc thresholds at their (adaptive) defaults")
    args = parser.parse_args()
    malloc = "the system's malloc, default thresholds" if args.system_malloc else fix_malloc_thresholds()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = SmallCNN()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    total = args.blocks * args.steps * 3 + args.steps
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=total + 10)
    data = [(torch.randn(args.batch, 3, 32, 32), torch.randint(0, 10, (args.batch,))) for _ in range(8)]
    run_block(model, opt, sched, data, args.steps)  # warm-up: allocator, kernels, optimizer state

    bare, probed, anomaly = [], [], []
    warnings.simplefilter("ignore")  # anomaly mode announces itself every block

    def probed_block() -> tuple[float, float]:
        with loopcheck.probe(model, opt, scheduler=sched, summary=False) as probe:
            elapsed = run_block(model, opt, sched, data, args.steps)
        assert not probe.findings, probe.findings
        return elapsed

    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for k in range(args.blocks):
        # ABBA order: a slow drift of the shared machine affects both variants alike
        if k % 2:
            probed.append(probed_block())
            bare.append(run_block(model, opt, sched, data, args.steps))
        else:
            bare.append(run_block(model, opt, sched, data, args.steps))
            probed.append(probed_block())
        if k % 4 == 0:
            with torch.autograd.detect_anomaly():
                anomaly.append((run_block(model, opt, sched, data, args.steps), bare[-1]))
    steps_run = (len(bare) + len(probed) + len(anomaly)) * args.steps
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps_run
    ratios = sorted(p[0] / b[0] for p, b in zip(probed, bare))
    ratio = statistics.median(ratios)
    low, high = median_interval(ratios)
    ratio_cpu = statistics.median(p[1] / b[1] for p, b in zip(probed, bare))
    ratio_anomaly = statistics.median(a[0] / b[0] for a, b in anomaly)
    step_ms = statistics.median(b[0] for b in bare) / args.steps * 1e3
    params = sum(p.numel() for p in model.parameters())
    print(f"small CNN ({params:,} parameters), batch {args.batch}, {args.threads} thread(s), "
          f"{args.blocks} x {args.steps} steps per variant; bare step {step_ms:.2f} ms")
    print(f"memory: {malloc}; {faults:,.0f} minor page faults per step")
    print(f"probe overhead (median probed/bare): {ratio:.3f}x "
          f"(95% interval of the median over {len(ratios)} block pairs: {low:.3f}x to {high:.3f}x)")
    print(f"  same, process CPU time:            {ratio_cpu:.3f}x")
    print(f"detect_anomaly overhead, for scale:  {ratio_anomaly:.3f}x")


if __name__ == "__main__":
    main()
