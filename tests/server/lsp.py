"""A minimal LSP client: starts `python -m loopcheck server` and speaks JSON-RPC to it over its
stdin and stdout, framed with Content-Length headers, as an editor does.

Used by the server tests and by benchmarks/server_latency.py.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]

CLIENT_CAPABILITIES = {
    "workspace": {
        "workspaceEdit": {"documentChanges": True},
        "configuration": False,
        "didChangeWatchedFiles": {"dynamicRegistration": True},
    },
    "textDocument": {
        "publishDiagnostics": {"versionSupport": True, "tagSupport": {"valueSet": [1, 2]}},
        "codeAction": {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix", "source.fixAll"]}}},
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "synchronization": {"didSave": True},
    },
    "notebookDocument": {"synchronization": {}},
    "general": {"positionEncodings": ["utf-16"]},
}


class ServerError(Exception):
    """The server answered a request with an error."""


class LspClient:
    def __init__(self, cwd: Path, *, timeout: float = 60.0, path: list[Path] = (), inline: bool = False) -> None:
        """`path`: folders put before the repository on the server's PYTHONPATH. `inline`: the
        server's messages are read by the thread waiting for one (as an editor's event loop
        reads them: one wake-up per message), not by a reader thread that hands them over."""
        self.timeout = timeout
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [*map(str, path), str(REPO), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loopcheck", "server"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
        )
        self._next_id = 0
        self._lock = threading.Condition()
        self._responses: dict[int, dict] = {}
        self.notifications: deque[dict] = deque()  # not yet consumed by wait_for
        self.received: list[dict] = []  # every notification, in order
        self.requests: list[dict] = []  # the server's requests to the client (each answered with null)
        self.stderr: list[bytes] = []
        self._write_lock = threading.Lock()
        self.inline = inline
        self._buffer = bytearray()  # read from the server, not yet filed (inline reading)
        if not inline:
            threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    # -- wire ----------------------------------------------------------------------------------

    def _send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")
        with self._write_lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    with self._lock:
                        self._lock.notify_all()
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if length is not None:
                self._file(json.loads(stream.read(length)))

    def _file(self, message: dict) -> None:
        """Keep a message from the server where the waiting side looks for it."""
        if "method" in message and "id" in message:  # a request from the server: accept it
            self.requests.append(message)
            self._send({"id": message["id"], "result": None})
            return
        with self._lock:
            if "id" in message and "method" not in message:
                self._responses[message["id"]] = message
            else:
                self.notifications.append(message)
                self.received.append(message)
            self._lock.notify_all()

    def _wait(self, left: float) -> None:
        """Wait (at most `left` seconds) for the server's next message; called holding the lock."""
        if not self.inline:
            self._lock.wait(left)
            return
        if self._file_buffered():
            return
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        if select.select([fd], [], [], left)[0]:
            self._buffer += os.read(fd, 1 << 16)
            self._file_buffered()

    def _file_buffered(self) -> bool:
        """File the complete messages read so far (inline reading); whether there was one."""
        filed = False
        while True:
            head_end = self._buffer.find(b"\r\n\r\n")
            if head_end == -1:
                return filed
            length = None
            for line in bytes(self._buffer[:head_end]).split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = head_end + 4
            if length is None or len(self._buffer) < body + length:
                return filed
            message = json.loads(bytes(self._buffer[body:body + length]))
            del self._buffer[:body + length]
            self._file(message)
            filed = True

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    # -- requests and notifications ------------------------------------------------------------

    def notify(self, method: str, params: Any) -> None:
        self._send({"method": method, "params": params})

    def request(self, method: str, params: Any = None) -> Any:
        self._next_id += 1
        msg_id = self._next_id
        self._send({"id": msg_id, "method": method, "params": params})
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while msg_id not in self._responses:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"no answer to {method}; server stderr:\n{self.stderr_text()}")
                self._wait(left)
            response = self._responses.pop(msg_id)
        if "error" in response:
            raise ServerError(response["error"])
        return response.get("result")

    def wait_for(self, method: str, where: Callable[[dict], bool] = lambda p: True) -> dict:
        """The params of the oldest notification of `method` that satisfies `where`, taken out
        of the queue (the others stay there)."""
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while True:
                for message in self.notifications:
                    if message.get("method") == method and where(message.get("params") or {}):
                        self.notifications.remove(message)
                        return message["params"]
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"no {method} notification; server stderr:\n{self.stderr_text()}")
                self._wait(left)

    def stderr_text(self) -> str:
        return b"".join(self.stderr).decode("utf-8", "replace")

    # -- the editor's side of a session ----------------------------------------------------------

    def initialize(self, root: Path, options: Any = None) -> dict:
        result = self.request("initialize", {
            "processId": os.getpid(),
            "rootUri": root.as_uri(),
            "capabilities": CLIENT_CAPABILITIES,
            "initializationOptions": options,
            "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
        })
        self.notify("initialized", {})
        return result

    def open(self, path: Path, text: str, version: int = 1) -> None:
        self.notify("textDocument/didOpen", {
            "textDocument": {"uri": path.as_uri(), "languageId": "python", "version": version, "text": text},
        })

    def change(self, path: Path, version: int, changes: list[dict]) -> None:
        self.notify("textDocument/didChange", {
            "textDocument": {"uri": path.as_uri(), "version": version}, "contentChanges": changes,
        })

    def diagnostics(self, path: Path, version: int | None = None) -> list[dict]:
        """The next diagnostics published for path (for that document version, when given)."""
        uri = path.as_uri()
        params = self.wait_for(
            "textDocument/publishDiagnostics",
            lambda p: p.get("uri") == uri and (version is None or p.get("version") == version),
        )
        return params["diagnostics"]

    def close(self) -> int:
        """shutdown, exit; the server's exit code."""
        try:
            self.request("shutdown")
            self.notify("exit", None)
            return self.proc.wait(timeout=self.timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
