"""`loopcheck lint --watch`: check, then poll the files and check again whenever one changes.

Polling (a stat of each file twice a second) needs no extra dependency and works on every file
system, network mounts included; a project small enough to lint interactively is cheap to stat.
"""

from __future__ import annotations

import sys
import time
from typing import Callable


def watch(check: Callable[[], int], snapshot: Callable[[], object], interval: float, say: Callable[[str], None]) -> int:
    """Run `check` now and after every change of `snapshot()`; Ctrl-C ends it with exit code 0."""
    last: object = None
    try:
        while True:
            now = snapshot()
            if now != last:
                if last is not None:
                    say("Files changed: checking again.")
                check()
                sys.stdout.flush()
                say("Watching for changes (Ctrl-C to stop).")
                last = now
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
