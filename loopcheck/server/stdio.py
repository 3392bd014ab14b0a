"""Speaking LSP over the process's stdin and stdout, with the event loop reading stdin itself.

pygls reads stdin through its thread pool: each header line and each body is one hand-off to a
thread and back, three per message, and each hand-off waits for a core on a busy machine. When
stdin is a pipe or a socket (as editors start language servers), the event loop can watch it
directly instead: a message is read with no thread involved. Anything else (a terminal, a file,
Windows) keeps pygls's own reader.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
import threading
from typing import BinaryIO

from pygls.io_ import StdoutWriter, run_async
from pygls.lsp.server import LanguageServer

log = logging.getLogger("loopcheck.server")


def watchable(stream: BinaryIO) -> bool:
    """Whether the event loop can read `stream` itself: a pipe or a socket, on POSIX. A terminal
    is left alone (the loop would leave it non-blocking for the shell that started us)."""
    if os.name != "posix":
        return False
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _serve(server: LanguageServer, stdin: BinaryIO, stop: threading.Event) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    await run_async(stop_event=stop, reader=reader, protocol=server.protocol, logger=log,
                    error_handler=server.report_server_error)


def start_io(server: LanguageServer, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """Serve `server` on stdin / stdout until the client says exit or goes away."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    if not watchable(stdin):
        server.start_io(stdin, stdout)
        return
    stop = server._stop_event = threading.Event()  # pygls's shutdown() sets it
    server.protocol.set_writer(StdoutWriter(stdout))
    try:
        asyncio.run(_serve(server, stdin, stop))
    except BrokenPipeError:
        log.error("the connection to the client is lost; shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
