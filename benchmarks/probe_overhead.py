"""Probe overhead on CPU: six model shapes, each trained in interleaved bare / probed blocks.

The shapes (`SHAPES` below): a dense MLP, a VAE, a CNN with batch norm, an LSTM
language model, a small GPT and a GAN with two optimizers. For each one the benchmark prints the
median over block pairs of (probed time / bare time) with a 95% interval and the process CPU time
ratio, which a shared machine disturbs less. The shapes are defined in `shapes.py`. The probe runs in its default configuration (every
detector; device statistics read every 20 steps); a block is as long as the sampling interval, so
every probed block includes one reading of the device statistics. Each block starts with
untimed steps (`--settle`, both variants): a fresh probe's first sampling period, which a real
run pays once and the blocks of a long run do not pay again. In it the probe watches each
optimizer's first 8 steps in full (`Probe.watched`) and then every 4th, until the first sample
tunes the interval to the cost of the gradient norms (`loopcheck.probe.cadence`). With 8 settling
steps, 5 of a block's 20 timed steps were watched ones, against 1 or 2 in a long run, and the GAN's
ratio read about 2 points higher (1.072x against 1.049x in two runs back to back). Pairs run in ABBA order.

Each model's blocks are split over fresh processes, run one after the other (`--processes`): the
ratio moves more between processes than between the blocks of one, so one process is not a fair
sample.

glibc's malloc returns the activation memory to the system after each step and faults it in again
at the next (thousands of page faults per step, on both sides), which moves the ratio by a few
points between runs. Unless `--system-malloc` is given, the benchmark fixes glibc's mmap and trim
thresholds first, so freed activations stay in the heap; both variants run under the same setting.

The last line gives the largest median ratio over the models, wall clock and CPU time, against
the target of 1.03x. `--quick` (6 block pairs, one process per model) takes about two minutes.
`--detectors` (class names, or `none`) and `--option KEY=VALUE` run the blocks' probe with fewer
detectors or other options, to see what each part costs; the verdict then says it is not the
default configuration. `--floor` adds blocks of the overhead floor (`floor_probe.py`: the per-step
work the default configuration cannot skip, in plain hooks, and nothing else) to the same rounds
(ABCCBA) and prints its ratio next to the probe's, and the difference in points: what the probe's
design costs beyond its necessary work.

`--alternate` measures something narrower and steadier: inside one probe and one process per
model, steps alternate between the probe looking and not (ABBA), each timed by the thread's CPU
clock, and the difference of the two medians is the probe's cost per step in microseconds.
It takes `--detectors` and `--option` too: what one part of the probe costs, measured this way.

`--against REF` compares two versions of the probe side by side, which a shared machine
disturbs far less than two runs do: the probe package as committed at git revision REF is loaded
under another name next to the working tree's, both probes are entered around one model, and
steps rotate between neither looking, this one and that one (off, this, that, that, this, off),
each timed by the thread's CPU clock. It prints each version's cost per step and their
difference; the step clock of each probe advances only on its own steps.

`--inside` measures only the time spent inside the probe's own hooks and wrappers (forward hooks
on the probed models, and on those of their layers that a non-finite value could not be traced to
by their parameters alone; the backward wrapper less the backward itself; the optimizer's step
hooks), per step, by the thread's CPU clock, the way they run in training: after torch's kernels
have pushed the interpreter's data out of the caches, each Python call of the probe costs several
times what it costs in a micro-benchmark. It also gives the median inside each kind of step: lean
ones, the watched ones that take the exact gradient checks (`Probe.watched`), and the sampled ones
that end with the periodic read and judgement; a block of `--steps` steps holds all three. With
`--against REF` both versions run, in alternating fresh processes (`--processes` rounds), and the
medians of the rounds are compared. Two probes in one
process (`--against` alone) cannot resolve differences under about 150 us per step: identical
code measures up to that far apart depending on which copy is imported first.

    python benchmarks/probe_overhead.py [--models mlp,vae,cnn,lstm,gpt,gan] [--blocks 12]
                                        [--processes 2] [--steps 20] [--threads 1] [--system-malloc]
                                        [--detectors NAMES] [--option KEY=VALUE ...] [--floor]
                                        [--quick] [--alternate] [--inside] [--against REF]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import importlib
import io
import json
import math
import re
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

import loopcheck
from loopcheck.probe.config import AUTOMATIC, ProbeConfig, ProbeUsageError
from loopcheck.probe.detectors import default_detectors
from floor_probe import FloorProbe
from shapes import SHAPES, build


_TARGET = 1.03  # the overhead the probe must stay under on every shape (median step time)

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


def probe_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The probe's arguments beyond the defaults (`--detectors`, `--option`), for the blocks."""
    settings: dict[str, Any] = {}
    if args.detectors is not None:
        by_name = {cls.__name__: cls for cls in default_detectors()}
        settings["detectors"] = [by_name[n] for n in detector_names(args)]
    settings.update(parse_option(item) for item in args.option)
    return settings


