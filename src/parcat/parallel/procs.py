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
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from parcat.parallel.resources import BLAS_VARIABLES

START_METHODS = ("forkserver", "spawn")
# modules the fork server imports once, so each worker it forks starts warm
PRELOAD = [
    "parcat.parallel.worker_main",
    "parcat.rollout",
    "parcat.parallel.config",
    "parcat.policies.builtin",
    "parcat.envs.harvest",
    "parcat.envs.evade",
    "parcat.envs.goal_tasks",
    "threadpoolctl",
]


def default_start_method() -> str:
    """``forkserver`` where the platform has it, else ``spawn``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def get_context(method: str | None = None) -> BaseContext:
    """The multiprocessing context for ``method`` (default: :func:`default_start_method`)."""
    method = method or default_start_method()
    if method not in START_METHODS:
        raise ValueError(f"start method must be one of {', '.join(START_METHODS)}, got {method!r}")
    ctx = mp.get_context(method)
    # workers run one BLAS thread unless the plan says otherwise; set before the fork
    # server starts, OpenBLAS never spins up (and busy-waits on) a thread pool per worker
    for name in BLAS_VARIABLES:
        os.environ.setdefault(name, "1")
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_worker(
    ctx: BaseContext, target: Callable[..., Any], args: tuple[Any, ...], name: str
) -> tuple[BaseProcess, Connection]:
    """Start ``target(conn, parent_pid, *args)``; return the process and our end of its pipe."""
    ours, theirs = ctx.Pipe(duplex=True)
    # not a daemon: episode workers start policy workers of their own
    process: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
        target=target, args=(theirs, os.getpid(), *args), name=name, daemon=False
    )
    with _main_without_missing_file():
        process.start()
    theirs.close()
    return process, ours


@contextlib.contextmanager
def _main_without_missing_file() -> Iterator[None]:
    """Hide a ``__main__.__file__`` that is no file (``python -``, notebooks) or parcat's CLI.

    A new worker re-runs the parent's main file to find user code; when that "file" is
    ``<stdin>`` the worker would die on start-up, and when it is the ``parcat`` command it
    would import the whole CLI (~100 ms, ~10 MB). Our workers only need importable modules.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or (os.path.exists(path) and not _is_parcat_entry(path)):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _is_parcat_entry(path: str) -> bool:
    name = os.path.basename(path)
    return name == "parcat" or path.endswith(os.path.join("parcat", "__main__.py"))


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


def describe_exit(process: BaseProcess) -> str:
    """'exit code N' or 'signal SIGNAME' for a finished process."""
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def parent_alive(parent_pid: int) -> bool:
    """Whether the process ``parent_pid`` still exists."""
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def become_worker(parent_pid: int, check_every_s: float = 1.0) -> None:
    """Set up a worker process: ignore Ctrl-C, clean up on SIGTERM, die with the parent.

    Ctrl-C reaches the whole process group, but the parent decides how a run ends, so
    workers ignore SIGINT. SIGTERM raises ``SystemExit`` so ``finally`` blocks release
    shared memory and stop child workers. A daemon thread checks that the parent is alive
    and sends this process SIGTERM when it is not (a SIGKILLed parent cannot tell us).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)

    def watch() -> None:
        while True:
            time.sleep(check_every_s)
            if not parent_alive(parent_pid):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5.0)
                os._exit(1)  # cleanup is stuck in a native call: go anyway

    threading.Thread(target=watch, name="parcat-parent-watch", daemon=True).start()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
