"""LC701-LC702: DistributedSampler without set_epoch, training loader without shuffling.

Each case is a small script whose offending lines carry `# expect: LC7xx`; the test asserts that
the LC7 findings are exactly those (line, code) pairs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from loopcheck.lint.api import lint_source

from . import _support

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # a rule crash fails the test

HEAD = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data.distributed import DistributedSampler
"""


def found_in_project(path: Path) -> set[tuple[str, int, str]]:
    return _support.found_in_project(path, "LC7")


def check(body: str) -> None:
    _support.check(HEAD + textwrap.dedent(body), "LC7")


TRAIN = """
    for epoch in range(epochs):
        model.train()
        for x, y in {loader}:
            opt.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            opt.step()
"""


def train_body(loader: str = "loader", indent: int = 4) -> str:
    return textwrap.indent(textwrap.dedent(TRAIN.format(loader=loader)), " " * indent)


def script(setup: str, loader: str = "loader") -> str:
    """`def main(...)` with `setup` followed by a standard epoch / batch loop over `loader`."""
    return (
        "def main(model, train_set, epochs):\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    criterion = nn.CrossEntropyLoss()\n"
        + textwrap.indent(textwrap.dedent(setup), "    ")
        + train_body(loader)
    )


# --------------------------------------------------------------------------- LC701


def test_sampler_without_set_epoch():
    check(script("""
        sampler = DistributedSampler(train_set)  # expect: LC701
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
    """))


def test_inline_sampler_is_reported_at_its_construction():
    check(script("""
        loader = DataLoader(
            train_set,
            batch_size=32,
            sampler=DistributedSampler(train_set, drop_last=True),  # expect: LC701
        )
    """))


def test_set_epoch_on_the_sampler_or_through_the_loader():
    check(script("""
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
        sampler.set_epoch(0)
    """))
    check("""
        def train_one_epoch(model, loader, opt, criterion, epoch):
            loader.sampler.set_epoch(epoch)
            model.train()
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()

        def main(model, train_set, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
            for epoch in range(epochs):
                train_one_epoch(model, loader, opt, criterion, epoch)
    """)


def test_set_epoch_in_a_helper_of_another_module(tmp_path: Path):
    (tmp_path / "engine.py").write_text(textwrap.dedent("""
        def train_one_epoch(model, loader, opt, criterion, epoch):
            loader.sampler.set_epoch(epoch)
            model.train()
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
    """))
    source = HEAD + textwrap.dedent("""
        from engine import train_one_epoch

        def main(model, train_set, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            sampler = DistributedSampler(train_set)
            loader = DataLoader(train_set, batch_size=32, sampler=sampler)
            for epoch in range(epochs):
                train_one_epoch(model, loader, opt, criterion, epoch)
    """)
    (tmp_path / "train.py").write_text(source)
    assert found_in_project(tmp_path / "train.py") == set()
    # the same helper without set_epoch: the sampler in train.py is reported
    engine = (tmp_path / "engine.py").read_text().replace("    loader.sampler.set_epoch(epoch)\n", "")
    (tmp_path / "engine.py").write_text(engine)
    line = source.splitlines().index("    sampler = DistributedSampler(train_set)") + 1
    assert found_in_project(tmp_path / "train.py") == {("train.py", line, "LC701")}


def test_sampler_not_shuffling_or_unknown_shuffle_is_not_reported():
    check(script("""
        sampler = DistributedSampler(train_set, shuffle=False)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
    """))
    check(script("""
        sampler = DistributedSampler(train_set, shuffle=not args.ordered)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
    """))


def test_sampler_used_only_for_evaluation_is_not_reported():
    check("""
        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)

        def main(model, train_set, val_set, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            loader = DataLoader(train_set, batch_size=32, shuffle=True)
            val_loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set))
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
                for x, y in val_loader:
                    with torch.no_grad():
                        model.eval()
                        model(x)
                model.train()
    """)


def test_sampler_built_inside_the_epoch_loop_is_not_reported():
    check("""
        def main(model, train_set, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                sampler = DistributedSampler(train_set, seed=epoch)
                loader = DataLoader(train_set, batch_size=32, sampler=sampler)
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
    """)


