"""Starting and stopping worker processes.

Workers start with ``forkserver`` (or ``spawn`` where there is none) — never plain fork,
which copies locks held by other threads. A worker learns that its parent died from the
end-of-file on its pipe and exits; the parent stops workers with a polite message, then
SIGTERM, then SIGKILL, each with a deadline.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

START_METHODS = ("forkserver", "spawn")
# modules the fork server imports once, so each worker it forks starts warm
PRELOAD = ["parcat.parallel.worker_main"]


def default_start_method() -> str:
    """``forkserver`` where the platform has it, else ``spawn``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def get_context(method: str | None = None) -> BaseContext:
    """The multiprocessing context for ``method`` (default: :func:`default_start_method`)."""
    method = method or default_start_method()
    if method not in START_METHODS:
        raise ValueError(f"start method must be one of {', '.join(START_METHODS)}, got {method!r}")
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_worker(
    ctx: BaseContext, target: Callable[..., Any], args: tuple[Any, ...], name: str
) -> tuple[BaseProcess, Connection]:
    """Start ``target(conn, *args)`` in a new process; return it and our end of its pipe."""
    ours, theirs = ctx.Pipe(duplex=True)
    # not a daemon: episode workers start policy workers of their own
    process: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
        target=target, args=(theirs, *args), name=name, daemon=False
    )
    process.start()
    theirs.close()
    return process, ours


def stop_worker(process: BaseProcess, conn: Connection | None, grace_s: float = 2.0) -> None:
    """Ask a worker to exit, then terminate, then kill it; always reap it."""
    if conn is not None:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("close",))
    process.join(grace_s)
    if process.is_alive():
        process.terminate()
        process.join(grace_s)
    if process.is_alive():
        process.kill()
        process.join(grace_s)
    if conn is not None:
        with contextlib.suppress(OSError):
            conn.close()
    with contextlib.suppress(ValueError, AttributeError):
        process.close()


def describe_exit(process: BaseProcess) -> str:
    """'exit code N' or 'signal SIGNAME' for a finished process."""
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def parent_alive(parent_pid: int) -> bool:
    """Whether ``parent_pid`` still exists (a fallback to pipe end-of-file)."""
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
