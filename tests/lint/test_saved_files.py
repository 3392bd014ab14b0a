"""The project's own saved files (`saved_files.py`) and LC508's use of them: a load of a file
another module of the project writes with tensors only is silent; a file it never writes, or
writes as a pickled module, is still reported."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from loopcheck.lint.api import lint_paths
from loopcheck.lint.saved_files import ProjectFiles, _Module, file_names, same_file, templates
from loopcheck.lint.project import Project


def _templates_of(source: str) -> set[str]:
    """Templates of the first argument of the last `load(...)` call in `source`."""
    module = _Module(ast.parse(textwrap.dedent(source)))
    call = max(module.calls["load"], key=lambda c: c.lineno)
    return templates(module, call.args[0])


def test_path_templates_follow_joins_defaults_and_fields():
    assert _templates_of('''
        import os
        def f(data_dir):
            return torch.load(os.path.join(data_dir, "train.pt"))
    ''') == {"{}/train.pt"}
    assert _templates_of('''
        from pathlib import Path
        def f(path: Path = Path("checkpoints/base/lit-base.pth")):
            return torch.load(path)
    ''') == {"checkpoints/base/lit-base.pth"}
    found = _templates_of('''
        def f(size, path=None):
            if not path:
                path = Path(f"checkpoints/{size}/lit-base.pth")
            return torch.load(path)
    ''')
    assert "checkpoints/{}/lit-base.pth" in found
    assert _templates_of('''
        def f(out, step):
            return torch.load("{}/g_{:08d}".format(out, step))
    ''') == {"{}/g_{}"}
    assert _templates_of('''
        class Data:
            train_file = "digits_train.pt"
            def __init__(self, root):
                self.root = root
                torch.load(os.path.join(self.root, "processed", self.train_file))
    ''') == {"{}/processed/digits_train.pt"}


def test_file_names_need_a_literal_part_and_match_with_fields():
    assert file_names({"{}/iter-{}-ckpt.pth", "{}/{}.pt", "cache/{}_{}.pt"}) == {"iter-{}-ckpt.pth", "cache/{}_{}.pt"}
    assert same_file("iter-000100-ckpt.pth", "iter-{}-ckpt.pth")
    assert same_file("{}_input.pt", "{}_{}_input.pt")
    assert not same_file("model.pt", "optim.pt")


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "setup.cfg").write_text("[options]\ninstall_requires =\n    torch>=1.13\n")
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def _lc508_lines(root: Path) -> list[tuple[str, int]]:
    report = lint_paths([root], select=["LC508"])
    return sorted((Path(f.path).name, f.line) for f in report.findings)


def test_a_save_helper_in_another_module_names_the_file_and_its_keys(tmp_path: Path):
    root = _project(tmp_path, {
        "ckpt.py": """
            import os
            import torch

            def save_state(state, folder, name):
                torch.save(state, os.path.join(folder, name))

            def read_state(path):
                return torch.load(path, map_location="cpu")
        """,
        "train.py": """
            from ckpt import read_state, save_state

            def run(model, opt, folder, resume):
                if resume:
                    state = read_state(resume)
                    model.load_state_dict(state["net"])
                    opt.load_state_dict(state["opt"])
                save_state({"net": model.state_dict(), "opt": opt.state_dict(), "step": 3}, folder, "last.pth")
        """,
        "other.py": """
            import torch

            def read_foreign(path):
                ckpt = torch.load(path)
                return ckpt["model"]
        """,
    })
    # read back with two of the keys the helper's callers write: the project's own format;
    # one generic key ("model") says nothing about whose file it is
    assert _lc508_lines(root) == [("other.py", 5)]
    files = ProjectFiles(Project.for_path(root / "train.py"), str(root / "ckpt.py"), (root / "ckpt.py").read_text())
    assert "last.pth" in files.names


def test_a_whole_module_saved_is_not_a_tensor_file(tmp_path: Path):
    root = _project(tmp_path, {
        "export.py": """
            import torch

            def export(model, out):
                torch.save(model, out / "net-full.pt")
                torch.save(model.state_dict(), out / "net-weights.pt")
        """,
        "serve.py": """
            import torch

            def serve(folder):
                full = torch.load(folder / "net-full.pt")
                weights = torch.load(folder / "net-weights.pt")
                return full, weights
        """,
    })
    assert _lc508_lines(root) == [("serve.py", 5)]


def test_a_model_class_whose_state_dicts_the_project_saves(tmp_path: Path):
    root = _project(tmp_path, {
        "nets.py": """
            import torch
            import torch.nn as nn
            from torchvision.models import resnet50

            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 8, 3)

            class Builder:
                @staticmethod
                def build_encoder(weights=""):
                    net = Encoder()
                    if weights:
                        net.load_state_dict(torch.load(weights, map_location="cpu"))
                    return net

                @staticmethod
                def build_backbone(weights=""):
                    net = resnet50()
                    if weights:
                        net.load_state_dict(torch.load(weights, map_location="cpu"))
                    return net
        """,
        "train.py": """
            import torch
            from nets import Builder

            def checkpoint(nets, folder, epoch):
                (encoder, backbone) = nets
                encoder_sd = encoder.state_dict()
                torch.save(encoder_sd, "{}/encoder_epoch_{}.pth".format(folder, epoch))

            def main(cfg):
                encoder = Builder.build_encoder(cfg.encoder_weights)
                backbone = Builder.build_backbone(cfg.backbone_weights)
                nets = (encoder, backbone)
                for epoch in range(cfg.epochs):
                    checkpoint(nets, cfg.folder, epoch)
        """,
    })
    # the encoder's state dicts are what training writes (through a tuple handed to a helper);
    # the library backbone's weights come from elsewhere
    assert _lc508_lines(root) == [("nets.py", 23)]


# ---- what the project saves, kept file by file ----------------------------------------------------

SAVING_PROJECT = {
    "ckpt.py": """
        import os
        import torch

        def save_state(state, folder, name):
            torch.save(state, os.path.join(folder, name))
    """,
    "train.py": """
        import torch
        import export
        from ckpt import save_state

        def run(model, opt, folder):
            save_state({"net": model.state_dict(), "opt": opt.state_dict()}, folder, "last.pth")
            export.write_weights(model.state_dict(), folder, "weights.pt")
            torch.save(model.state_dict(), "final.pt")
    """,
    "export.py": """
        import torch

        def export(model, out):
            torch.save(model, out / "net-full.pt")
    """,
    "notes.py": """
        # nothing here is saved
        def describe(model):
            return sum(p.numel() for p in model.parameters())
    """,
}

HELPER = """
def write_weights(sd, folder, name):
    torch.save(sd, folder / name)
