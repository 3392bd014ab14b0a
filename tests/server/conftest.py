"""Shared pieces of the language server tests: training scripts, a project folder, a running
server, and the editor's side of applying edits (LSP positions in UTF-16 code units)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from .lsp import LspClient

# A classifier loop with the reset in the wrong place (safe fix) and an unguarded torch.load
# (unsafe fix); lines to flag carry their code.
BUGGY = textwrap.dedent(
    """\
    import torch
    from torch import nn


    def fit(model, train_loader, epochs, resume_from=None):
        if resume_from is not None:
            model.load_state_dict(torch.load(resume_from))  # expect: LC508
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
        criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        model.train()
        for epoch in range(epochs):
            for images, targets in train_loader:
                logits = model(images)
                loss = criterion(logits, targets)
                loss.backward()
                optimizer.zero_grad()  # expect: LC102
                optimizer.step()
    """
)

# The same loop written correctly.
FIXED = BUGGY.replace(
    "            loss.backward()\n            optimizer.zero_grad()  # expect: LC102\n            optimizer.step()\n",
    "            optimizer.zero_grad()\n            loss.backward()\n            optimizer.step()\n",
).replace("torch.load(resume_from))  # expect: LC508", "torch.load(resume_from, weights_only=True))")

_EXPECT = re.compile(r"#\s*expect:\s*(LC\d{3})")


def expected(source: str) -> list[tuple[str, int]]:
    """(code, 0-based line) of each `# expect:` mark."""
    return sorted(
        (m.group(1), number)
        for number, line in enumerate(source.splitlines())
        for m in _EXPECT.finditer(line)
    )


def found(diagnostics: list[dict]) -> list[tuple[str, int]]:
    return sorted((d["code"], d["range"]["start"]["line"]) for d in diagnostics if d.get("code"))


def _offset(text: str, position: dict) -> int:
    lines = text.splitlines(keepends=True)
    if position["line"] >= len(lines):
        return len(text)
    start = sum(len(line) for line in lines[: position["line"]])
    line = lines[position["line"]]
    units = i = 0
    while i < len(line) and units < position["character"]:
        units += 2 if ord(line[i]) > 0xFFFF else 1
        i += 1
    return start + i


def apply_edits(text: str, edits: list[dict]) -> str:
    """Apply LSP text edits as an editor does: all against the original text."""
    spans = sorted(
        ((_offset(text, e["range"]["start"]), _offset(text, e["range"]["end"]), e["newText"]) for e in edits),
        reverse=True,
    )
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def document_edits(action: dict, uri: str, version: int) -> list[dict]:
    """The edits of a code action for one document, checking they target that version."""
    changes = action["edit"]["documentChanges"]
    assert [c["textDocument"] for c in changes] == [{"uri": uri, "version": version}]
    return changes[0]["edits"]


def position_of(source: str, needle: str) -> dict:
    """The LSP position (UTF-16) of the first occurrence of needle."""
    for number, line in enumerate(source.splitlines()):
        at = line.find(needle)
        if at >= 0:
            return {"line": number, "character": len(line[:at].encode("utf-16-le")) // 2}
    raise AssertionError(f"{needle!r} not in source")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / ".git").mkdir()
    # a project that allows torch before 2.6, where `torch.load` unpickles by default (LC508 warns)
    (root / "requirements.txt").write_text("torch>=2.1\n", encoding="utf-8")
    return root


def _stop(client: LspClient) -> None:
    if client.proc.poll() is None:
        client.proc.kill()
        client.proc.wait()


@pytest.fixture
def start(project: Path) -> Iterator:
    """`start(options)` starts a server of this test's own in the project folder."""
    clients: list[LspClient] = []

    def _start(options: dict | None = None, root: Path = project) -> LspClient:
        client = LspClient(root)
        clients.append(client)
        client.initialize(root, {"debounce": 20, **(options or {})})
        return client

    yield _start
    for client in clients:
        _stop(client)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LspClient, Path]]:
    """One server for the tests of a module that need no settings of their own (starting one
    takes a second); each test works on its own file. It must shut down cleanly at the end."""
    root = tmp_path_factory.mktemp("shared")
    (root / ".git").mkdir()
    (root / "requirements.txt").write_text("torch>=2.1\n", encoding="utf-8")  # LC508 warns, as in the project fixture
    client = LspClient(root)
    try:
        client.initialize(root, {"debounce": 20})
        yield client, root
        assert client.close() == 0
    finally:
        _stop(client)


@pytest.fixture
def server(shared: tuple[LspClient, Path]) -> LspClient:
    return shared[0]


@pytest.fixture
def path(shared: tuple[LspClient, Path], request: pytest.FixtureRequest) -> Path:
    """A file of this test's own in the shared server's project (not written yet)."""
    return shared[1] / f"{request.node.name}.py"


def opened(server: LspClient, path: Path, text: str) -> list[dict]:
    """Write a file, open it in the editor, and return its first diagnostics."""
    write(path, text)
    server.open(path, text)
    return server.diagnostics(path, version=1)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
