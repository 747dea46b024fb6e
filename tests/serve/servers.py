"""A real ``parcat serve`` process for the tests: started on a free loopback port, its URL
read from its stdout, stopped (and waited for) whatever the test did."""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0
"""Generous: a busy 2-core machine may take long to import numpy, gymnasium and aiohttp."""


def parcat(*args: str) -> list[str]:
    """The command line of ``python -m parcat ARGS``."""
    return [sys.executable, "-m", "parcat", *args]


def read_url(proc: subprocess.Popen[str]) -> str:
    """The URL the server prints on its first line of stdout (``AssertionError`` if it ends
    or stays silent instead)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if selector.select(timeout=0.5):
                line = proc.stdout.readline().strip()
                assert line.startswith("http://"), f"unexpected first line: {line!r}"
                return line
    raise AssertionError(f"no URL from parcat serve (exit code {proc.poll()})")


@contextlib.contextmanager
def running_server(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``parcat serve ARGS --port 0`` running; yields the process and its URL."""
    proc = subprocess.Popen(parcat("serve", "--port", "0", *args), cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        yield proc, read_url(proc)
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL if it does not end in time; always waited for."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
