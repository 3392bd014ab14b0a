"""What the probe finds, and how soon: the benchmark shapes x planted faults, on CPU.

Each shape of `shapes.py` trains for `--steps` steps under the probe (default configuration), once
clean and once per fault; the table gives, per fault and shape, the first code the probe reported
at or after the fault's onset and how many optimizer steps after the onset it came: the
finding's `step` minus the steps completed when the fault began (the non-finite codes LP103 to
LP105 give the number of the step they happened in, so 1 there is the poisoned step itself,
caught before its update). A finding
before the onset, or any finding of a clean run, is a false positive and is printed as such.
REINFORCE (a loss that grows with the returns) and LBFGS (steps through a closure) are trained
clean only, for longer.

    python benchmarks/probe_detection.py [--models mlp,vae,...] [--faults clean,lr100,...] [--steps 100]
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

import loopcheck
from shapes import EXTRA, SHAPES, Fault, Shape, build

_ONSET = 30  # the step at which the faults that start mid-run start
_MODE_LAYERS = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase)


@dataclass(frozen=True)
class Case:
    label: str
    fault: Fault = Fault()
    onset: int | None = None  # optimizer steps completed when the fault starts; None: a clean run
    after_step: Callable[[Shape, int], None] | None = None  # what the loop does wrong between steps
    needs_float_inputs: bool = False
    needs_mode_layers: bool = False  # only wrong when the evaluated model has dropout or batch norm


def _eval_left_on(shape: Shape, k: int) -> None:
    if k + 1 == _ONSET:  # an evaluation ran here and training went on without train()
        shape.evaluated.eval()


def _validation_in_train_mode(shape: Shape, k: int) -> None:
    if k + 1 >= _ONSET and (k + 1) % 10 == 0:
        with torch.no_grad():
            shape.validate()


CASES = {
    "clean": Case("clean run"),
    # the first step that should have started from reset gradients is the second
    "zero_grad": Case("zero_grad removed", Fault(zero_grad=False), 1),
    "nan": Case("NaN input batch", Fault(nan_at=_ONSET), _ONSET, needs_float_inputs=True),
    "eval": Case("eval() left on", onset=_ONSET, after_step=_eval_left_on, needs_mode_layers=True),
    "validation": Case("no-grad validation every 10 steps, train mode", onset=_ONSET,
                       after_step=_validation_in_train_mode, needs_mode_layers=True),
    "outputs": Case("model outputs kept in a list", Fault(keep_outputs=True), 0),
    "lr100": Case("100x learning rate", Fault(lr_scale=100.0), 0),
}


def run(name: str, case: Case, steps: int) -> str:
    """One run; the table cell: 'LPxxx, n' (n steps after onset), 'clean', or what went wrong."""
    shape = build(name, case.fault)
    if case.needs_float_inputs and not shape.float_inputs:
        return "n/a (token ids)"
    if case.needs_mode_layers and not any(isinstance(m, _MODE_LAYERS) for m in shape.evaluated.modules()):
        return "n/a (no dropout/BN)"
    raised = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with loopcheck.probe(shape.models, shape.optimizers, scheduler=shape.scheduler,
                             on_finding="ignore", summary=False) as probe:
            for k in range(steps):
                try:
                    shape.step(k)
                except RuntimeError as err:  # torch's own checks (BCE on NaN) stop some runs
                    raised = f"torch raised at step {k + 1}: {str(err).splitlines()[0][:40]}"
                    break
                if case.after_step is not None:
                    case.after_step(shape, k)
    findings = sorted(probe.findings, key=lambda f: f.step)
    if case.onset is None:
        wrong = ", ".join(f"{f.code}@{f.step}" for f in findings)
        return f"FALSE POSITIVE {wrong}" if wrong else (raised or "clean")
    early = [f for f in findings if f.step < case.onset]
    found = [f for f in findings if f.step >= case.onset]
    cell = "missed"
    if found:
        first = found[0].step
        codes = sorted({f.code for f in found if f.step == first})
        cell = f"{'/'.join(codes)}, {first - case.onset}"
    elif raised:
        cell = raised
    if early:
        cell += " (FALSE POSITIVE " + ", ".join(f"{f.code}@{f.step}" for f in early) + ")"
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SHAPES), help=f"shapes (default: {', '.join(SHAPES)})")
    parser.add_argument("--faults", default=",".join(CASES), help=f"faults (default: {', '.join(CASES)})")
    parser.add_argument("--steps", type=int, default=100, help="training steps per run (default: 100)")
    parser.add_argument("--extra-steps", type=int, default=150,
                        help="steps of the clean REINFORCE and LBFGS runs (default: 150; 0 skips them)")
    args = parser.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    bad = [m for m in models if m not in SHAPES] + [f for f in faults if f not in CASES]
    if bad or not models or not faults:
        parser.error(f"unknown or missing shape / fault: {', '.join(bad) or '(none given)'}; shapes: "
                     f"{', '.join(SHAPES)}; faults: {', '.join(CASES)}")
    if args.steps <= _ONSET:
        parser.error(f"--steps must be more than {_ONSET} (the onset of the mid-run faults)")
    torch.set_num_threads(1)
    started = time.perf_counter()
    print(f"{args.steps} steps per run; mid-run faults start after step {_ONSET}; "
          f"cells: first code at or after the onset, its step minus the steps done at the onset")
    width = max(len(CASES[f].label) for f in faults)
    cells = {}
    for fault in faults:
        for model in models:
            cells[fault, model] = run(model, CASES[fault], args.steps)
    col = {m: max(len(m), *(len(cells[f, m]) for f in faults)) for m in models}
    print(f"{'fault':<{width}} | " + " | ".join(f"{m:<{col[m]}}" for m in models))
    print("-" * width + "-|-" + "-|-".join("-" * col[m] for m in models))
    for fault in faults:
        print(f"{CASES[fault].label:<{width}} | " + " | ".join(f"{cells[fault, m]:<{col[m]}}" for m in models))
    if args.extra_steps:
        for name in EXTRA:
            print(f"clean {name}, {args.extra_steps} steps: {run(name, CASES['clean'], args.extra_steps)}")
    missed = sum(c == "missed" for c in cells.values())
    false = sum("FALSE POSITIVE" in c for c in cells.values())
    print(f"done in {time.perf_counter() - started:.0f} s: {len(cells)} runs, {missed} missed, "
          f"{false} with false positives")


if __name__ == "__main__":
    main()
