"""The probe's work per training step, counted instead of timed: the bytecode instructions, C
function calls and Python calls a probed step executes, less those of the same step run bare.

A few microseconds of hook code per step cannot be timed reliably on a shared machine
(`probe_overhead.py --inside` and `--against` say how far identical code measures apart); what the
probe executes can be counted exactly. The interpreter's tracing (`sys.settrace` with per-opcode
events, `sys.setprofile` for C calls) makes the steps slow but changes nothing they compute: the
same model and data run the same steps bare and probed, and the difference is the probe's work,
torch's slower call path for modules with hooks included. Counts are given per kind of step
(`lean`, `watched`, `sample`: see `probe_overhead.step_kind`) and as their mean over the run.

The probe's default cadence chooses `check_every` from the measured cost of the gradient norms,
which tracing distorts; here it is fixed (`--check-every`, 8 by default: the middle of the 4 to 16
the cadence picks on the CPU), so that counts repeat exactly from run to run. The counts carry no
cost per instruction: instructions, C calls and Python calls weigh differently and cache effects
are not in them. Use them to compare versions of the probe (`--against REF`: the probe package
as committed at git revision REF, counted the same way) and to find what to cut (`--top N`: the
probe's own functions by instructions per lean step); `probe_overhead.py` gives the time.
`--floor` counts the overhead floor the same way (`floor_probe.py`: the work the default
configuration cannot skip, in plain hooks), on the same steps: what the probe does beyond it is
what its design costs.

    python benchmarks/probe_work.py [--models mlp,vae,cnn,lstm,gpt,gan] [--steps 200] [--settle 40]
                                    [--check-every 8] [--against REF] [--top N] [--floor]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch

import loopcheck
from floor_probe import FloorProbe
from probe_overhead import probe_at, step_kind
from shapes import SHAPES, build

_KINDS = ("lean", "watched", "sample")
_MEASURES = ("instructions", "C calls", "Python calls")


class Counts:
    """What one traced step executed: instructions, C calls, Python calls, and the instructions
    of each function (file, name), for `--top`."""

    def __init__(self) -> None:
        self.totals = [0, 0, 0]
        self.by_function: Counter[tuple[str, str]] = Counter()

    def trace(self, frame: Any, event: str, arg: Any) -> Callable[..., Any]:
        frame.f_trace_opcodes = True
        self.totals[2] += 1
        key = (frame.f_code.co_filename, frame.f_code.co_name)
        totals, by_function = self.totals, self.by_function

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                totals[0] += 1
                by_function[key] += 1
            return local
        return local

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            self.totals[1] += 1


def _traced(step: Callable[[int], None], k: int) -> Counts:
    counts = Counts()
    sys.settrace(counts.trace)
    sys.setprofile(counts.profile)
    try:
        step(k)
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    return counts


def run(model: str, probe_class: Any, args: argparse.Namespace) -> list[tuple[str | None, Counts]]:
    """Each counted step of `model`, with its kind; bare when `probe_class` is None."""
    shape = build(model)
    probe = None
    if probe_class is FloorProbe:
        probe = FloorProbe(shape.models, shape.optimizers, check_every=args.check_every)
    elif probe_class is not None:
        probe = probe_class(shape.models, shape.optimizers, scheduler=shape.scheduler, summary=False,
                            check_every=args.check_every)
    warnings.simplefilter("ignore")
    steps = []
    with probe if probe is not None else contextlib.nullcontext():
        for k in range(args.settle):
            shape.step(k)
        for k in range(args.settle, args.settle + args.steps):
            kind = step_kind(probe) if probe is not None else None
            steps.append((kind, _traced(shape.step, k)))
    return steps


def extra_work(model: str, probe_class: Any, args: argparse.Namespace,
               kinds: list[str | None] | None = None) -> dict[str, Any]:
    """Per kind of step and on average: the probed steps' counts less the bare steps' (the same
    steps of the same run); and the probe's own functions' instructions per lean step."""
    probed = run(model, probe_class, args)
    bare = run(model, None, args)
    if kinds is not None:  # the floor does not tell its kinds of step: the probe's, on the same steps
        probed = [(kind, counts) for kind, (_, counts) in zip(kinds, probed)]
    source = Path(sys.modules[probe_class.__module__].__file__)
    package = source if probe_class is FloorProbe else source.parent  # whose functions `--top` lists
    sums: dict[str, list[int]] = {}
    functions: Counter[tuple[str, str]] = Counter()
    for (kind, with_probe), (_, without) in zip(probed, bare):
        diff = [a - b for a, b in zip(with_probe.totals, without.totals)]
        for key in (kind or "step", "mean"):
            entry = sums.setdefault(key, [0, 0, 0, 0])
            entry[3] += 1
            for j in range(3):
                entry[j] += diff[j]
        if kind == "lean":
            for (path, name), n in with_probe.by_function.items():
                if Path(path).is_relative_to(package):
                    functions[(str(Path(path).relative_to(package.parent)), name)] += n
    per_step = {key: [v / entry[3] for v in entry[:3]] + [entry[3]] for key, entry in sums.items()}
    lean = sums.get("lean", [0, 0, 0, 1])[3]
    return {"per_step": per_step, "kinds": [kind for kind, _ in probed],
            "functions": [(f"{path}:{name}", n / lean) for (path, name), n in functions.most_common()]}


def _row(label: str, values: list[float]) -> str:
    return f"{label:<8} " + "  ".join(f"{name} {value:8.0f}" for name, value in zip(_MEASURES, values[:3]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--steps", type=int, default=200, help="steps counted per model")
    parser.add_argument("--settle", type=int, default=40, help="steps run first, uncounted")
    parser.add_argument("--check-every", type=int, default=8, help="the probe's check_every, fixed (see above)")
    parser.add_argument("--against", metavar="REF", help="also count the probe committed at git revision REF")
    parser.add_argument("--top", type=int, default=0, metavar="N", help="the probe's N busiest functions per lean step")
    parser.add_argument("--floor", action="store_true",
                        help="also count the overhead floor (floor_probe.py: the work the defaults cannot skip)")
    args = parser.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in SHAPES]
    if unknown or not models:
        parser.error(f"unknown model(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(SHAPES)}")
    if args.steps < 1 or args.settle < 0 or args.check_every < 1:
        parser.error("--steps and --check-every must be at least 1, --settle at least 0")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as into:
        versions = {"this": loopcheck.probe}
        if args.against:
            versions[args.against] = probe_at(args.against, into)
        print(f"the probe's extra work per step ({args.steps} steps after {args.settle}, check_every "
              f"{args.check_every}): instructions, C calls and Python calls, probed less bare")
        for model in models:
            results = {name: extra_work(model, probe_class, args) for name, probe_class in versions.items()}
            if args.floor:
                results["floor"] = extra_work(model, FloorProbe, args, kinds=results["this"]["kinds"])
            for name, result in results.items():
                per_step = result["per_step"]
                mix = ", ".join(f"{kind} {per_step[kind][3]}" for kind in _KINDS if kind in per_step)
                print(f"{model:<6} {name:<10} steps: {mix}")
                for kind in (*_KINDS, "mean"):
                    if kind in per_step:
                        print(f"{'':<17} " + _row(kind, per_step[kind]))
                for function, n in result["functions"][:args.top]:
                    print(f"{'':<17} {n:8.1f}  {function}")
            for other in [name for name in (args.against, "floor" if args.floor else None) if name]:
                this, that = results["this"]["per_step"]["mean"], results[other]["per_step"]["mean"]
                change = [f"{name} {a - b:+.0f} ({(a - b) / b:+.0%})" if b else f"{name} {a - b:+.0f}"
                          for name, a, b in zip(_MEASURES, this, that)]
                print(f"{model:<6} difference per step, this less {other}: " + ", ".join(change), flush=True)


if __name__ == "__main__":
    main()