def test_single_pass_without_epoch_loop_is_not_reported():
    check("""
        def main(model, train_set):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
            model.train()
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
    """)


def test_loaders_returned_by_a_builder_function():
    check("""
        def build(train_set, val_set):
            train_sampler = DistributedSampler(train_set)  # expect: LC701
            val_sampler = DistributedSampler(val_set, shuffle=False)
            return (
                DataLoader(train_set, batch_size=32, sampler=train_sampler),
                DataLoader(val_set, batch_size=32, sampler=val_sampler),
            )

        def main(model, train_set, val_set, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            train_loader, val_loader = build(train_set, val_set)
            for epoch in range(epochs):
                model.train()
                for x, y in train_loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
    """)


# --------------------------------------------------------------------------- LC702


def test_training_loader_without_shuffle():
    check(script("""
        loader = DataLoader(train_set, batch_size=32, num_workers=4)  # expect: LC702
    """))
    check(script("""
        loader = DataLoader(train_set, batch_size=32, shuffle=False)  # expect: LC702
    """))
    check(script("""
        loader = DataLoader(train_set, 32, False)  # expect: LC702
    """))


def test_shuffled_or_sampled_loaders_are_fine():
    for setup in (
        "loader = DataLoader(train_set, batch_size=32, shuffle=True)",
        "loader = DataLoader(train_set, 32, True)",
        "loader = DataLoader(train_set, batch_size=32, sampler=torch.utils.data.RandomSampler(train_set))",
        "loader = DataLoader(train_set, batch_sampler=bucket_sampler)",
        "loader = DataLoader(train_set, batch_size=32, shuffle=args.shuffle)",
        "loader = DataLoader(train_set, batch_size=32, shuffle=sampler is None, sampler=sampler)",
        "loader = DataLoader(train_set, **loader_kwargs)",
    ):
        check(script(setup + "\n"))


def test_evaluation_loader_without_shuffle_is_fine():
    check("""
        @torch.no_grad()
        def evaluate(model, val_set):
            model.eval()
            loader = DataLoader(val_set, batch_size=256)
            return [model(x) for x, _ in loader]
    """)


def test_iterable_and_streaming_datasets_are_exempt():
    check("""
        class Shards(IterableDataset):
            def __init__(self, files):
                self.files = files

            def __iter__(self):
                for f in self.files:
                    yield from torch.load(f)

        class Lines:
            def __init__(self, path):
                self.path = path

            def __iter__(self):
                with open(self.path) as fh:
                    for line in fh:
                        yield line

        def main(model, files, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            a = DataLoader(Shards(files), batch_size=8)
            dataset = Lines(files[0])
            b = DataLoader(dataset, batch_size=8)
            for epoch in range(epochs):
                model.train()
                for x, y in a:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
                for x, y in b:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
    """)
    check(script("""
        from datasets import load_dataset
        stream = load_dataset("c4", "en", split="train", streaming=True)
        loader = DataLoader(stream, batch_size=8)
    """))
    check(script("""
        import webdataset as wds
        shards = wds.WebDataset("data/shard-{000..099}.tar").decode("torchrgb")
        loader = DataLoader(shards, batch_size=None, num_workers=8)
    """))


def test_map_style_dataset_of_the_project_is_reported():
    check("""
        class Pairs(Dataset):
            def __init__(self, xs, ys):
                self.xs, self.ys = xs, ys

            def __len__(self):
                return len(self.xs)

            def __getitem__(self, i):
                return self.xs[i], self.ys[i]

        def main(model, xs, ys, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            loader = DataLoader(Pairs(xs, ys), batch_size=16)  # expect: LC702
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
    """)


def test_loader_of_a_step_loop_through_next_iter():
    check("""
        def main(model, train_set, max_steps):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            criterion = nn.CrossEntropyLoss()
            loader = DataLoader(train_set, batch_size=16)  # expect: LC702
            it = iter(loader)
            model.train()
            for step in range(max_steps):
                try:
                    x, y = next(it)
                except StopIteration:
                    it = iter(loader)
                    x, y = next(it)
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
    """)