def detector_names(args: argparse.Namespace) -> list[str]:
    """The class names `--detectors` gives (none for `none`)."""
    if args.detectors == "none":
        return []
    return [n.strip() for n in args.detectors.split(",") if n.strip()]


def parse_option(item: str) -> tuple[str, Any]:
    """KEY=VALUE as the probe takes it: VALUE read as the type of the option's default."""
    key, _, text = item.partition("=")
    default = {f.name: f.default for f in fields(ProbeConfig)}.get(key)
    try:
        if isinstance(default, bool):
            flags = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
            return key, flags.get(text.lower(), text)
        if key in AUTOMATIC and text.lower() == "none":
            return key, None
        if isinstance(default, int) or key in AUTOMATIC:
            return key, int(text)
        if isinstance(default, float):
            return key, float(text)
    except ValueError:
        pass
    return key, text  # the probe says what it expects instead


def check_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject unknown detectors and options before any process starts."""
    if args.detectors is not None:
        known = {cls.__name__ for cls in default_detectors()}
        unknown = [n for n in detector_names(args) if n not in known]
        if unknown:
            parser.error(f"--detectors: unknown detector(s) {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
    for item in args.option:
        if "=" not in item:
            parser.error(f"--option {item!r}: give KEY=VALUE (a probe option, e.g. localize=false)")
    try:
        ProbeConfig.from_options(dict(parse_option(item) for item in args.option))
    except ProbeUsageError as err:
        parser.error(f"--option: {err}")


def measure(args: argparse.Namespace) -> dict:
    """One process, one model: warm up, then the interleaved blocks; the raw timings as a JSON-able dict."""
    malloc = "the system's malloc, default thresholds" if args.system_malloc else fix_malloc_thresholds()
    torch.set_num_threads(args.threads)
    shape = build(args.models)
    times: dict[str, list[tuple[float, float]]] = {"bare": [], "probe": [], "floor": []}
    clock = [0]
    warnings.simplefilter("ignore")

    def block(variant: str) -> tuple[float, float]:
        first, clock[0] = clock[0], clock[0] + args.settle + args.steps
        if variant == "bare":
            run_block(shape.step, first, args.settle)
            return run_block(shape.step, first + args.settle, args.steps)
        if variant == "floor":
            with FloorProbe(shape.models, shape.optimizers):
                run_block(shape.step, first, args.settle)
                return run_block(shape.step, first + args.settle, args.steps)
        with loopcheck.probe(shape.models, shape.optimizers, scheduler=shape.scheduler,
                             **{"summary": False, **probe_settings(args)}) as probe:
            run_block(shape.step, first, args.settle)  # a fresh probe's one-time first steps
            elapsed = run_block(shape.step, first + args.settle, args.steps)
        assert not probe.findings, probe.findings
        return elapsed

    variants = ["bare", "probe"] + (["floor"] if args.floor else [])
    # Warm-up, not timed: allocator, kernels, optimizer state, and what a run pays once (imports).
    for variant in variants:
        block(variant)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for k in range(args.blocks):
        # ABBA (ABCCBA) order: a slow drift of the shared machine affects every variant alike
        for variant in (variants[::-1] if k % 2 else variants):
            times[variant].append(block(variant))
    bare = times["bare"]
    steps_run = len(variants) * len(bare) * args.steps
    return {
        "pairs": [(p[0], b[0], p[1], b[1]) for p, b in zip(times["probe"], bare)],
        "floor": [(f[0], b[0], f[1], b[1]) for f, b in zip(times["floor"], bare)],
        "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps_run,
        "malloc": malloc,
        "params": sum(p.numel() for m in shape.models for p in m.parameters()),
    }


def alternate(args: argparse.Namespace) -> dict:
    """One process, one model, one probe: steps alternate between the probe looking (`live`) and
    not, in ABBA order, each timed by the thread's CPU clock; the per-step cost of the probe is the
    difference of the medians. Drift of a shared machine and descheduling cancel out; what is
    left is the probe's own work, the periodic reads included (steps are counted only while live)."""
    fix_malloc_thresholds()
    torch.set_num_threads(args.threads)
    shape = build(args.models)
    warnings.simplefilter("ignore")
    for k in range(args.settle * 4):
        shape.step(k)
    looking: list[float] = []
    not_looking: list[float] = []
    with loopcheck.probe(shape.models, shape.optimizers, scheduler=shape.scheduler,
                         **{"summary": False, **probe_settings(args)}) as probe:
        for k in range(args.settle * 4, args.settle * 4 + 2 * args.blocks * args.steps):
            live = k % 4 in (0, 3)
            probe.live = live
            start = time.thread_time()
            shape.step(k)
            (looking if live else not_looking).append(time.thread_time() - start)
        probe.live = True
    return {"on": statistics.median(looking), "off": statistics.median(not_looking)}


