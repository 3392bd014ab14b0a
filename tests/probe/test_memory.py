"""LP202 loss graphs kept alive across steps, LP201 memory growing step after step."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import torch
from torch.nn import functional as F

import loopcheck
from .conftest import codes


def test_history_append_loss_is_found_within_100_steps(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    history = []
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(100):
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            history.append(loss)
    assert codes(probe) == {"LP202"}
    (f,) = probe.findings
    # the graph marks are looked at on watched steps: all of the first 8, then one in 4, and from the
    # first sample (step 20) one in up to 16, as the norms' cost asks
    assert f.step <= 36


def test_running_total_without_item_is_found(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for epoch in range(2):
            total = 0.0
            for x, y in batches.epoch(40):
                opt.zero_grad()
                loss = F.cross_entropy(net(x), y) / 2
                loss.backward()
                opt.step()
                total += loss
    assert codes(probe) == {"LP202"}


def test_item_detach_and_last_loss_are_fine(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    history, detached, total = [], [], 0.0
    best = None
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(80):
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            history.append(loss.item())
            detached.append(loss.detach())
            total += loss.item()
            last_loss = loss  # kept one step only
            if best is None or loss.item() < best:
                best = loss.item()
    assert probe.findings == [] and last_loss is not None


def _grow_memory_in_a_fresh_process() -> tuple[set[str], int | None]:
    """The growth scenario, run where no earlier test left freed pages for the allocator to reuse
    (on CPU the probe watches the resident set size, which reused pages do not raise)."""
    from tests.probe.conftest import Batches, Net

    torch.manual_seed(0)
    net, batches = Net(), Batches()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    kept = []
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False, every=5, memory_samples=8,
                         memory_growth_mb=12) as probe:
        for x, y in batches.epoch(60):
            opt.zero_grad()
            out = net(x)
            F.cross_entropy(out, y).backward()
            opt.step()
            kept.append(torch.ones(2**18) + out.detach().mean())  # 1 MiB a step, never released
    return codes(probe), (probe.findings[0].step if probe.findings else None)


def test_steady_memory_growth():
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        found, step = pool.submit(_grow_memory_in_a_fresh_process).result(timeout=120)
    assert found == {"LP201"}
    assert step == 40


def test_one_graph_kept_through_an_epoch_is_bounded_not_a_leak(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    snapshots = {}
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for epoch in range(4):
            for x, y in batches.epoch(30):
                opt.zero_grad()
                logits = net(x)
                loss = F.cross_entropy(logits, y)
                loss.backward()
                opt.step()
            # once per epoch: keeps this epoch's last loss and model output until the next
            snapshots["last"] = dict(locals())
    assert probe.findings == []


def _epoch_accuracy_loop(net, batches, keep, epochs=2, steps=40):
    """Logits gathered over an epoch for its accuracy, the way epoch-end metrics are often written."""
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    accuracy = []
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for epoch in range(epochs):
            preds, targets = [], []
            for x, y in batches.epoch(steps):
                opt.zero_grad()
                logits = net(x)
                loss = F.cross_entropy(logits, y)
                loss.backward()
                opt.step()
                preds.append(keep(logits))
                targets.append(y)
            accuracy.append((torch.cat(preds).argmax(1) == torch.cat(targets)).float().mean().item())
    return probe


def test_logits_kept_in_a_list_for_the_epoch_metric_are_found(net, batches):
    # the kept node (the head's addmm) sits below log_softmax and nll_loss: deeper than the loss's marks
    probe = _epoch_accuracy_loop(net, batches, keep=lambda logits: logits)
    assert codes(probe) == {"LP202"}
    (f,) = probe.findings
    assert f.step <= 36 and "preds.append(logits)" in f.message  # (see above)


def test_detached_logits_are_fine(net, batches):
    assert _epoch_accuracy_loop(net, batches, keep=lambda logits: logits.detach()).findings == []