def test_message_names_the_loader():
    source = HEAD + script("loader = DataLoader(train_set, batch_size=32)\n")
    (finding,) = lint_source(source, select=["LC702"])
    assert "`loader`" in finding.message and "shuffle=True" in finding.message


def test_loader_cycled_by_a_generator_of_the_file():
    check("""
        def cycle(dl):
            while True:
                for batch in iter(dl):
                    yield batch

        def main(model, train_set, max_steps):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            loader = DataLoader(train_set, batch_size=16, drop_last=True)  # expect: LC702
            batches = cycle(loader)
            with tqdm(range(max_steps)) as bar:
                for step in bar:
                    x, y = next(batches)
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
    """)


def test_generator_that_does_not_loop_over_its_argument_is_not_followed():
    check("""
        def batches_of(dl, n):
            for i in range(n):
                yield torch.randn(8, 4), torch.randn(8, 1)

        def main(model, train_set, max_steps):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            loader = DataLoader(train_set, batch_size=16)
            batches = batches_of(loader, max_steps)
            for step in range(max_steps):
                x, y = next(batches)
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    """)


def test_sampler_that_is_none_outside_distributed_runs():
    check("""
        def main(model, train_set, args):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            train_sampler = None
            loader = DataLoader(train_set, batch_size=64, sampler=train_sampler)  # expect: LC702
            for epoch in range(args.epochs):
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()

        def main_shuffled_when_alone(model, train_set, args):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sampler = DistributedSampler(train_set) if args.distributed else None
            loader = DataLoader(train_set, batch_size=64, shuffle=sampler is None, sampler=sampler)
            for epoch in range(args.epochs):
                if sampler is not None:
                    sampler.set_epoch(epoch)
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
    """)


def test_dataset_that_iterates_and_indexes_is_map_style():
    check("""
        class Graphs(Dataset):
            def __init__(self):
                self.items = [(torch.randn(4), torch.randn(1)) for _ in range(100)]

            def __len__(self):
                return len(self.items)

            def __getitem__(self, i):
                return self.items[i]

            def __iter__(self):
                for i in range(len(self)):
                    yield self[i]

        class Stream(IterableDataset):
            def __iter__(self):
                yield torch.randn(4), torch.randn(1)

        class Chunks:
            def __iter__(self):
                yield torch.randn(4), torch.randn(1)

        def main(model, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            graphs = DataLoader(Graphs(), batch_size=8)  # expect: LC702
            stream = DataLoader(Stream(), batch_size=8)
            chunks = DataLoader(Chunks(), batch_size=8)
            for epoch in range(epochs):
                for x, y in graphs:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                for x, y in stream:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                for x, y in chunks:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
    """)


def test_dataset_that_draws_its_own_random_sample_needs_no_shuffle():
    check("""
        class RandomWindows(Dataset):
            def __init__(self, data, n):
                self.data, self.n = data, n

            def __getitem__(self, index):
                start = torch.randint(0, self.data.size(0) - self.n, (1,))
                return self.data[start : start + self.n]

            def __len__(self):
                return self.data.size(0) // self.n

        def main(model, data, epochs):
            opt = torch.optim.Adam(model.parameters())
            loader = DataLoader(RandomWindows(data, 256), batch_size=4)
            for epoch in range(epochs):
                for x in loader:
                    opt.zero_grad()
                    model(x).mean().backward()
                    opt.step()
    """)


def test_loader_over_the_dataset_itself_inside_its_method():
    """A sampler that is its own dataset counts node statistics with `DataLoader(self, ...)`:
    `self` is no parameter a caller passes (asking for it once crashed the rule)."""
    check("""
        class SubgraphSampler(DataLoader):
            def __init__(self, data, batch_size, sample_coverage):
                self.data, self.sample_coverage = data, sample_coverage
                super().__init__(self, batch_size=1)
                self.node_norm = self._compute_norm() if sample_coverage > 0 else None

            def __getitem__(self, index):
                return torch.randint(0, self.data.size(0), (64,))

            def __len__(self):
                return 1000

            def _compute_norm(self):
                counts = torch.zeros(self.data.size(0))
                loader = DataLoader(self, batch_size=200, num_workers=0)
                for nodes in loader:
                    counts[nodes] += 1
                return counts.clamp_(min=1)

        def main(model, data, epochs):
            opt = torch.optim.Adam(model.parameters())
            loader = SubgraphSampler(data, batch_size=6000, sample_coverage=100)
            for epoch in range(epochs):
                for batch in loader:
                    opt.zero_grad()
                    model(batch).mean().backward()
                    opt.step()
    """)


