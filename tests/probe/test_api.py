"""The probe's contract: call forms, hooks removed on every exit, no effect on training, failures contained."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import lr_scheduler

import loopcheck
from .conftest import Batches, Net
from loopcheck import ProbeError
from loopcheck.probe import Probe, ProbeUsageError, ProbeWarning
from loopcheck.probe.detectors import default_detectors
from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.detectors.gradients import GradNormDetector


def setup(seed=0):
    torch.manual_seed(seed)
    net = Net(dropout=0.2)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=0.01)
    sched = lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=100)
    return net, opt, sched


def loop(net, opt, sched, steps, seed=0):
    batches = Batches(seed=seed)
    for x, y in batches.epoch(steps):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()


def test_three_ways_to_call():
    net, opt, _ = setup()
    from loopcheck import probe

    assert isinstance(loopcheck.probe(net, opt), Probe)
    assert isinstance(probe(net, opt, every=5), Probe)
    assert isinstance(Probe(net, opt), Probe)


def test_parameters_and_rng_bit_identical_with_and_without_probe():
    net_a, opt_a, sched_a = setup()
    torch.manual_seed(123)
    loop(net_a, opt_a, sched_a, 60)
    rng_a = torch.get_rng_state()

    net_b, opt_b, sched_b = setup()
    torch.manual_seed(123)
    with loopcheck.probe(net_b, opt_b, scheduler=sched_b, on_finding="ignore", summary=False, every=7) as probe:
        loop(net_b, opt_b, sched_b, 60)
    assert probe.step == 60 and probe.findings == []
    assert torch.equal(rng_a, torch.get_rng_state())
    for (name, a), b in zip(net_a.state_dict().items(), net_b.state_dict().values()):
        assert torch.equal(a, b), name


def _installed(net, opt, sched):
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in net.modules())
    hooks += len(opt._optimizer_step_pre_hooks) + len(opt._optimizer_step_post_hooks)
    patched = [
        getattr(obj, name) for obj, name in [
            (torch.Tensor, "backward"), (nn.Module, "train"), (nn.Module, "zero_grad"),
            (type(opt), "zero_grad"), (type(sched), "step"),
        ] if getattr(getattr(obj, name), "__loopcheck_wrapped__", False)
    ]
    return hooks, patched, "step" in type(sched).__dict__, "zero_grad" in type(opt).__dict__


@pytest.mark.parametrize("error", [None, RuntimeError, KeyboardInterrupt])
def test_everything_is_removed_on_exit(error):
    net, opt, sched = setup()
    before = _installed(net, opt, sched)
    assert before == (0, [], False, False)
    with pytest.raises(error) if error else _nothing():
        with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False):
            assert _installed(net, opt, sched)[0] > 0
            loop(net, opt, sched, 3)
            if error:
                raise error("interrupted")
    assert _installed(net, opt, sched) == before
    # a second probe on the same objects works after the first is gone
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as again:
        loop(net, opt, sched, 2)
    assert again.step == 2


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_wrapped_objects_still_pickle_and_save(tmp_path):
    net, opt, sched = setup()
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False):
        loop(net, opt, sched, 2)
        torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict()}, tmp_path / "ckpt.pt")
    assert (tmp_path / "ckpt.pt").stat().st_size > 0


def test_nested_and_reentered_probes_are_refused():
    net, opt, _ = setup()
    other = nn.Linear(3, 3)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1)
    p = loopcheck.probe(net, opt, summary=False)
    with p:
        with pytest.raises(ProbeUsageError, match="already active"):
            with loopcheck.probe(other, other_opt):
                pass
    with pytest.raises(ProbeUsageError, match="already used"):
        with p:
            pass


@pytest.mark.parametrize("kwargs, message", [
    ({"model": "net"}, "model must be a torch.nn.modules.module.Module"),
    ({"optimizer": [], "discover": False}, "with discover=False, probe needs at least one model and one optimizer"),
    ({"scheduler": 3}, "scheduler must be"),
    ({"scaler": object()}, "scaler must be a torch.amp.GradScaler"),
    ({"on_finding": "loud"}, "on_finding must be one of"),
    ({"every": 0}, "every must be a positive integer"),
    ({"windw": 10}, "unknown probe option.*windw.*valid options"),
    ({"ignore": ["LC101"]}, "not an LP code"),
    ({"warmup": 200}, "must be smaller than window"),
])
def test_bad_arguments_have_clear_messages(kwargs, message):
    net, opt, _ = setup()
    args = {"model": net, "optimizer": opt} | kwargs
    with pytest.raises(ProbeUsageError, match=message):
        loopcheck.probe(args.pop("model"), args.pop("optimizer"), **args)


def test_same_model_twice_or_a_submodule_is_refused():
    net, opt, _ = setup()
    with pytest.raises(ProbeUsageError, match="twice"):
        loopcheck.probe([net, net], opt)
    with pytest.raises(ProbeUsageError, match="submodule"):
        loopcheck.probe([net, net.head], opt)


def test_unwritable_log_is_refused_before_anything_is_installed(tmp_path):
    net, opt, sched = setup()
    with pytest.raises(ProbeUsageError, match="cannot write the probe run log"):
        with loopcheck.probe(net, opt, log=tmp_path / "missing" / "run.jsonl"):
            pass
    assert _installed(net, opt, sched)[0] == 0
    with loopcheck.probe(net, opt, summary=False):  # nothing left active
        pass


class Broken(Detector):
    codes = ("LP501",)

    def on_step(self, index, optimizer):
        if self.probe.step == 3:
            raise ValueError("boom")


def test_a_failing_detector_is_switched_off_and_reported_once():
    net, opt, sched = setup()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with loopcheck.probe(net, opt, scheduler=sched, detectors=default_detectors() + [Broken],
                             summary=False) as probe:
            loop(net, opt, sched, 20)
    (f,) = probe.findings
    assert f.code == "LP001" and f.where == "Broken" and f.step == 3 and "ValueError: boom" in f.message
    assert [str(w.message) for w in caught if issubclass(w.category, ProbeWarning)] == [f"loopcheck: {f}"]
    assert probe.step == 20


@pytest.mark.filterwarnings("ignore::loopcheck.probe.probe.ProbeWarning")
def test_a_failing_builtin_detector_leaves_the_others_running(monkeypatch):
    def explode(self, step, final):
        raise RuntimeError("cannot read")

    monkeypatch.setattr(GradNormDetector, "on_sample", explode)
    net, opt, sched = setup()
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False, every=5) as probe:
        loop(net, opt, sched, 12)
        for group in opt.param_groups:
            group["lr"] = 0.5  # still seen by the LR detector
        loop(net, opt, sched, 2)
    assert sorted(f.code for f in probe.findings) == ["LP001", "LP303"]


def test_on_finding_raise_stops_the_run_at_once():
    net, opt, _ = setup()
    with pytest.raises(ProbeError) as info:
        with loopcheck.probe(net, opt, on_finding="raise", summary=False):
            for x, y in Batches().epoch(10):
                F.cross_entropy(net(x), y).backward()  # no zero_grad: LP403 at the second step
                opt.step()
    assert info.value.finding.code == "LP403" and info.value.finding.step == 1
    assert _installed(net, opt, lr_scheduler.StepLR(opt, 1))[0] == 0


def test_on_finding_warn_warns_once_per_code_and_place():
    net, opt, _ = setup()
    with pytest.warns(ProbeWarning) as caught:
        with loopcheck.probe(net, opt, summary=False):
            for x, y in Batches().epoch(10):
                F.cross_entropy(net(x), y).backward()
                opt.step()
    assert len([w for w in caught if "LP403" in str(w.message)]) == 1


def test_ignore_option_and_summary_on_stderr(capsys):
    net, opt, _ = setup()
    with loopcheck.probe(net, opt, on_finding="ignore", ignore=["LP4"]) as probe:
        for x, y in Batches().epoch(5):
            F.cross_entropy(net(x), y).backward()
            opt.step()
    assert probe.findings == []
    assert "5 steps, no findings" in capsys.readouterr().err
    with loopcheck.probe(net, opt, on_finding="ignore") as probe:
        for x, y in Batches().epoch(5):
            F.cross_entropy(net(x), y).backward()
            opt.step()
    err = capsys.readouterr().err
    assert "LP403" in err and "grads-not-zeroed" in err and "zero_grad" in err


@pytest.mark.parametrize("on_cpu", [False, True])
def test_no_host_read_per_step(monkeypatch, on_cpu):
    """Values on an accelerator are read once per sample; on the CPU, where a read is no
    synchronisation, each step's values are read when the step seals them (one by one: cheaper
    than stacking them). The CPU tests take the accelerator's path by switching `on_cpu` off."""
    from loopcheck.probe import stats

    reads = []
    real = stats.host_read

    def counting(t):
        reads.append(t.numel())
        return real(t)

    monkeypatch.setattr(stats, "host_read", counting)
    item_calls = []
    real_item = torch.Tensor.item
    net, opt, sched = setup()
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False, every=25) as probe:
        assert probe.readings.on_cpu  # the parameters are on the CPU
        probe.readings.on_cpu = on_cpu

        def item(self):
            if sys._getframe(1).f_globals.get("__name__", "").startswith("loopcheck"):
                item_calls.append(self.device.type)  # the optimizer's own .item() calls are not the probe's
            return real_item(self)

        monkeypatch.setattr(torch.Tensor, "item", item)
        loop(net, opt, sched, 50)
        monkeypatch.setattr(torch.Tensor, "item", real_item)
    if on_cpu:
        assert item_calls and set(item_calls) == {"cpu"}
        assert reads == []  # nothing waits for a read at the samples
    else:
        assert item_calls == []
        # one read per sample (2 in the loop, nothing left at exit), shared by every detector
        assert len(reads) == 2


def test_device_values_wait_for_the_sample_as_one_vector_per_step():
    net, opt, sched = setup()
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False, every=25) as probe:
        loop(net, opt, sched, 10)
        assert probe.readings._open == []  # no 0-d tensor is kept from one step to the next
        assert len(probe.readings._parts) == 10
