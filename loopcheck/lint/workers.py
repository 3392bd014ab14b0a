"""Worker processes for the analyses of a run, each file sent where what it imports is parsed.

Analysing a file parses the project modules its model follows, and a worker process keeps what
it parsed for the rest of the run: a module that files in two workers follow is parsed, and its
functions modelled, in both. So files are handed out one at a time as workers free up (the load
stays balanced whatever each file costs), and a worker is given, among the next files in order,
the one whose modules it holds most of and the other workers least (weighed by their size).
What a worker holds: the files sent to it and the modules they import, then the modules it
reports having parsed. A file's imports are read from its text with a pattern: cheap, and only a
guide (a wrong guess costs a parse in one more worker, never a finding).
"""

from __future__ import annotations

import os
import re
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_WINDOW = 32  # the next files in order a worker may be given
_AHEAD = 2  # files a worker holds at a time: the next one is there when it finishes one

# `import a.b as c, d` and `from ..a import b, c` (a parenthesised list: its first line's names)
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]+\(?([\w \t,*]*)|import[ \t]+([\w., \t]+))", re.M)


def imports_in(source: bytes) -> list[tuple[str, int]]:
    """(module, level) of what the import statements of `source` may load: each module, and
    each name imported from one as a submodule of it. Statements inside strings count too."""
    found: dict[tuple[str, int], None] = {}
    for match in _IMPORT.finditer(source):
        if match.group(4) is not None:
            for item in match.group(4).split(b","):
                words = item.split()
                if words:
                    found[(words[0].decode("ascii", "replace"), 0)] = None
            continue
        level = len(match.group(1))
        module = match.group(2).decode("ascii", "replace")
        if module or level:
            found[(module, level)] = None
        for item in match.group(3).split(b","):
            words = item.split()
            if words and words[0] != b"*":
                name = words[0].decode("ascii", "replace")
                found[(f"{module}.{name}" if module else name, level)] = None
    return list(found)


def analyse_in_workers(
    tasks: Sequence[T], analyse: Callable[[T], R], count: int, *, setup: Callable[[], None] | None = None,
    needs: Callable[[T], Iterable[str]] = lambda task: (), parsed: Callable[[R], Iterable[str]] = lambda result: (),
) -> list[R]:
    """`[analyse(t) for t in tasks]`, worked out in `count` worker processes (each runs `setup`
    first). `needs(task)`: the files its analysis may parse (its own first); `parsed(result)`:
    those the analysis did parse. An exception raised by `analyse` is raised here; a worker
    that dies raises `BrokenProcessPool`."""
    import multiprocessing
    from multiprocessing.connection import wait

    context = multiprocessing.get_context()
    workers: list[_Worker] = []
    try:
        for _ in range(min(count, len(tasks))):
            ours, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs, analyse, setup), daemon=True)
            process.start()
            theirs.close()
            workers.append(_Worker(process, ours))
        plan = _Plan(tasks, needs, len(workers))
        results: list[Any] = [None] * len(tasks)
        for worker_id, worker in enumerate(workers):
            for _ in range(_AHEAD):
                _send(plan, worker_id, worker)
        done = 0
        while done < len(tasks):
            for conn in wait([w.conn for w in workers if w.out]):
                worker_id = next(i for i, w in enumerate(workers) if w.conn is conn)
                worker = workers[worker_id]
                try:
                    index, ok, value = conn.recv()
                except (EOFError, OSError):
                    raise _broken(worker) from None
                if not ok:
                    raise value
                results[index] = value
                worker.out -= 1
                done += 1
                plan.learn(worker_id, parsed(value))
                _send(plan, worker_id, worker)
        return results
    finally:
        for worker in workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in workers:
            worker.process.join(5)
            if worker.process.is_alive():
                worker.process.terminate()
            worker.conn.close()


def _send(plan: "_Plan", worker_id: int, worker: "_Worker") -> None:
    try:
        plan.send(worker_id, worker)
    except OSError:
        raise _broken(worker) from None


def _broken(worker: "_Worker") -> BrokenProcessPool:
    worker.process.join(1)
    return BrokenProcessPool(f"a worker process ended while analysing (exit code {worker.process.exitcode})")


class _Worker:
    def __init__(self, process: Any, conn: Any) -> None:
        self.process, self.conn = process, conn
        self.out = 0  # files sent, results not yet back


def _serve(conn: Any, analyse: Callable[[Any], Any], setup: Callable[[], None] | None) -> None:
    """A worker: analyse each (index, task) received, send back (index, ok, result or error)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is the parent's to handle: it ends the workers
    if setup is not None:
        setup()
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if item is None:
            return
        index, task = item
        try:
            reply = (index, True, analyse(task))
        except Exception as exc:  # noqa: BLE001 - raised again in the parent, as a pool would
            reply = (index, False, exc)
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - a result or an error that cannot be pickled
            conn.send((index, False, RuntimeError(f"{type(exc).__name__}: {exc}")))


class _Plan:
    """Which file goes to which worker next (see the module's docstring)."""

    def __init__(self, tasks: Sequence[Any], needs: Callable[[Any], Iterable[str]], workers: int) -> None:
        self.tasks = tasks
        self.needs = needs
        self.waiting: dict[int, None] = dict.fromkeys(range(len(tasks)))  # in order
        self.held: list[set[str]] = [set() for _ in range(workers)]
        self._needs: dict[int, list[str]] = {}
        self._sizes: dict[str, int] = {}

    def send(self, worker_id: int, worker: _Worker) -> None:
        if not self.waiting:
            return
        index = self._pick(worker_id)
        del self.waiting[index]
        self.held[worker_id].update(self._needs_of(index))
        worker.conn.send((index, self.tasks[index]))
        worker.out += 1

    def learn(self, worker_id: int, parsed: Iterable[str]) -> None:
        self.held[worker_id].update(parsed)

    def _pick(self, worker_id: int) -> int:
        window = []
        for index in self.waiting:
            window.append(index)
            if len(window) == _WINDOW:
                break
        if len(self.held) == 1:
            return window[0]
        mine = self.held[worker_id]
        others = set().union(*(h for i, h in enumerate(self.held) if i != worker_id))
        best, best_score = window[0], None
        for index in window:
            score = 0
            for path in self._needs_of(index):
                if path in mine:
                    score += self._size(path)
                elif path in others:
                    score -= self._size(path)
            if best_score is None or score > best_score:
                best, best_score = index, score
        return best

    def _needs_of(self, index: int) -> list[str]:
        found = self._needs.get(index)
        if found is None:
            found = self._needs[index] = list(self.needs(self.tasks[index]))
        return found

    def _size(self, path: str) -> int:
        size = self._sizes.get(path)
        if size is None:
            try:
                size = os.path.getsize(path)
            except OSError:
                size = 0
            self._sizes[path] = size
        return size
