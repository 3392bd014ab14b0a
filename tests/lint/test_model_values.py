"""What the loop model knows about values: constant tests folded, arguments forwarded through
`*args`, loaders handed on by wrappers and generators, roles through returns and helpers."""

from __future__ import annotations

import textwrap

import libcst as cst

from loopcheck.lint.loopmodel import EventKind, ModuleModel, Role, build_model

from ._support import expected, found


def model_of(source: str) -> ModuleModel:
    return build_model("train.py", cst.parse_module(textwrap.dedent(source)))


STEP_WITH_GUARD = """
    import torch
    {flag}

    def train(model, loader):
        {local}
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            if {test}:
                opt.zero_grad()  # expect: LC102
            opt.step()
            opt.zero_grad()
"""


def guarded(test: str, flag: str = "", local: str = "pass") -> str:
    return textwrap.dedent(STEP_WITH_GUARD).format(flag=flag, test=test, local=local)


def test_literal_tests_are_folded() -> None:
    assert found(guarded("0"), "LC102") == set()
    assert found(guarded("False"), "LC102") == set()
    assert {code for _, code in found(guarded("1"), "LC102")} == {"LC102"}


def test_a_module_level_flag_bound_once_to_a_constant_is_folded() -> None:
    assert found(guarded("USE_ACCUM", flag="USE_ACCUM = False"), "LC102") == set()
    assert found(guarded("not DEBUG", flag="DEBUG = 1"), "LC102") == set()
    assert {c for _, c in found(guarded("VERBOSE", flag="VERBOSE = True"), "LC102")} == {"LC102"}


def test_a_flag_that_can_change_is_not_folded() -> None:
    rebound = "USE_ACCUM = False\nif __import__('os').environ.get('ACCUM'):\n    USE_ACCUM = True"
    assert {c for _, c in found(guarded("USE_ACCUM", flag=rebound), "LC102")} == {"LC102"}
    with_global = "USE_ACCUM = False\n\ndef enable():\n    global USE_ACCUM\n    USE_ACCUM = True"
    assert {c for _, c in found(guarded("USE_ACCUM", flag=with_global), "LC102")} == {"LC102"}
    shadowed = guarded("USE_ACCUM", flag="USE_ACCUM = False", local="USE_ACCUM = model.accumulate")
    assert {c for _, c in found(shadowed, "LC102")} == {"LC102"}


SAVE_HELPER = textwrap.dedent("""
    import torch

    def save_on_master(*args, **kwargs):
        if is_main_process():
            torch.save(*args, **kwargs)

    def train(model, loader, epochs):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
            save_on_master({"model": model.state_dict(), "epoch": epoch}, "last.pt")  # expect: LC501
""")


def test_a_save_forwarded_through_star_args_carries_the_callers_dict() -> None:
    m = model_of(SAVE_HELPER)
    saves = [e for e in m.events if e.kind is EventKind.SAVE]
    assert len(saves) == 1
    assert saves[0].detail["keys"] == frozenset({"model", "epoch"})
    assert saves[0].line == 15  # the caller's call, where the dict is written
    assert found(SAVE_HELPER, "LC501") == {(15, "LC501")}


def test_the_full_checkpoint_through_the_same_helper_is_clean() -> None:
    full = SAVE_HELPER.replace('"epoch": epoch}', '"optimizer": optimizer.state_dict(), "epoch": epoch}')
    assert found(full, "LC501") == set()


def loaders(source: str) -> list[tuple[str, str | None, Role | None]]:
    m = model_of(source)
    return [(loop.kind.value, loop.loader, m.role(loop.loader)) for loop in m.walk_loops() if loop.kind.value == "batch"]


def test_a_loader_handed_on_by_a_project_generator() -> None:
    source = """
        import torch

        def forever(dl):
            while True:
                yield from dl

        def batches(dl):
            for batch in dl:
                yield batch

        def train(model, train_loader, steps):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step, (x, y) in zip(range(steps), forever(train_loader)):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            for x, y in batches(train_loader):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
    """
    assert loaders(source) == [("batch", "train_loader", Role.LOADER)] * 2


