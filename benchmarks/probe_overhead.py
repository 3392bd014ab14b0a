"""Probe overhead on CPU: six model shapes, each trained in interleaved bare / probed blocks.

The shapes (`SHAPES` below): a dense MLP, a VAE, a CNN with batch norm, an LSTM
language model, a small GPT and a GAN with two optimizers. For each one the benchmark prints the
median over block pairs of (probed time / bare time) with a 95% interval and the process CPU time
ratio, which a shared machine disturbs less. The probe runs in its default configuration (every
detector; device statistics read every 20 steps); a block is as long as the sampling interval, so
every probed block includes one reading of the device statistics. Pairs run in ABBA order.

Each model's blocks are split over fresh processes, run one after the other (`--processes`): the
ratio moves more between processes than between the blocks of one, so one process is not a fair
sample.

glibc's malloc returns the activation memory to the system after each step and faults it in again
at the next (thousands of page faults per step, on both sides), which moves the ratio by a few
points between runs. Unless `--system-malloc` is given, the benchmark fixes glibc's mmap and trim
thresholds first, so freed activations stay in the heap; both variants run under the same setting.

    python benchmarks/probe_overhead.py [--models mlp,vae,cnn,lstm,gpt,gan] [--blocks 12]
                                        [--processes 2] [--steps 20] [--threads 1] [--system-malloc]
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

from typing import Any, Callable, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

import loopcheck

# The model shapes, each written the way such scripts usually are, at a size that steps in a few
# milliseconds on one CPU thread. `build(name)` returns the models, the optimizers, a scheduler
# (or None) and a `step(k)` function that runs training step k.

class Shape(NamedTuple):
    models: list[nn.Module]
    optimizers: list[torch.optim.Optimizer]
    scheduler: Any
    step: Callable[[int], None]


def _batches(n: int, make: Callable[[torch.Generator], Any]) -> list[Any]:
    g = torch.Generator().manual_seed(0)
    return [make(g) for _ in range(n)]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(512, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def mlp() -> Shape:
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = _batches(8, lambda g: (torch.rand(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g)))

    def step(k: int) -> None:
        x, y = data[k % len(data)]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return Shape([model], [opt], None, step)


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.fc1(x))
        return self.fc21(h), self.fc22(h)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, logvar = self.encode(x.view(-1, 784))
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def vae() -> Shape:
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = _batches(8, lambda g: torch.rand(128, 1, 28, 28, generator=g))

    def step(k: int) -> None:
        x = data[k % len(data)]
        opt.zero_grad()
        recon, mu, logvar = model(x)
        bce = F.binary_cross_entropy(recon, x.view(-1, 784), reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = bce + kld
        loss.backward()
        opt.step()
    return Shape([model], [opt], None, step)


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


def cnn() -> Shape:
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=100_000)
    data = _batches(8, lambda g: (torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g)))

    def step(k: int) -> None:
        x, y = data[k % len(data)]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
    return Shape([model], [opt], sched, step)


class LSTMLM(nn.Module):
    def __init__(self, vocab: int = 2000, width: int = 128) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(vocab, width)
        self.rnn = nn.LSTM(width, width, 2, dropout=0.2)
        self.decoder = nn.Linear(width, vocab)

    def forward(self, x: torch.Tensor, hidden: Any) -> tuple[torch.Tensor, Any]:
        out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(out)), hidden


def lstm() -> Shape:
    model = LSTMLM()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000, gamma=0.5)
    data = _batches(8, lambda g: torch.randint(0, 2000, (21, 16), generator=g))
    state: dict[str, Any] = {"hidden": None}

    def step(k: int) -> None:
        tokens = data[k % len(data)]
        hidden = state["hidden"]
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)
        model.zero_grad()
        out, state["hidden"] = model(tokens[:-1], hidden)
        loss = F.cross_entropy(out.view(-1, out.size(-1)), tokens[1:].reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        if (k + 1) % 1000 == 0:
            sched.step()
    return Shape([model], [opt], sched, step)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(0.1))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 512, width: int = 128, layers: int = 2, heads: int = 4, block: int = 64) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def gpt() -> Shape:
    model = GPT()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95))
    warmup, total = 100, 100_000

    def lr_lambda(it: int) -> float:
        if it < warmup:
            return (it + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (it - warmup) / (total - warmup))))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    data = _batches(8, lambda g: torch.randint(0, 512, (8, 65), generator=g))

    def step(k: int) -> None:
        tokens = data[k % len(data)]
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return Shape([model], [opt], sched, step)


def gan() -> Shape:
    nz = 32
    net_g = nn.Sequential(nn.Linear(nz, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 256),
                          nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 784), nn.Tanh())
    net_d = nn.Sequential(nn.Linear(784, 256), nn.LeakyReLU(0.2), nn.Linear(256, 128), nn.LeakyReLU(0.2),
                          nn.Linear(128, 1))
    opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    data = _batches(8, lambda g: torch.rand(64, 784, generator=g) * 2 - 1)
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)

    def step(k: int) -> None:
        real = data[k % len(data)]
        net_d.zero_grad()
        err_real = F.binary_cross_entropy_with_logits(net_d(real), ones)
        err_real.backward()
        fake = net_g(torch.randn(64, nz))
        err_fake = F.binary_cross_entropy_with_logits(net_d(fake.detach()), zeros)
        err_fake.backward()
        opt_d.step()
        net_g.zero_grad()
        err_g = F.binary_cross_entropy_with_logits(net_d(fake), ones)
        err_g.backward()
        opt_g.step()
    return Shape([net_d, net_g], [opt_d, opt_g], None, step)


SHAPES: dict[str, Callable[[], Shape]] = {"mlp": mlp, "vae": vae, "cnn": cnn, "lstm": lstm, "gpt": gpt, "gan": gan}


def build(name: str) -> Shape:
    torch.manual_seed(0)
    return SHAPES[name]()




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


def run_block(step, first: int, steps: int) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    for k in range(first, first + steps):
        step(k)
    return time.perf_counter() - start, time.process_time() - cpu


def measure(args: argparse.Namespace) -> dict:
    """One process, one model: warm up, then the interleaved blocks; the raw timings as a JSON-able dict."""
    malloc = "the system's malloc, default thresholds" if args.system_malloc else fix_malloc_thresholds()
    torch.set_num_threads(args.threads)
    shape = build(args.models)
    bare, probed = [], []
    clock = [0]
    warnings.simplefilter("ignore")

    def block(with_probe: bool) -> tuple[float, float]:
        first, clock[0] = clock[0], clock[0] + args.steps
        if not with_probe:
            return run_block(shape.step, first, args.steps)
        with loopcheck.probe(shape.models, shape.optimizers, scheduler=shape.scheduler, summary=False) as probe:
            elapsed = run_block(shape.step, first, args.steps)
        assert not probe.findings, probe.findings
        return elapsed

    # Warm-up, not timed: allocator, kernels, optimizer state, and what a run pays once (imports).
    block(False)
    block(True)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for k in range(args.blocks):
        # ABBA order: a slow drift of the shared machine affects both variants alike
        if k % 2:
            probed.append(block(True))
            bare.append(block(False))
        else:
            bare.append(block(False))
            probed.append(block(True))
    steps_run = (len(bare) + len(probed)) * args.steps
    return {
        "pairs": [(p[0], b[0], p[1], b[1]) for p, b in zip(probed, bare)],
        "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps_run,
        "malloc": malloc,
        "params": sum(p.numel() for m in shape.models for p in m.parameters()),
    }


def in_processes(args: argparse.Namespace, model: str) -> list[dict]:
    """Split one model's blocks over fresh processes, run one after the other."""
    blocks = math.ceil(args.blocks / args.processes)
    command = [sys.executable, __file__, "--worker", "--models", model, "--blocks", str(blocks),
               "--steps", str(args.steps), "--threads", str(args.threads)]
    if args.system_malloc:
        command.append("--system-malloc")
    results = []
    for _ in range(args.processes):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"a benchmark process for {model} failed (exit {done.returncode}):\n{done.stderr}")
        results.append(json.loads(done.stdout))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SHAPES),
                        help=f"comma-separated shapes (default: all of {', '.join(SHAPES)})")
    parser.add_argument("--blocks", type=int, default=12, help="block pairs per model (default: 12)")
    parser.add_argument("--processes", type=int, default=2,
                        help="fresh processes each model's blocks are split over (default: 2)")
    parser.add_argument("--steps", type=int, default=20, help="steps per block (default: the probe's `every`)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--system-malloc", action="store_true",
                        help="leave glibc's malloc thresholds at their (adaptive) defaults")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("blocks", "processes", "steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in SHAPES]
    if unknown or not models:
        parser.error(f"--models: unknown shape(s) {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(SHAPES)}")
    if args.worker:
        print(json.dumps(measure(args)))
        return
    print(f"{args.threads} thread(s), {args.blocks} x {args.steps} steps per variant and model, "
          f"{args.processes} process(es) per model")
    print(f"{'model':<6} {'params':>9} {'bare ms':>8} {'probed/bare':>11} {'95% interval':>17} {'cpu':>7}  per process")
    malloc = ""
    for model in models:
        results = in_processes(args, model)
        malloc = results[0]["malloc"]
        pairs = [pair for result in results for pair in result["pairs"]]
        ratios = sorted(p / b for p, b, _, _ in pairs)
        low, high = median_interval(ratios)
        ratio_cpu = statistics.median(pc / bc for _, _, pc, bc in pairs)
        step_ms = statistics.median(b for _, b, _, _ in pairs) / args.steps * 1e3
        per_process = ", ".join(f"{statistics.median(p / b for p, b, _, _ in r['pairs']):.3f}x" for r in results)
        print(f"{model:<6} {results[0]['params']:>9,} {step_ms:>8.2f} {statistics.median(ratios):>10.3f}x "
              f"{low:>7.3f}x-{high:.3f}x {ratio_cpu:>6.3f}x  {per_process}", flush=True)
    print(f"memory: {malloc}")


if __name__ == "__main__":
    main()
