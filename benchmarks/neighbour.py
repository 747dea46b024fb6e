"""One foreign busy process beside a benchmark: a laptop's browser, a shared CI runner."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_neighbour(enabled: bool = True,
                   seconds: float | None = None) -> Iterator[subprocess.Popen[bytes] | None]:
    """``python -c 'while 1: pass'`` while the block runs (``None`` when not ``enabled``);
    with ``seconds`` it also ends by itself then, should this process be killed."""
    if not enabled:
        yield None
        return
    loop = "while 1: pass" if seconds is None else (
        f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass")
    busy = subprocess.Popen([sys.executable, "-c", loop])
    try:
        yield busy
    finally:
        busy.kill()
        busy.wait()
