"""Two processes, gloo on CPU, DDP: a NaN injected on rank 1 is reported with its rank, by rank 0."""

from __future__ import annotations

import json
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import loopcheck
from .conftest import Batches, Net

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _in_group(rank: int, world: int, port: int, run, *args) -> None:
    """`run(rank, *args)` inside a gloo process group. What the run built (DDP modules, the probe)
    is released while the group is alive: left to interpreter exit, torch's teardown of DDP
    sometimes aborts the process (SIGABRT), with or without the probe."""
    import datetime
    import gc

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # a rank left waiting in a collective fails after the timeout instead of hanging the test
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        run(rank, *args)
        gc.collect()
    finally:
        dist.destroy_process_group()


def _worker(rank: int, world: int, port: int, out: str) -> None:
    _in_group(rank, world, port, _logged_run, out)


def _logged_run(rank: int, out: str) -> None:
    torch.manual_seed(0)
    net = Net()
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    log = os.path.join(out, f"run{rank}.jsonl")
    with loopcheck.probe(model, opt, log=log, on_finding="ignore", summary=False, every=5) as probe:
        for i, (x, y) in enumerate(Batches(seed=0, split=rank).epoch(20)):
            if rank == 1 and i == 7:
                with torch.no_grad():
                    net.mid.weight[2, 2] = float("nan")
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump([fd.to_dict() for fd in probe.findings], f)


def test_nan_on_one_rank_is_reported_with_its_rank_by_rank_0(tmp_path):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    origin = [f for f in rank0 if f["code"] == "LP103" and f["rank"] == 1]
    assert len(origin) == 1 and origin[0]["where"] == "mid" and origin[0]["step"] == 8
    # the NaN reached rank 0 through the gradient all-reduce: its own first sign is a gradient
    assert any(f["code"] == "LP104" and f["rank"] == 0 and f["step"] == 8 for f in rank0)
    assert (tmp_path / "run0.jsonl").exists() and not (tmp_path / "run1.jsonl").exists()
    logged = [json.loads(line) for line in (tmp_path / "run0.jsonl").read_text().splitlines()]
    assert any(r["type"] == "finding" and r["rank"] == 1 and r["code"] == "LP103" for r in logged)
    metrics = [r for r in logged if r["type"] == "metrics"]
    assert metrics and all(m["ranks"] == 2 for m in metrics)


def _raising_worker(rank: int, world: int, port: int, out: str, fault: str) -> None:
    _in_group(rank, world, port, _raising_run_to_file, out, fault)


def _raising_run_to_file(rank: int, out: str, fault: str) -> None:
    with open(os.path.join(out, f"raise{rank}.json"), "w") as f:
        json.dump(_raising_run(rank, fault), f)


def _raising_run(rank: int, fault: str) -> dict:
    torch.manual_seed(0)
    net = Net()
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    try:
        with loopcheck.probe(model, opt, on_finding="raise", summary=False, every=5) as probe:
            for i, (x, y) in enumerate(Batches(seed=0, split=rank).epoch(20)):
                if fault == "nan" and rank == 1 and i == 7:
                    x = x.clone()
                    x[0, 0] = float("nan")
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
                if fault == "eval" and rank == 0 and i == 11:
                    with torch.no_grad():  # rank 0 validates in train mode, twice
                        net(x)
                        net(x)
    except loopcheck.ProbeError as err:
        return {"raised": err.finding.code, "rank": err.finding.rank, "step": probe.step}
    return {"raised": None, "step": None}


@pytest.mark.parametrize("fault", ["nan", "eval"])
def test_on_finding_raise_stops_every_rank_together(tmp_path, fault):
    mp.spawn(_raising_worker, args=(2, _free_port(), str(tmp_path), fault), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"raise{r}.json").read_text()) for r in range(2)]
    if fault == "nan":
        # the NaN batch of step 8 on rank 1: both ranks stop before that step is applied
        assert [r["step"] for r in results] == [7, 7]
        assert results[1]["raised"] == "LP103" and results[0]["raised"] == "LP104"
    else:
        # rank 0's own finding stops both at the next exchange (every=5)
        assert [r["step"] for r in results] == [15, 15]
        assert [r["raised"] for r in results] == ["LP402", "LP402"] and {r["rank"] for r in results} == {0}