def snapshot(ref: str, into: str) -> str:
    """The probe package as committed at git revision `ref`, unpacked under `into` as a package of
    its own name (its imports of itself renamed); return that name."""
    root = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(root), "archive", ref, "loopcheck/probe"], capture_output=True)
    except OSError as err:
        sys.exit(f"--against needs git to read loopcheck/probe at {ref!r}: {err}")
    if done.returncode:
        sys.exit(f"--against: git could not read loopcheck/probe at {ref!r}: {done.stderr.decode().strip()}")
    name = "loopcheck_probe_" + re.sub(r"\W", "_", ref)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        for member in archive.getmembers():
            if not member.isfile() or not member.name.endswith(".py"):
                continue
            path = Path(into, name, *Path(member.name).parts[2:])
            path.parent.mkdir(parents=True, exist_ok=True)
            text = archive.extractfile(member).read().decode()  # type: ignore[union-attr]
            path.write_text(text.replace("loopcheck.probe", name))
    return name


def probe_at(ref: str, into: str) -> Any:
    """The Probe class of the probe package as committed at `ref`, unpacked under `into` (see `snapshot`)."""
    sys.path.insert(0, into)
    return importlib.import_module(snapshot(ref, into) + ".probe").Probe


def against(args: argparse.Namespace) -> dict:
    """One process, one model, two probes (this version and the one at `args.against`): steps rotate
    between neither looking, this one and that one, each timed by the thread's CPU clock."""
    fix_malloc_thresholds()
    torch.set_num_threads(args.threads)
    shape = build(args.models)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as into:
        other = probe_at(args.against, into)
        for k in range(args.settle * 4):
            shape.step(k)
        options = dict(scheduler=shape.scheduler, summary=False)
        probes = {"this": loopcheck.probe(shape.models, shape.optimizers, **options),
                  "that": other(shape.models, shape.optimizers, **options)}
        times: dict[str, list[float]] = {"off": [], "this": [], "that": []}
        order = ("off", "this", "that", "that", "this", "off")
        first = args.settle * 4
        with probes["this"], probes["that"]:
            for k in range(first, first + 3 * args.blocks * args.steps):
                which = order[k % len(order)]
                for key, probe in probes.items():
                    probe.live = key == which
                start = time.thread_time()
                shape.step(k)
                times[which].append(time.thread_time() - start)
            for probe in probes.values():
                probe.live = True
    return {key: statistics.median(values) for key, values in times.items()}


