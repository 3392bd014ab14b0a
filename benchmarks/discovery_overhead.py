"""What discovery costs: `loopcheck.probe()` (finds everything) against `loopcheck.probe(model, opt, ...)`.

A small MLP with batch norm and dropout trains with AdamW, a StepLR and a (CPU, bfloat16)
GradScaler (the scheduler made before the probe, as most scripts do), in interleaved blocks: each
block opens a new probe, so the discovering side pays its whole search (the global module hook
until the first step, one pass over the heap to find the scheduler through its optimizer, the
rebuilds of the detectors) in every block. Printed, all measured side by side in this run:

- start: the extra time of entering the probe and running the first `--start` steps, discovering
  minus given (median and range over block pairs, milliseconds): a once-per-run cost;
- steady: the median over block pairs of (discovering / given) time of the steps after that, wall
  clock and process CPU time: what a long run pays per step.

    python benchmarks/discovery_overhead.py [--blocks 20] [--steps 40] [--start 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from torch import nn
from torch.nn import functional as F

import loopcheck


def build() -> tuple[nn.Module, torch.optim.Optimizer, object, torch.amp.GradScaler]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 10),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
    return model, opt, sched, torch.amp.GradScaler("cpu")


def block(discover: bool, start: int, data: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float, float]:
    """(start wall, steady wall, steady CPU) seconds of one probed block."""
    model, opt, sched, scaler = build()
    given = {} if discover else {"model": model, "optimizer": opt, "scheduler": sched, "scaler": scaler}
    times = [(time.perf_counter(), time.process_time())]
    with loopcheck.probe(on_finding="ignore", summary=False, **given):
        for i, (x, y) in enumerate(data):
            if i == start:
                times.append((time.perf_counter(), time.process_time()))
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
        times.append((time.perf_counter(), time.process_time()))
    (w0, _), (w1, c1), (w2, c2) = times
    return w1 - w0, w2 - w1, c2 - c1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--start", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(128, 64, generator=g), torch.randint(0, 10, (128,), generator=g)) for _ in range(args.steps)]
    block(True, args.start, data), block(False, args.start, data)  # warm-up, untimed
    starts, walls, cpus = [], [], []
    for i in range(args.blocks):
        order = (True, False) if i % 2 == 0 else (False, True)
        times = {d: block(d, args.start, data) for d in order}
        starts.append(1000 * (times[True][0] - times[False][0]))
        walls.append(times[True][1] / times[False][1])
        cpus.append(times[True][2] / times[False][2])
    print(f"{args.blocks} block pairs of {args.steps} steps")
    print(f"start (enter + {args.start} steps), discovering - given: median {statistics.median(starts):+.1f} ms "
          f"(range {min(starts):+.1f} .. {max(starts):+.1f})")
    for name, ratios in (("wall clock", walls), ("CPU time", cpus)):
        print(f"steady (steps {args.start + 1}..{args.steps}), discovering / given, {name}: "
              f"median {statistics.median(ratios):.3f} (range {min(ratios):.3f} .. {max(ratios):.3f})")


if __name__ == "__main__":
    main()