def test_a_loader_handed_on_by_a_logger_or_itertools() -> None:
    source = """
        import itertools
        import torch

        def train_one_epoch(model, criterion, data_loader, optimizer, metric_logger):
            for x, y in metric_logger.log_every(data_loader, 10, "Epoch"):
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        def finetune(model, criterion, data_loader, optimizer, n):
            for x, y in itertools.islice(itertools.cycle(data_loader), n):
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
    """
    assert loaders(source) == [("batch", "data_loader", Role.LOADER)] * 2


def test_roles_through_a_method_return_and_a_tuple_returned_by_a_helper() -> None:
    source = """
        import torch

        def build(model):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=1000)
            return opt, sched

        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = self.build_optimizer()

            def build_optimizer(self):
                return torch.optim.AdamW(self.model.parameters(), lr=1e-3)

        def train(net, loader, epochs):
            o, s = build(net)
            for epoch in range(epochs):
                for x, y in loader:
                    o.zero_grad()
                    net(x).sum().backward()
                    o.step()
                s.step()  # expect: LC202
    """
    m = model_of(source)
    assert m.bindings["self.optimizer"].role is Role.OPTIMIZER
    assert m.bindings["self.optimizer"].cls == "AdamW"  # from the constructor the method returns
    assert found(textwrap.dedent(source), "LC202") == {(24, "LC202")}


def test_a_helper_returning_one_of_several_constructors_binds_no_class() -> None:
    source = textwrap.dedent("""
        import torch

        def build_scheduler(name, optimizer, total_steps):
            if name == "onecycle":
                return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total_steps)
            return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1)

        class Trainer:
            def __init__(self, model, name, total_steps):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                self.scheduler = build_scheduler(name, self.optimizer, total_steps)

            def fit(self, loader):
                for x, y in loader:
                    self.optimizer.zero_grad()
                    self.model(x).sum().backward()
                    self.optimizer.step()
                    if self.name == "onecycle":
                        self.scheduler.step()
    """)
    binding = model_of(source).bindings.get("self.scheduler")
    assert binding is None or binding.cls is None
    assert found(source, "LC204") == set()


def test_a_scheduler_built_in_one_of_two_branches_keeps_both_classes() -> None:
    """Reaching definitions: each branch of the `if` may build it, so the model knows both
    classes; the cadence is the one they share, unknown when they differ."""
    model = model_of("""
        import torch

        def fit(model, loader, args):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            if args.schedule == "onecycle":
                sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=1000)
            else:
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
            if args.warm:
                warm = torch.optim.lr_scheduler.MultiStepLR(opt, [30, 60])
            else:
                warm = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
            later = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
            later = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=1000)
            for x, y in loader:
                model(x).sum().backward()
                opt.step()
                sched.step()
    """)
    sched, warm, later = (model.bindings[n] for n in ("sched", "warm", "later"))
    assert sched.detail["alternatives"] == ("OneCycleLR", "StepLR") and sched.cls is None
    assert sched.cadence.value == "unknown"
    assert warm.detail["alternatives"] == ("MultiStepLR", "StepLR") and warm.cadence.value == "per_epoch"
    assert later.cls == "OneCycleLR" and "alternatives" not in later.detail  # one after the other: the last one


def test_a_per_batch_step_of_a_scheduler_chosen_by_the_run_is_not_reported() -> None:
    source = """
        import torch

        def fit(model, loader, args):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            if args.schedule == "onecycle":
                sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=1000)
            else:
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
            for epoch in range(10):
                for x, y in loader:
                    opt.zero_grad()
                    model(x).sum().backward()
                    opt.step()
                    sched.step()
    """
    assert found(textwrap.dedent(source), "LC2") == set()
    both_per_epoch = source.replace("OneCycleLR(opt, max_lr=1.0, total_steps=1000)", "MultiStepLR(opt, [30, 60])")
    assert {code for _, code in found(textwrap.dedent(both_per_epoch), "LC2")} == {"LC203"}


