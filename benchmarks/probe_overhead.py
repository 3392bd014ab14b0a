"""Probe overhead on CPU: a small CNN trained in interleaved bare / probed / anomaly-mode blocks.

Prints the median over block pairs of (probed time / bare time) with a 95% interval, and for scale
the same ratio for `torch.autograd.detect_anomaly()`. The probe runs in its default configuration
(gradient, non-finite, LR, mode, memory and data checks every step; device statistics read every 20
steps). A block is as long as the probe's sampling interval, so every probed block includes one
reading of the device statistics. Wall-clock time is the measure; the process CPU time ratio is
printed too, because on a shared machine it is less disturbed by other processes.

The blocks are split over three fresh processes, run one after the other (`--processes`): the
ratio moves more between processes than between the blocks of one, so one process is not a fair
sample. The median of each process is printed as well.

glibc's malloc returns the activation memory to the system after each step and faults it in again
at the next (thousands of page faults per step, on both sides), which moves the ratio by a few
points between runs. Unless `--system-malloc` is given, the benchmark fixes glibc's mmap and trim
thresholds first, so freed activations stay in the heap; both variants run under the same setting.

    python benchmarks/probe_overhead.py [--blocks 30] [--processes 3] [--steps 20] [--threads 1]
                                        [--system-malloc]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import math
import resource
import statistics
import subprocess
import sys
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


def measure(args: argparse.Namespace) -> dict:
    """One process: warm up, then the interleaved blocks; the raw timings as a JSON-able dict."""
    malloc = "the system's malloc, default thresholds" if args.system_malloc else fix_malloc_thresholds()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = SmallCNN()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    total = args.blocks * args.steps * 3 + 2 * args.steps
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=total + 10)
    data = [(torch.randn(args.batch, 3, 32, 32), torch.randint(0, 10, (args.batch,))) for _ in range(8)]
    bare, probed, anomaly = [], [], []
    warnings.simplefilter("ignore")  # anomaly mode announces itself every block

    def probed_block() -> tuple[float, float]:
        with loopcheck.probe(model, opt, scheduler=sched, summary=False) as probe:
            elapsed = run_block(model, opt, sched, data, args.steps)
        assert not probe.findings, probe.findings
        return elapsed

    # Warm-up, not timed: allocator, kernels, optimizer state, and what a run pays once (imports).
    run_block(model, opt, sched, data, args.steps)
    probed_block()

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
                anomaly.append((run_block(model, opt, sched, data, args.steps)[0], bare[-1][0]))
    steps_run = (len(bare) + len(probed) + len(anomaly)) * args.steps
    return {
        "pairs": [(p[0], b[0], p[1], b[1]) for p, b in zip(probed, bare)],
        "anomaly": anomaly,
        "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps_run,
        "malloc": malloc,
        "params": sum(p.numel() for p in model.parameters()),
    }


def in_processes(args: argparse.Namespace) -> list[dict]:
    """Split the blocks over fresh processes, run one after the other: a process's memory layout
    moves its ratio by more than the noise between its blocks, so one process is not a sample."""
    blocks = math.ceil(args.blocks / args.processes)
    command = [sys.executable, __file__, "--worker", "--blocks", str(blocks), "--steps", str(args.steps),
               "--batch", str(args.batch), "--threads", str(args.threads)]
    if args.system_malloc:
        command.append("--system-malloc")
    results = []
    for _ in range(args.processes):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"a benchmark process failed (exit {done.returncode}):\n{done.stderr}")
        results.append(json.loads(done.stdout))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30, help="block pairs in all (default: 30)")
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh processes the blocks are split over (default: 3; 1 runs them here)")
    parser.add_argument("--steps", type=int, default=20, help="steps per block (default: the probe's `every`)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--system-malloc", action="store_true",
                        help="leave glibc's malloc thresholds at their (adaptive) defaults")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("blocks", "processes", "steps", "batch", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.worker:
        print(json.dumps(measure(args)))
        return
    results = in_processes(args) if args.processes > 1 else [measure(args)]

    pairs = [pair for result in results for pair in result["pairs"]]
    ratios = sorted(p / b for p, b, _, _ in pairs)
    ratio = statistics.median(ratios)
    low, high = median_interval(ratios)
    ratio_cpu = statistics.median(pc / bc for _, _, pc, bc in pairs)
    ratio_anomaly = statistics.median(a / b for result in results for a, b in result["anomaly"])
    step_ms = statistics.median(b for _, b, _, _ in pairs) / args.steps * 1e3
    faults = statistics.mean(result["faults"] for result in results)
    per_process = ", ".join(f"{statistics.median(p / b for p, b, _, _ in r['pairs']):.3f}x" for r in results)
    print(f"small CNN ({results[0]['params']:,} parameters), batch {args.batch}, {args.threads} thread(s), "
          f"{len(pairs)} x {args.steps} steps per variant in {len(results)} process(es); "
          f"bare step {step_ms:.2f} ms")
    print(f"memory: {results[0]['malloc']}; {faults:,.0f} minor page faults per step")
    print(f"probe overhead (median probed/bare): {ratio:.3f}x "
          f"(95% interval of the median over {len(ratios)} block pairs: {low:.3f}x to {high:.3f}x)")
    if len(results) > 1:
        print(f"  median of each process:            {per_process}")
    print(f"  same, process CPU time:            {ratio_cpu:.3f}x")
    print(f"detect_anomaly overhead, for scale:  {ratio_anomaly:.3f}x")


if __name__ == "__main__":
    main()