def inside(args: argparse.Namespace) -> dict:
    """One process, one model, one probe (this version, or the one at `args.against`): the time per
    step spent inside the probe's hooks and wrappers, by entry point (thread CPU clock)."""
    fix_malloc_thresholds()
    torch.set_num_threads(args.threads)
    clock = time.thread_time
    spent: dict[str, float] = {}

    def timed(key: str, fn: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            start = clock()
            try:
                return fn(*a, **k)
            finally:
                spent[key] = spent.get(key, 0.0) + clock() - start
        return call

    # The probe wraps torch.autograd.backward: time the real backward under its wrapper (`inner`),
    # and the wrapper from outside; the difference is the probe's part.
    real_backward = torch.autograd.backward
    inner = [0.0]

    def backward(*a: Any, **k: Any) -> Any:
        start = clock()
        try:
            return real_backward(*a, **k)
        finally:
            inner[0] += clock() - start

    with tempfile.TemporaryDirectory() as into:
        probe_class = probe_at(args.against, into) if args.against else loopcheck.probe
        shape = build(args.models)
        warnings.simplefilter("ignore")
        for k in range(args.settle * 4):
            shape.step(k)
        torch.autograd.backward = backward
        before = {(id(m), h) for model in shape.models for m in model.modules()
                  for hooks in (m._forward_pre_hooks, m._forward_hooks) for h in hooks}
        try:
            with probe_class(shape.models, shape.optimizers, scheduler=shape.scheduler, summary=False) as probe:
                for opt in shape.optimizers:
                    for hooks, key in ((opt._optimizer_step_pre_hooks, "step_pre"),
                                       (opt._optimizer_step_post_hooks, "step_post")):
                        for handle, hook in list(hooks.items()):
                            hooks[handle] = timed(key, hook)
                roots = {id(model) for model in shape.models}
                for module in {id(m): m for model in shape.models for m in model.modules()}.values():
                    for hooks, key in ((module._forward_pre_hooks, "forward_pre"), (module._forward_hooks, "forward")):
                        for handle, hook in list(hooks.items()):
                            if (id(module), handle) not in before:  # the probe's, on the model or its layers
                                hooks[handle] = timed(key if id(module) in roots else "layers", hook)
                wrapped = torch.autograd.backward

                def outer(*a: Any, **k: Any) -> Any:
                    before, start = inner[0], clock()
                    try:
                        return wrapped(*a, **k)
                    finally:
                        spent["backward"] = spent.get("backward", 0.0) + clock() - start - (inner[0] - before)
                torch.autograd.backward = outer
                first = args.settle * 4
                for k in range(first, first + args.settle):  # a fresh probe's one-time first steps
                    shape.step(k)
                spent.clear()
                steps = args.blocks * args.steps
                kinds: dict[str, list[float]] = {}
                start = clock()
                for k in range(first + args.settle, first + args.settle + steps):
                    kind, before = step_kind(probe), sum(spent.values())
                    shape.step(k)
                    kinds.setdefault(kind, []).append(sum(spent.values()) - before)
                total = clock() - start
                torch.autograd.backward = wrapped
        finally:
            torch.autograd.backward = real_backward
    return {"step": total / steps, "parts": {key: value / steps for key, value in spent.items()},
            "kinds": {kind: {"share": len(times) / steps, "median": statistics.median(times)}
                      for kind, times in kinds.items()}}


_STEP_KINDS = ("lean", "watched", "sample", "step")  # what `step_kind` tells, in the order printed


def step_kind(probe: Any) -> str:
    """What the coming step of the first optimizer is to the probe: `sample` (the periodic read
    and judgement at its end), `watched` (the exact gradient checks, see `Probe.watched`), or
    `lean` (neither); `step` for a probe version that does not tell."""
    try:
        if (probe.step + 1) % probe.config.every == 0:
            return "sample"
        return "watched" if probe.watched(0) else "lean"
    except AttributeError:
        return "step"


def run_worker(args: argparse.Namespace, model: str, *mode: str, blocks: int | None = None) -> dict:
    """Run one worker process for `model` with this run's settings and `mode`'s flags; its result."""
    command = [sys.executable, __file__, "--worker", *mode, "--models", model,
               "--blocks", str(args.blocks if blocks is None else blocks), "--steps", str(args.steps),
               "--settle", str(args.settle), "--threads", str(args.threads)]
    if args.detectors is not None:
        command += ["--detectors", args.detectors]
    for item in args.option:
        command += ["--option", item]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"a benchmark process for {model} failed (exit {done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


def in_processes(args: argparse.Namespace, model: str) -> list[dict]:
    """Split one model's blocks over fresh processes, run one after the other."""
    blocks = math.ceil(args.blocks / args.processes)
    mode = (["--system-malloc"] if args.system_malloc else []) + (["--floor"] if args.floor else [])
    return [run_worker(args, model, *mode, blocks=blocks) for _ in range(args.processes)]


def report_inside(args: argparse.Namespace, models: list[str]) -> None:
    """`--inside`: run the workers (this version and REF alternating, `--processes` rounds) and print
    the median per-step time inside the probe, by entry point."""
    versions = ["this"] + ([args.against] if args.against else [])
    print(f"per-step time inside the probe's hooks ({args.blocks * args.steps} steps per process, "
          f"{args.processes} process(es) per version, thread CPU time, medians over processes)")
    for model in models:
        runs: dict[str, list[dict]] = {v: [] for v in versions}
        for _ in range(args.processes):
            for version in versions:
                mode = ["--inside"] + (["--against", version] if version != "this" else [])
                runs[version].append(run_worker(args, model, *mode))
        totals = {}
        for version in versions:
            results = runs[version]
            keys = sorted({key for r in results for key in r["parts"]})
            parts = {key: statistics.median(r["parts"].get(key, 0.0) for r in results) for key in keys}
            totals[version] = statistics.median(sum(r["parts"].values()) for r in results)
            step = statistics.median(r["step"] for r in results)
            print(f"{model:<6} {version:<10} step {step * 1e3:6.2f} ms  inside {totals[version] * 1e6:6.1f} us "
                  f"({totals[version] / step:.1%})  " + "  ".join(f"{k} {v * 1e6:.1f}" for k, v in parts.items()),
                  flush=True)
            kinds = [kind for kind in _STEP_KINDS if all(kind in r.get("kinds", {}) for r in results)]
            print(f"{'':<6} {'':<10} by kind of step: " + "  ".join(
                f"{kind} {statistics.median(r['kinds'][kind]['share'] for r in results):.0%} of steps, "
                f"{statistics.median(r['kinds'][kind]['median'] for r in results) * 1e6:.1f} us"
                for kind in kinds), flush=True)
        if args.against:
            print(f"{model:<6} difference {(totals['this'] - totals[args.against]) * 1e6:+.1f} us per step", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SHAPES),
                        help=f"comma-separated shapes (default: all of {', '.join(SHAPES)})")
    parser.add_argument("--blocks", type=int, default=12, help="block pairs per model (default: 12)")
    parser.add_argument("--processes", type=int, default=2,
                        help="fresh processes each model's blocks are split over (default: 2)")
    parser.add_argument("--steps", type=int, default=20, help="steps per block (default: the probe's `every`)")
    parser.add_argument("--settle", type=int, default=ProbeConfig.every,
                        help=f"untimed steps at the start of each block (default: {ProbeConfig.every}, one sampling "
                             "period): a fresh probe checks each optimizer's first steps in full and tunes its "
                             "check interval at the first sample, once per run, which a block of a real run does "
                             "not pay")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--system-malloc", action="store_true",
                        help="leave glibc's malloc thresholds at their (adaptive) defaults")
    parser.add_argument("--detectors", metavar="NAMES",
                        help="the probe of the blocks (or of --alternate) runs only these detectors (comma-separated class names, e.g. "
                             "NonFiniteDetector; 'none': hooks and bookkeeping only); the verdict is then not "
                             "the target's")
    parser.add_argument("--option", metavar="KEY=VALUE", action="append", default=[],
                        help="a probe option for the blocks (repeatable, e.g. localize=false, check_every=8)")
    parser.add_argument("--floor", action="store_true",
                        help="also time blocks of the overhead floor (benchmarks/floor_probe.py: the per-step "
                             "work the defaults need and nothing else) in the same rounds, and print its ratio")
    parser.add_argument("--quick", action="store_true",
                        help="6 block pairs in one process per model (about two minutes in all)")
    parser.add_argument("--alternate", action="store_true",
                        help="instead: per-step cost of the probe, steps alternating between the probe looking "
                             "and not inside one probe and one process (blocks x steps steps of each)")
    parser.add_argument("--inside", action="store_true",
                        help="instead: the time per step inside the probe's hooks, by entry point (with --against: "
                             "both versions, in alternating processes, --processes rounds)")
    parser.add_argument("--against", metavar="REF",
                        help="instead: the per-step cost of this version and of the probe at git revision REF, "
                             "side by side in one process (blocks x steps steps of each)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.blocks, args.processes = 6, 1
    check_settings(parser, args)
    if (args.detectors is not None or args.option or args.floor) and (args.inside or args.against):
        parser.error("--detectors, --option and --floor apply to the block and --alternate measurements only")
    if args.floor and args.alternate:
        parser.error("--floor applies to the block measurement only")
    for name in ("blocks", "processes", "steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in SHAPES]
    if unknown or not models:
        parser.error(f"--models: unknown shape(s) {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(SHAPES)}")
    if args.worker:
        work = inside if args.inside else against if args.against else alternate if args.alternate else measure
        print(json.dumps(work(args)))
        return
    if args.inside:
        report_inside(args, models)
        return
    if args.against:
        print(f"per-step cost of this version and of {args.against}, steps rotating inside one process "
              f"({args.blocks * args.steps} of each per model, thread CPU time, medians)")
        for model in models:
            result = run_worker(args, model, "--against", args.against)
            off = result["off"]
            this, that = result["this"] - off, result["that"] - off
            print(f"{model:<6} step {off * 1e3:6.2f} ms  this {this * 1e6:+7.0f} us ({result['this'] / off:.3f}x)  "
                  f"{args.against} {that * 1e6:+7.0f} us ({result['that'] / off:.3f}x)  "
                  f"difference {(this - that) * 1e6:+6.0f} us", flush=True)
        return
    if args.alternate:
        settings = "" if args.detectors is None and not args.option else "; not the default configuration"
        print(f"per-step cost, steps alternating inside one probe ({args.blocks * args.steps} of each per model, "
              f"thread CPU time, medians{settings})")
        for model in models:
            result = run_worker(args, model, "--alternate")
            cost = result["on"] - result["off"]
            print(f"{model:<6} step {result['off'] * 1e3:6.2f} ms  probe {cost * 1e6:+7.0f} us  "
                  f"({result['on'] / result['off']:.3f}x)", flush=True)
        return
    print(f"{args.threads} thread(s), {args.blocks} x {args.steps} steps per variant and model, "
          f"{args.processes} process(es) per model")
    print(f"{'model':<6} {'params':>9} {'bare ms':>8} {'probed/bare':>11} {'95% interval':>17} {'cpu':>7}  per process"
          + ("  (floor/bare; probe less floor)" if args.floor else ""))
    malloc = ""
    worst: dict[str, tuple[float, str]] = {}
    started = time.perf_counter()
    for model in models:
        results = in_processes(args, model)
        malloc = results[0]["malloc"]
        pairs = [pair for result in results for pair in result["pairs"]]
        ratios = sorted(p / b for p, b, _, _ in pairs)
        low, high = median_interval(ratios)
        ratio_cpu = statistics.median(pc / bc for _, _, pc, bc in pairs)
        step_ms = statistics.median(b for _, b, _, _ in pairs) / args.steps * 1e3
        per_process = ", ".join(f"{statistics.median(p / b for p, b, _, _ in r['pairs']):.3f}x" for r in results)
        floor = ""
        if args.floor:
            floor_ratio = statistics.median(f / b for result in results for f, b, _, _ in result["floor"])
            floor = f"  (floor {floor_ratio:.3f}x; {(statistics.median(ratios) - floor_ratio) * 100:+.1f} points)"
        print(f"{model:<6} {results[0]['params']:>9,} {step_ms:>8.2f} {statistics.median(ratios):>10.3f}x "
              f"{low:>7.3f}x-{high:.3f}x {ratio_cpu:>6.3f}x  {per_process}{floor}", flush=True)
        for clock, ratio in (("wall", statistics.median(ratios)), ("cpu", ratio_cpu)):
            worst[clock] = max(worst.get(clock, (0.0, "")), (ratio, model))
    print(f"memory: {malloc}")
    verdict = "met" if max(r for r, _ in worst.values()) <= _TARGET else "not met"
    if args.detectors is not None or args.option:
        verdict += ", but not in the default configuration"
    print(f"largest median probed/bare: {worst['wall'][0]:.3f}x wall ({worst['wall'][1]}), "
          f"{worst['cpu'][0]:.3f}x cpu ({worst['cpu'][1]}); target <= {_TARGET}x: {verdict} "
          f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
