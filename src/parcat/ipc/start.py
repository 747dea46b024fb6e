"""Starting worker processes safely: the fork server, the limits, Ctrl-C held back.

The fork server starts with Ctrl-C blocked; multiprocessing gets a temporary folder signed
by this process; a worker the pids cgroup has no room for is refused up front; a worker
that finds parcat started while importing the main script says why and exits; Ctrl-C and
SIGTERM wait while a worker starts or a message is on a pipe (:func:`interrupts_deferred`).
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from parcat.core.errors import ConfigError, ResourceLimitError
from parcat.core.resources import pids_headroom

TASKS_PER_WORKER = 4
"""Processes and threads a new worker may need: itself, its watch thread, and the fork
server's and resource tracker's share, with margin."""
EXIT_UNGUARDED_MAIN = 86
UNGUARDED_MAIN = (
    "a worker process ran this program's main script and it started parcat again: put the "
    "code that runs parcat under `if __name__ == \"__main__\":` (worker processes import "
    "the main script to find functions defined in it)"
)
TEMP_PREFIX = "parcat-mp-"
"""multiprocessing's temporary folder is ``parcat-mp-<signature>-<random>``, so one a
killed run left behind can be found."""
_fork_server_of: int | None = None
_deferral: dict[str, Any] = {"depth": 0, "pending": set()}


def own_temp_dir() -> None:
    """Give multiprocessing a temporary folder signed by this process (not an anonymous
    ``pymp-*``), and remove those of parcat processes that are provably gone."""
    from multiprocessing import util

    from parcat.ipc.shm_names import signature, signature_is_stale

    config = mp.process.current_process()._config  # type: ignore[attr-defined]
    if config.get("tempdir") is not None:
        return
    base = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            if name.startswith(TEMP_PREFIX) and \
                    signature_is_stale(name[len(TEMP_PREFIX):].rsplit("-", 1)[0]):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    path = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{signature()}-")
    # removed at exit like multiprocessing's own (kept referenced: shutdown runs late)
    util.Finalize(None, shutil.rmtree, args=(path, True), exitpriority=-100)
    config["tempdir"] = path


def start_fork_server() -> None:
    """Start the fork server with Ctrl-C blocked: one arriving while it imports its preload
    would break every worker after. It and the workers it forks inherit the blocked signal
    (blocked, not ignored: an ignored signal is lost) until they ignore Ctrl-C for good."""
    from multiprocessing import forkserver, resource_tracker

    global _fork_server_of
    if _fork_server_of == os.getpid():
        forkserver.ensure_running()  # restarts it if it died; no signal juggling
        return
    check_headroom("the fork server")
    _fork_server_of = os.getpid()
    try:
        # the resource tracker first: starting it unblocks Ctrl-C
        resource_tracker.ensure_running()
        if threading.current_thread() is threading.main_thread():
            with interrupts_deferred():
                forkserver.ensure_running()
            return
        # Ctrl-C is the main thread's: blocking it here only decides what the server inherits
        with signals_blocked({signal.SIGINT}):
            forkserver.ensure_running()
    except OSError as exc:
        raise limit_error("the fork server", exc) from exc


def refuse_unguarded_main() -> None:
    """In a worker still importing the parent's main script: say why in one line, exit."""
    sys.stderr.write(f"parcat: error: {UNGUARDED_MAIN}\n")
    sys.stderr.flush()
    os._exit(EXIT_UNGUARDED_MAIN)


def check_headroom(name: str) -> None:
    """Refuse a worker up front when the pids cgroup has no room for it (past the limit
    the fork server's own ``fork()`` fails with a traceback)."""
    left = pids_headroom()
    if left is not None and left < TASKS_PER_WORKER:
        raise ResourceLimitError(
            f"cannot start {name}: the pids cgroup allows {max(left, 0)} more process(es) or "
            f"thread(s), a worker needs {TASKS_PER_WORKER}; lower --jobs, or raise the "
            "container's pids limit"
        )


def limit_error(name: str, exc: OSError) -> Exception:
    if "AF_UNIX path too long" in str(exc):  # the fork server's socket, in the temp folder
        where = tempfile.gettempdir()
        return ConfigError(
            f"cannot start {name}: the temp folder's path is too long for its Unix socket "
            f"({len(where)} characters, about 45 fit: {where}); set TMPDIR to a shorter "
            "folder, e.g. TMPDIR=/tmp")
    if exc.errno in (errno.EAGAIN, errno.ENOMEM):
        return ResourceLimitError(
            f"cannot start {name}: {exc.strerror} (the system's limit on processes or "
            "memory was reached); lower --jobs, or raise the limit (ulimit -u, the "
            "container's pids limit)"
        )
    return exc


def postpone_interrupt(signum: int = signal.SIGINT) -> bool:
    """For a SIGINT or SIGTERM handler: True (the signal is raised again later) while the
    main thread must not be interrupted. The same signal again meanwhile is not postponed:
    that part is stuck (a pipe no one reads)."""
    if _deferral["depth"] > 0 and signum not in _deferral["pending"]:
        _deferral["pending"].add(signum)
        return True
    _deferral["pending"].discard(signum)
    return False


@contextlib.contextmanager
def signals_blocked(signals: Iterable[int]) -> Iterator[None]:
    """Block ``signals`` in this thread while the block runs; then the mask is as it was.

    The mask is read before it changes and changed inside the ``try``: a KeyboardInterrupt
    that a handler raises at any moment (one tripped before the block) never leaves the
    signals blocked, in this process or in the ones it starts later (they inherit the mask).
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def interrupts_deferred(blocked: frozenset[int] = frozenset({signal.SIGINT})) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block is done (they arrive right after).

    A worker's start and a message on a pipe take several calls; cut in the middle, the
    other side reads half a message. The CLI's handlers postpone what arrives meanwhile
    (:func:`postpone_interrupt`); ``blocked`` signals are also blocked in this thread, so
    processes started here inherit them blocked (Ctrl-C, which workers ignore).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferral["depth"] += 1
    try:
        with signals_blocked(blocked):
            yield
    finally:
        _deferral["depth"] -= 1
        if _deferral["depth"] == 0 and _deferral["pending"]:
            pending, _deferral["pending"] = _deferral["pending"], set()
            for signum in sorted(pending):
                signal.raise_signal(signum)


@contextlib.contextmanager
def main_without_missing_file() -> Iterator[None]:
    """Hide a ``__main__.__file__`` that is no file (``python -``, notebooks) or parcat's
    CLI: a new worker re-runs it, and would die on ``<stdin>`` or import the whole CLI."""
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
