"""Probe overhead on CUDA, and proof that the probe adds no per-step host-device synchronisation.

1. A small CNN trained in interleaved bare / probed blocks (ABBA order); prints the median ratio
   probed/bare, and for scale the ratio of `torch.autograd.detect_anomaly()`.
2. A probed loop under `torch.cuda.set_sync_debug_mode("error")`: any synchronising call in the
   step path raises. The probe's own reads every `every` steps are deliberate and exempt (see
   loopcheck.probe.stats.host_read); the loop itself avoids `.item()`.

    python benchmarks/gpu_check.py [--blocks 30] [--steps 20]

Exits 0 with a message when CUDA is not available.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch
from torch.nn import functional as F

import loopcheck

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from probe_overhead import SmallCNN  # noqa: E402


def run_block(model, opt, sched, data, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available on this machine; nothing to measure.")
        return 0
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = SmallCNN().to(device)
    # capturable keeps Adam's step counter on the device: no .item() inside optimizer.step()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    total = args.blocks * args.steps * 3 + 10 * args.steps
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=total)
    data = [(torch.randn(args.batch, 3, 32, 32, device=device), torch.randint(0, 10, (args.batch,), device=device))
            for _ in range(8)]
    run_block(model, opt, sched, data, args.steps)

    bare, probed, anomaly = [], [], []
    warnings.simplefilter("ignore")
    for k in range(args.blocks):
        order = ("probed", "bare") if k % 2 else ("bare", "probed")
        for variant in order:
            if variant == "bare":
                bare.append(run_block(model, opt, sched, data, args.steps))
            else:
                with loopcheck.probe(model, opt, scheduler=sched, summary=False) as probe:
                    probed.append(run_block(model, opt, sched, data, args.steps))
                assert not probe.findings, probe.findings
        if k % 5 == 0:
            with torch.autograd.detect_anomaly():
                anomaly.append((run_block(model, opt, sched, data, args.steps), bare[-1]))
    print(f"{torch.cuda.get_device_name()}: bare step {statistics.median(bare) / args.steps * 1e3:.2f} ms")
    print(f"probe overhead (median probed/bare): {statistics.median(p / b for p, b in zip(probed, bare)):.3f}x")
    print(f"detect_anomaly overhead, for scale:  {statistics.median(a / b for a, b in anomaly):.3f}x")

    steps = 3 * 20 + 7
    with loopcheck.probe(model, opt, scheduler=sched, summary=False, every=20) as probe:
        torch.cuda.set_sync_debug_mode("error")
        try:
            for i in range(steps):
                x, y = data[i % len(data)]
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opt.step()
                sched.step()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    print(f"sync debug mode 'error': {steps} probed steps without a synchronising call "
          f"(findings: {[f.code for f in probe.findings] or 'none'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