CALLABLE_VALUES = """
    import functools
    import threading

    import torch
    import torch.multiprocessing as mp


    def worker(rank, net, data, opt, sched):
        for epoch in range(10):
            for x in data:
                opt.zero_grad()
                net(x).sum().backward()
                opt.step()
            sched.step()  # expect: LC202


    def one_step(x, model, optimizer):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


    def epoch_of(model, loader, optimizer):
        for x in loader:
            one_step(x, model, optimizer)


    def setup():
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=1000)
        return model, optimizer, scheduler


    def {entry}():
        model, optimizer, scheduler = setup()
        loader = torch.utils.data.DataLoader(range(10), shuffle=True)
        {body}


    if __name__ == "__main__":
        {entry}()
"""


def callable_values(entry: str, body: str) -> str:
    return textwrap.dedent(CALLABLE_VALUES).format(entry=entry, body=textwrap.indent(textwrap.dedent(body), "    ").strip())


def test_a_spawned_or_threaded_function_runs_with_the_callers_objects() -> None:
    """`mp.spawn(worker, args=...)`, `Process(target=..., args=...)`, `Thread(target=...,
    kwargs=...)`: the scheduler built by the caller is a OneCycleLR in the worker."""
    spawned = callable_values("main", "mp.spawn(worker, args=(model, loader, optimizer, scheduler), nprocs=2)")
    assert found(spawned, "LC202") == expected(spawned)
    process = callable_values("main", """\
        p = mp.Process(target=worker, args=(0, model, loader, optimizer, scheduler))
        p.start()
        p.join()""")
    assert found(process, "LC202") == expected(process)
    thread = callable_values("main", """\
        t = threading.Thread(target=worker, kwargs=dict(rank=0, net=model, data=loader, opt=optimizer, sched=scheduler))
        t.start()""")
    assert found(thread, "LC202") == expected(thread)
    unknown_args = callable_values("main", "mp.spawn(worker, args=config_args, nprocs=2)")
    assert found(unknown_args, "LC202") == set()  # which objects it gets is not known: silent


def _scheduler_line(source: str) -> int:
    """The line of the caller's own `scheduler.step()` (the worker's carries an expect mark)."""
    lines = source.splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip() == "scheduler.step()" and "expect" not in line)


def test_a_partial_or_a_lambda_runs_what_it_wraps() -> None:
    # a lambda's parameter takes the argument it is called with; its other names are the caller's
    for built in ("functools.partial(one_step, model=model, optimizer=optimizer)",
                  "lambda batch: one_step(batch, model, optimizer)"):
        source = callable_values("main", f"""\
            step = {built}
            for epoch in range(10):
                for x in loader:
                    step(x)
                scheduler.step()""")
        assert found(source, "LC202") == {(_scheduler_line(source), "LC202")}, built
    lam = callable_values("main", """\
        run = lambda: epoch_of(model, loader, optimizer)
        for epoch in range(10):
            run()
            scheduler.step()""")
    assert found(lam, "LC202") == {(_scheduler_line(lam), "LC202")}
    per_step = callable_values("main", """\
        step = functools.partial(one_step, model=model, optimizer=optimizer)
        for epoch in range(10):
            for x in loader:
                step(x)
                scheduler.step()""")
    assert found(per_step, "LC202") == set()


def test_a_function_mapped_over_items_runs_with_the_callers_objects() -> None:
    """`map(partial(worker, ...), ranks)` runs the worker once per item, the item first: the
    scheduler built by the caller is the OneCycleLR stepped once per epoch in the worker."""
    mapped = callable_values("main", """\
        train = functools.partial(worker, net=model, data=loader, opt=optimizer, sched=scheduler)
        list(map(train, range(2)))""")
    assert found(mapped, "LC202") == expected(mapped)
    lam = callable_values("main", "list(map(lambda r: worker(r, model, loader, optimizer, scheduler), range(2)))")
    assert found(lam, "LC202") == expected(lam)