def test_another_functions_local_loader_is_not_the_one_trained_on():
    """Two functions, each with a local `loader`: the feature export's plain DataLoader is not the
    loader `train` gets from a factory the model cannot see."""
    check("""
        def export_features(model, dataset):
            loader = DataLoader(dataset, batch_size=256)
            with torch.no_grad():
                return [model(x) for x in loader]

        def train(model, dataset, make_loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = make_loader(dataset)
            for epoch in range(epochs):
                for x in loader:
                    opt.zero_grad()
                    model(x).sum().backward()
                    opt.step()
    """)


def test_global_loader_is_not_a_local_of_its_constructor(tmp_path):
    """A module-level `loader = Sampler(...)` of a project class whose constructor counts node
    statistics through a local `loader = DataLoader(self, ...)`: the loop over the global iterates
    the sampler (which draws its own random subgraphs), not that local."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'graphs'\n")
    (tmp_path / "samplers.py").write_text(textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader

        class RandomWalkSampler(DataLoader):
            def __init__(self, data, batch_size, coverage=0):
                self.data = data
                super().__init__(self, batch_size=1)
                self.norm = self._count() if coverage else None

            def __getitem__(self, index):
                return torch.randint(0, self.data.size(0), (64,))

            def __len__(self):
                return 1000

            def _count(self):
                counts = torch.zeros(self.data.size(0))
                loader = DataLoader(self, batch_size=200)
                for nodes in loader:
                    counts[nodes] += 1
                return counts
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import torch
        from samplers import RandomWalkSampler

        data = torch.randn(1000, 16)
        model = torch.nn.Linear(16, 2)
        opt = torch.optim.Adam(model.parameters())
        loader = RandomWalkSampler(data, batch_size=6000, coverage=100)

        def train():
            for batch in loader:
                opt.zero_grad()
                model(data[batch]).sum().backward()
                opt.step()

        for epoch in range(10):
            train()
    """))
    assert found_in_project(tmp_path / "train.py") == set()


def test_dataset_that_shuffles_its_own_items():
    check("""
        def main(model, Clips, files, epochs):
            opt = torch.optim.Adam(model.parameters())
            ordered = DataLoader(Clips(files, shuffle=False), batch_size=4)  # expect: LC702
            mixed = DataLoader(Clips(files, shuffle=True), batch_size=4)
            for epoch in range(epochs):
                for x in ordered:
                    opt.zero_grad()
                    model(x).mean().backward()
                    opt.step()
                for x in mixed:
                    opt.zero_grad()
                    model(x).mean().backward()
                    opt.step()
    """)


def test_loaders_built_by_one_dict_comprehension_and_picked_by_phase():
    check("""
        def fit(model, loaders, opt, epochs):
            for epoch in range(epochs):
                for phase in ["train", "val"]:
                    model.train(phase == "train")
                    for x, y in loaders[phase]:
                        with torch.set_grad_enabled(phase == "train"):
                            loss = nn.functional.mse_loss(model(x), y)
                        if phase == "train":
                            opt.zero_grad()
                            loss.backward()
                            opt.step()

        if __name__ == "__main__":
            sets = {s: torch.load(f"{s}.pt", weights_only=True) for s in ["train", "val"]}
            loaders = {s: DataLoader(sets[s], batch_size=32) for s in ["train", "val"]}  # expect: LC702
            model = nn.Linear(4, 1)
            fit(model, loaders, torch.optim.SGD(model.parameters(), lr=0.1), 10)
    """)