"""

# (what, file, edit of its text)
SAVE_EDITS = [
    ("a save added", "export.py", lambda t: t + "    torch.save(model.state_dict(), out / 'net-weights.pt')\n"),
    ("a save removed", "train.py", lambda t: t.replace('torch.save(model.state_dict(), "final.pt")', "pass")),
    ("a save helper added", "export.py", lambda t: t + HELPER),
    ("a save helper removed", "ckpt.py", lambda t: t.replace("torch.save(state, os.path.join(folder, name))", "pass")),
    ("a save helper renamed", "ckpt.py", lambda t: t.replace("def save_state(", "def store_state(")),
    ("a call of a save helper renamed", "train.py", lambda t: t.replace("save_state(", "store_state(")),
]


def _saves_now(root: Path, store: object) -> tuple[object, str]:
    """What the project saves and its digest, as a new process works it out (nothing in memory)."""
    from loopcheck.lint import saved_files
    from loopcheck.lint.project import parts_kept_in

    saved_files._MODULES.clear()
    with parts_kept_in(store):
        value, digest, _ = saved_files.project_saves(Project([root]))
    return value, digest


@pytest.mark.parametrize("what,name,edit", SAVE_EDITS, ids=[e[0] for e in SAVE_EDITS])
def test_what_the_project_saves_is_made_again_only_for_the_edited_file(tmp_path: Path, monkeypatch, what, name, edit):
    from loopcheck.lint import saved_files
    from loopcheck.lint.cache import Cache

    root = _project(tmp_path, SAVING_PROJECT)
    store = Cache(root).derived
    before = _saves_now(root, store)
    assert before == _saves_now(root, None)  # kept parts read back give what working them out gives
    (root / name).write_text(edit((root / name).read_text()))
    made: list[str] = []
    calls: list[str] = []
    direct, helper_calls = saved_files._direct_saves, saved_files._helper_calls
    monkeypatch.setattr(saved_files, "_direct_saves", lambda m, path: made.append(Path(path).name) or direct(m, path))
    monkeypatch.setattr(saved_files, "_helper_calls",
                        lambda m, path, helpers: calls.append(Path(path).name) or helper_calls(m, path, helpers))
    warm = _saves_now(root, store)
    assert made in ([], [name])  # the other files' parts are read back (none left to make: it saves no more)
    # ckpt.py names `save_state` alone: its calls are looked for again only when it changed
    assert name == "ckpt.py" or "ckpt.py" not in calls
    monkeypatch.undo()
    assert warm == _saves_now(root, None), what
    assert warm[1] != before[1], what


def test_kept_parts_that_cannot_be_read_back_are_made_again(tmp_path: Path) -> None:
    from loopcheck.lint.cache import Cache

    root = _project(tmp_path, SAVING_PROJECT)
    store = Cache(root).derived
    cold = _saves_now(root, None)
    assert _saves_now(root, store) == cold
    parts = sorted(store.folder.rglob("*.json"))
    assert len(parts) == 6  # three files save (in two helpers, `save_state` and `export`), three name a helper
    garbage = [b"", b"\x00\xff", b'{"schema": 2}', b'{"schema": 2, "key": "x", "part": {}}']
    for i, part in enumerate(parts):
        doc = json.loads(part.read_text())
        doc["part"] = {"saves": [["one", [], True, None, [], []]], "helpers": []} if i == 4 else None
        part.write_bytes(garbage[i] if i < len(garbage) else json.dumps(doc).encode())
    assert _saves_now(root, store) == cold
    assert _saves_now(root, store) == cold  # written again
