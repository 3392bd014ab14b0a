"""`loopcheck run SCRIPT [ARGS...]` and `loopcheck run -m MODULE [ARGS...]`: a script, unchanged, under a probe.

The script runs in this process through runpy, as `python SCRIPT ARGS...` would run it (its own
`sys.argv`, its directory first on `sys.path`, `__name__ == "__main__"`), inside a probe with no
arguments, so discovery attaches it to every model, optimizer, scheduler and scaler the script
uses. The run log is written as it goes; the summary is printed when the script ends, also
after a crash (its traceback first) or Ctrl-C. The exit code is the script's: 0, its
`sys.exit(...)` code, 1 after an uncaught exception, 130 after KeyboardInterrupt.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

from loopcheck.errors import ProbeUsageError

_OWN_FILES = (os.path.abspath(__file__), os.path.abspath(runpy.__file__))


class RunError(Exception):
    """The script or module to run cannot be found (exit code 2, nothing ran)."""


def resolve(target: str, module: bool) -> str:
    """The file that will run; RunError with what to do when there is none."""
    if module:
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as err:
            raise RunError(f"cannot import {target!r}: {err}") from None
        if spec is None:
            raise RunError(f"no module named {target!r} (run from the directory that holds it, or install it)")
        return spec.origin or target
    path = Path(target)
    if not path.exists():
        raise RunError(f"{target}: no such file")
    if path.is_dir() and not (path / "__main__.py").exists():
        raise RunError(f"{target} is a directory without __main__.py; give the training script itself")
    return str(path)


def run(target: str, args: Sequence[str], *, module: bool = False, log: Path | None = None,
        **options: Any) -> int:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.path.insert(0, os.getcwd() if module else os.path.dirname(os.path.abspath(target)))
    try:
        return _run(target, args, module, log, options)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path


def _run(target: str, args: Sequence[str], module: bool, log: Path | None, options: dict[str, Any]) -> int:
    try:
        resolve(target, module)
    except RunError as err:
        print(f"loopcheck run: {err}", file=sys.stderr)
        return 2
    try:
        from loopcheck.probe.probe import Probe

        probe = Probe(log=log, **options)
    except ImportError:
        print("loopcheck run: the probe needs torch; install it (pip install 'loopcheck[torch]')", file=sys.stderr)
        return 2
    except ProbeUsageError as err:
        print(f"loopcheck run: {err}", file=sys.stderr)
        return 2
    error: BaseException | None = None
    code = 0
    try:
        probe.__enter__()
    except ProbeUsageError as err:
        print(f"loopcheck run: {err}", file=sys.stderr)
        return 2
    try:
        sys.argv = [target, *args]
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exit:
        code = _exit_code(exit.code)
    except KeyboardInterrupt as interrupt:
        error, code = interrupt, 130
        print("loopcheck run: interrupted", file=sys.stderr)
    except BaseException as crash:
        error, code = crash, 1
        traceback.print_exception(type(crash), crash, _user_frames(crash.__traceback__), file=sys.stderr)
    probe.__exit__(type(error) if error is not None else None, error, None)
    return code


def _exit_code(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)  # sys.exit("message") prints it and exits with 1
    return 1


def _user_frames(tb: Any) -> Any:
    """The traceback from the script's first frame on (runpy's and ours left out)."""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not (name.startswith("<frozen runpy") or os.path.abspath(name) in _OWN_FILES):
            break
        tb = tb.tb_next
    return tb
