"""The worker processes of a run: results in order, failures raised, and each file sent to the
worker that holds the modules it imports."""

from __future__ import annotations

import os
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from loopcheck.lint.workers import _Plan, analyse_in_workers, imports_in


def test_imports_in_reads_every_form_of_import():
    source = b"""\
import os, torch.nn as nn
from . import engine, data as d
from ..utils.ckpt import save_checkpoint
from models import (
    resnet,
)
from pkg.sub import *
    import late  # inside a function
text = "import in a string"
"""
    assert imports_in(source) == [
        ("os", 0), ("torch.nn", 0), ("", 1), ("engine", 1), ("data", 1), ("utils.ckpt", 2),
        ("utils.ckpt.save_checkpoint", 2), ("models", 0), ("pkg.sub", 0), ("late", 0),
    ]


def _square(n: int) -> tuple[int, int]:
    return n * n, os.getpid()


def _fail_on_three(n: int) -> int:
    if n == 3:
        raise ValueError("three")
    return n


def _die_on_three(n: int) -> int:
    if n == 3:
        os._exit(7)
    return n


def test_results_come_in_the_order_of_the_tasks():
    results = analyse_in_workers(list(range(20)), _square, 2)
    assert [r[0] for r in results] == [n * n for n in range(20)]
    assert os.getpid() not in {pid for _, pid in results}


def test_an_exception_of_an_analysis_is_raised():
    with pytest.raises(ValueError, match="three"):
        analyse_in_workers(list(range(6)), _fail_on_three, 2)


def test_a_worker_that_dies_breaks_the_run():
    with pytest.raises(BrokenProcessPool, match="exit code 7"):
        analyse_in_workers(list(range(6)), _die_on_three, 2)


class _Sent:
    """A worker's end of the pipe, as `_Plan` sees it: what was sent to it."""

    def __init__(self) -> None:
        self.conn = self
        self.out = 0
        self.got: list[str] = []

    def send(self, item: tuple[int, str]) -> None:
        self.got.append(item[1])


def test_files_importing_the_same_modules_go_to_the_same_worker(tmp_path: Path):
    # two packages, each with a large shared module; their files come interleaved
    for name, size in (("trainer_util.py", 50_000), ("rl_util.py", 40_000)):
        (tmp_path / name).write_text("x = 1\n" * (size // 6))
    tasks = [f"{kind}_{i}.py" for i in range(4) for kind in ("train", "rl")]
    needs = {t: [t, str(tmp_path / ("trainer_util.py" if t.startswith("train") else "rl_util.py"))] for t in tasks}
    plan = _Plan(tasks, needs.__getitem__, 2)
    workers = [_Sent(), _Sent()]
    for i, worker in enumerate(workers):  # each worker holds two files at a time
        plan.send(i, worker)
        plan.send(i, worker)
    while plan.waiting:  # they finish in turns
        for i, worker in enumerate(workers):
            plan.learn(i, needs[worker.got[-1]][1:])
            plan.send(i, worker)
    assert sorted(workers[0].got) == [f"train_{i}.py" for i in range(4)]
    assert sorted(workers[1].got) == [f"rl_{i}.py" for i in range(4)]


def test_with_nothing_known_files_go_in_order():
    tasks = [f"f{i}.py" for i in range(5)]
    plan = _Plan(tasks, lambda task: [task], 2)
    workers = [_Sent(), _Sent()]
    for _ in range(2):
        for i, worker in enumerate(workers):
            plan.send(i, worker)
    assert workers[0].got == ["f0.py", "f2.py"] and workers[1].got == ["f1.py", "f3.py"]