def test_a_lambda_with_parameters_runs_its_body_with_them_bound() -> None:
    """A lambda's parameters take the arguments it is called with, by position or keyword, or
    their defaults; its other names are those of the function it runs in (`model`, `optimizer`)."""
    by_keyword = callable_values("main", """\
        train = lambda rank, sched=None: worker(rank, model, loader, optimizer, sched)
        train(0, sched=scheduler)""")
    assert found(by_keyword, "LC202") == expected(by_keyword)
    target = callable_values("main", """\
        p = mp.Process(target=lambda: worker(0, model, loader, optimizer, scheduler))
        p.start()""")
    assert found(target, "LC202") == expected(target)
    # the lambda's own parameter shadows the caller's object of that name: not the OneCycleLR
    shadowed = callable_values("main", """\
        train = lambda scheduler: worker(0, model, loader, optimizer, scheduler)
        train(torch.optim.lr_scheduler.StepLR(optimizer, 30))""")
    assert found(shadowed, "LC202") == set()
    recursive = callable_values("main", """\
        countdown = lambda n: n and countdown(n - 1)
        countdown(3)""")
    assert found(recursive, "LC202") == set()  # walked once, no endless descent


STRATEGY_SAVE = textwrap.dedent("""
    import torch

    def write_checkpoint(state, path):
        torch.save(state, path)

    class Strategy:
        def __init__(self, model, optimizer):
            self.model, self.optimizer = model, optimizer

        def save(self, path, extra=None):
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
            if extra is None:
                extra = dict()
            extra["seed"] = 0
            state.update(extra)
            write_checkpoint(state, path)

    def fit(model, loader, epochs):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        strategy = Strategy(model, optimizer)
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
            strategy.save("last.pt", extra={"meta": {"epoch": epoch}})
""")


def test_a_dict_assigned_in_one_branch_over_an_argument_holds_what_the_caller_passed() -> None:
    # `if extra is None: extra = dict()`: which dict reaches the save depends on the caller: not
    # known where `save` is walked on its own; the caller's keys where `fit` calls it
    def keys(source: str) -> list:
        return [e.detail["keys"] for e in model_of(source).events if e.kind is EventKind.SAVE]
    assert keys(STRATEGY_SAVE.split("def fit")[0]) == [None]
    assert keys(STRATEGY_SAVE) == [frozenset({"model", "optimizer", "meta", "seed"})]
    assert found(STRATEGY_SAVE, "LC504") == set()


def test_a_dict_first_bound_inside_a_branch_keeps_its_keys() -> None:
    fresh = STRATEGY_SAVE.replace("if extra is None:", "if path:")
    fresh = fresh.replace("def save(self, path, extra=None):", "def save(self, path):").replace(', extra={"meta": {"epoch": epoch}}', "")
    assert "if path:" in fresh and "extra=" not in fresh
    saves = [e for e in model_of(fresh).events if e.kind is EventKind.SAVE]
    assert saves and all(e.detail["keys"] == frozenset({"model", "optimizer", "seed"}) for e in saves)


WRONG_CALL = textwrap.dedent("""
    import pytest
    import torch

    def write_checkpoint(state, path):
        torch.save(state, path)

    def test_rejects_a_meta_argument(tmp_path):
        model = torch.nn.Linear(2, 2)
        with pytest.raises(TypeError):
            write_checkpoint(model, tmp_path / "x.pt", meta="no such parameter")
        write_checkpoint(model.state_dict(), tmp_path / "y.pt")
""")


def test_a_call_its_function_cannot_take_is_not_followed() -> None:
    # an unknown keyword (or one positional too many) raises TypeError before the body runs
    saves = [e for e in model_of(WRONG_CALL).events if e.kind is EventKind.SAVE]
    assert [e.detail["obj_text"] for e in saves] == ["state"]
    assert found(WRONG_CALL, "LC509") == set()
    too_many = WRONG_CALL.replace('tmp_path / "x.pt", meta="no such parameter"', 'tmp_path / "x.pt", 3')
    assert found(too_many, "LC509") == set()
