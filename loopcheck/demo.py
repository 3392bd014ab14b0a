"""`python -m loopcheck.demo`: the three parts of loopcheck at work on the bundled examples.

1. lint reads examples/buggy_train.py and names its bugs, and passes examples/fixed_train.py;
2. the reference loop trains, is interrupted, resumes, and ends bit-identical to a run that
   was never interrupted;
3. the probe watches a running loop and catches a fault injected into it.

A part whose code cannot be imported is skipped with the reason. Exit code 0 when every part
that ran behaved as expected, 1 otherwise. It takes a few seconds on a laptop CPU.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, List

from rich.console import Console
from rich.table import Table

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
console = Console(highlight=False)


def section(title: str) -> None:
    console.print()
    console.rule(f"[bold]{title}", align="left")


def lint_part() -> bool:
    section("1. lint: the bugs, found before the run")
    buggy, fixed = EXAMPLES / "buggy_train.py", EXAMPLES / "fixed_train.py"
    if not buggy.is_file():
        console.print(f"skipped: the examples are not here ({EXAMPLES}); run the demo from a source checkout")
        return True
    ok = True
    for path, expect_findings in ((buggy, True), (fixed, False)):
        shown = os.path.relpath(path)
        console.print(f"[bold]$ loopcheck lint {shown}[/]")
        proc = subprocess.run(
            [sys.executable, "-m", "loopcheck", "lint", "--no-cache", "--format", "json", shown],
            capture_output=True, text=True, timeout=120,
        )
        try:
            findings = json.loads(proc.stdout)["findings"]
        except (ValueError, KeyError, TypeError):
            reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            console.print(f"skipped: the linter could not run here ({reason})")
            return True
        _show_findings(findings)
        if (proc.returncode == 1) != expect_findings:
            console.print(f"[red]unexpected exit code {proc.returncode} for {shown}[/]")
            ok = False
    return ok


def _show_findings(findings: List[dict]) -> None:
    if not findings:
        console.print("no findings")
        return
    colour = {"error": "red", "warning": "yellow", "info": "blue"}
    table = Table(box=None, pad_edge=False, show_header=False)
    for f in findings:
        severity = f["severity"]
        table.add_row(f"line {f['line']}", f"[{colour.get(severity, 'white')}]{f['code']}[/]", f["name"], severity)
    console.print(table)
    counts = {s: sum(f["severity"] == s for f in findings) for s in ("error", "warning", "info")}
    console.print(", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items()))


def reference_part() -> bool:
    section("2. reference loop: interrupted, resumed, identical")
    try:
        import torch

        from loopcheck.reference.train import Config, train
    except ImportError as exc:
        console.print(f"skipped: the reference loop needs torch ({exc})")
        return True
    # One thread: a multi-threaded BLAS may split a matrix product differently from one call to
    # the next when the machine is busy, and the two runs are compared bit for bit.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _interrupted_and_resumed(torch, Config, train)
    finally:
        torch.set_num_threads(threads)


def _interrupted_and_resumed(torch: Any, Config: Any, train: Any) -> bool:
    with tempfile.TemporaryDirectory(prefix="loopcheck-demo-") as tmp:
        settings = dict(epochs=3, seed=0, batch_size=32, accum=2, ema=0.99, log_every=8, progress=False)
        whole, parts = Path(tmp, "whole"), Path(tmp, "interrupted")

        def quiet(cfg: Config) -> dict:
            with contextlib.redirect_stdout(io.StringIO()):
                return train(cfg)

        reference = quiet(Config(ckpt_dir=str(whole), **settings))
        console.print(f"run A, uninterrupted: {reference['step']} optimizer steps (accumulating 2 "
                      f"micro-batches each), best val loss {reference['best_metric']:.4f}")
        stopped = quiet(Config(ckpt_dir=str(parts), stop_after_steps=53, **settings))
        console.print(f"run B: stopped after step {stopped['step']} in epoch {stopped['epoch'] + 1}, "
                      "as Ctrl-C would stop it")
        resumed = quiet(Config(ckpt_dir=str(parts), **settings))
        console.print(f"run B again: resumed from last.pt, {resumed['status']} at step {resumed['step']}, "
                      f"best val loss {resumed['best_metric']:.4f}")

        a = torch.load(whole / "last.pt", weights_only=True)
        b = torch.load(parts / "last.pt", weights_only=True)
        tensors = _tensors(a["model"]) + _tensors(a["optimizer"]) + _tensors(a["ema"])
        others = _tensors(b["model"]) + _tensors(b["optimizer"]) + _tensors(b["ema"])
        identical = len(tensors) == len(others) and all(torch.equal(x, y) for x, y in zip(tensors, others))
        verdict = "[green]bit-identical[/]" if identical else "[red]different[/]"
        console.print(f"A and B, weights, optimizer state and EMA ({len(tensors)} tensors): {verdict}")
        return identical


def _tensors(state: Any) -> List[Any]:
    import torch

    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for key in sorted(state, key=str) for t in _tensors(state[key])]
    if isinstance(state, (list, tuple)):
        return [t for item in state for t in _tensors(item)]
    return []


def probe_part() -> bool:
    section("3. probe: a fault caught during the run")
    try:
        import torch
        from torch import nn

        import loopcheck

        probe: Callable[..., Any] = loopcheck.probe
        if not callable(probe):
            raise ImportError("loopcheck.probe is not callable yet")
    except Exception as exc:  # the probe is optional for the demo: say why and go on
        console.print(f"skipped: the probe is not available ({type(exc).__name__}: {exc})")
        return True

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
            self.head = nn.Linear(32, 4)

        def forward(self, x: Any) -> Any:
            return self.head(self.encoder(x))

    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(320, 16), torch.randint(4, (320,))
    fault = 12
    console.print(f"a small model trains for 20 steps; batch {fault + 1} carries one NaN feature")
    # summary=False: the demo prints its own short table instead of the probe's summary.
    with probe(model, optimizer, on_finding="ignore", summary=False) as p:
        for step in range(20):
            xb, yb = x[16 * step:16 * (step + 1)].clone(), y[16 * step:16 * (step + 1)]
            if step == fault:
                xb[3, 5] = float("nan")  # the injected fault: one corrupt sample
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
    findings = list(p.findings)
    if not findings:
        console.print("[red]the probe reported nothing[/]")
        return False
    table = Table(box=None, pad_edge=False)
    for column in ("code", "name", "severity", "step", "where"):
        table.add_column(column)
    for f in findings[:6]:
        table.add_row(f.code, f.name, f.severity.value, str(f.step), f.where or "")
    console.print(table)
    console.print(findings[0].message, soft_wrap=True)
    return True


def main() -> int:
    console.print("[bold]loopcheck[/]: the silent bugs of hand-written PyTorch training loops")
    results = [lint_part(), reference_part(), probe_part()]
    console.print()
    if all(results):
        console.print("[bold green]demo finished[/]: see `loopcheck explain CODE` for any code above")
        return 0
    console.print("[bold red]demo finished with unexpected results[/] (marked in red above)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
