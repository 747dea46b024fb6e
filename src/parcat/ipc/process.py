"""Worker processes: the one place they are started, watched and stopped.

Workers start with ``forkserver`` (or ``spawn`` where there is none) — never plain fork,
which copies locks held by other threads. Every worker is ``target(conn, parent_pid,
*args)``; the parent holds a :class:`Worker`: the process, its end of a duplex pipe, and
its state (:class:`WorkerState`). Every wait on a worker has a timeout and also watches
the process sentinel, so a dead worker is noticed at once (:class:`WorkerLostError`).

Every worker kind is one command loop (:func:`start_worker`, in the manner of Gymnasium's
``_async_worker``): its set-up returns :class:`Handlers`, a handler per command name; the
parent sends ``(command, *payload)`` and gets ``("ok", result)`` or ``("error",
ErrorReport)`` — with the original formatted traceback. The set-up's own reply is the
handshake (:meth:`Worker.wait_ready`); :meth:`Worker.call` is one command's round trip.
Per-step data of the policy and environment workers travels in shared memory
(:mod:`parcat.ipc.handoff`), served by :attr:`Handlers.idle` between commands.

Liveness: every worker runs a watch thread (:func:`become_worker`) that bumps a shared
heartbeat counter several times a second and ends the worker when its parent is gone (also
when the parent is an unreaped zombie). A worker whose heartbeat stops — SIGSTOP, a
deadlock or a native call that holds the GIL — is :meth:`Worker.frozen` after
:data:`LIVENESS_TIMEOUT_S`, and every wait on it raises :class:`WorkerLostError` then. The
parent stops workers with a polite message, then SIGTERM, then SIGKILL, each with a
deadline.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from parcat.core import errors
from parcat.core.errors import USER_CODE_ERRORS, ResourceLimitError, WorkerError
from parcat.core.resources import BLAS_VARIABLES, limit_blas_threads, pids_headroom


class StartMethod(str, enum.Enum):
    """How worker processes start (``--start-method``): never plain fork."""

    FORKSERVER = "forkserver"
    SPAWN = "spawn"


START_METHODS = tuple(m.value for m in StartMethod)
PRELOAD: list[str] = ["threadpoolctl"]
"""Modules the fork server imports once, so each worker it forks starts warm: the modules
that workers run register themselves (:func:`preload`) when this process imports them."""
QUIET_START = "parcat.ipc.quiet_start"
"""Imported last by the fork server: its hook is the fork server's, no one else's."""


def preload(module: str) -> None:
    """Have the fork server import ``module`` (a module calls this with its own ``__name__``)."""
    if module not in PRELOAD:
        PRELOAD.append(module)


STOP_GRACE_S = 2.0
"""How long each step of stopping a worker (close, SIGTERM, SIGKILL) waits."""
BEAT_S = 0.2
"""How often a worker's watch thread bumps its heartbeat."""
LIVENESS_TIMEOUT_S = float(os.environ.get("PARCAT_LIVENESS_TIMEOUT", "15"))
"""A worker whose heartbeat has not moved for this long is frozen (stopped, deadlocked)."""
PARENT_CHECK_S = 1.0
"""How often a worker checks that its parent is alive."""
SETUP_TIMEOUT_S = float(os.environ.get("PARCAT_SETUP_TIMEOUT", "60"))
"""Longest run of user code's set-up in a worker (:func:`call_in_worker`): building an
environment or policy, its first reset; a hang there ends after this long."""
BEAT, ACTING = 0, 1
"""Slots of a worker's status cells: its heartbeat, and 1 + the index of the agent whose
code it runs now (0: none), so a parent can name the agent a dying worker was stepping."""
_status: Any = None
"""This worker's status cells (shared with the parent), set by :func:`_bootstrap`."""
_pipe: Connection | None = None
"""This worker's end of its pipe, set by :func:`_bootstrap`."""
_parent_pid = 0
"""This worker's parent (the process that started it), set by :func:`_bootstrap`."""


class WorkerLostError(Exception):
    """The worker process ended (or its pipe broke, or it said nothing in time)."""


class Terminated(BaseException):
    """Raised in a worker by SIGTERM: its parent ends it. Not a ``SystemExit``, so code
    that catches what user code raises (``sys.exit`` included) lets it through."""

    def __init__(self, code: int, partial: Any = None) -> None:
        super().__init__(code)
        self.code = code
        self.partial = partial
        """What the interrupted work had produced, where the code it stopped saved it."""


@dataclass(frozen=True)
class ErrorReport:
    """What a worker sends back when code it ran raised."""

    kind: str
    """The exception's type name."""
    message: str
    """``str(exception)``."""
    traceback: str
    """The formatted traceback, as printed in the worker."""
    agent: Any = None
    """The agent whose code raised, where there was one."""

    @classmethod
    def from_exception(cls, exc: BaseException, agent: Any = None) -> ErrorReport:
        """The report of ``exc`` (with its traceback)."""
        formatted = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        message = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else str(exc)
        return cls(type(exc).__name__, message, formatted, agent)

    @property
    def summary(self) -> str:
        """``Kind: message`` on one line."""
        return f"{self.kind}: {self.message}"


class WorkerRaisedError(Exception):
    """A worker reported an error; ``report`` holds it, traceback included."""

    def __init__(self, worker: str, report: ErrorReport) -> None:
        super().__init__(f"{worker} raised {report.summary}")
        self.report = report


class SetupFailedError(Exception):
    """User code run by :func:`call_in_worker` raised, ended its process, froze or hung.

    Attributes:
        happened: What it did, e.g. ``ended its process with exit code 6``.
        acting: The index of the item it was on (:func:`mark_acting`), if it marked one.
        raised: Whether it raised an exception (as opposed to ending or hanging).
    """

    def __init__(self, happened: str, acting: int | None, raised: bool) -> None:
        super().__init__(happened)
        self.happened = happened
        self.acting = acting
        self.raised = raised

    def as_error(self, subject: str, when: str, usage: type[Exception]) -> Exception:
        """One line naming ``subject``: ``usage`` (bad input, exit 2) when the code raised
        (it refused what it was given), :class:`WorkerError` (exit 1) when it crashed."""
        kind = usage if self.raised else WorkerError
        return kind(f"{subject} {self.happened} {when}")


class WorkerState(enum.Enum):
    """Where a worker is in its life."""

    STARTING = "starting"
    """Started; has not answered its set-up yet."""
    READY = "ready"
    """Set up and serving."""
    STOPPED = "stopped"
    """Stopped by the parent and reaped."""
    DEAD = "dead"
    """Ended on its own (crash, signal, exit)."""


def default_start_method() -> str:
    """``forkserver`` where the platform has it, else ``spawn``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def get_context(method: str | None = None) -> BaseContext:
    """The multiprocessing context for ``method`` (default: :func:`default_start_method`)."""
    if getattr(mp.process.current_process(), "_inheriting", False):
        _refuse_unguarded_main()
    method = method or default_start_method()
    if method not in START_METHODS:
        raise ValueError(f"start method must be one of {', '.join(START_METHODS)}, got {method!r}")
    ctx = mp.get_context(method)
    # workers run one BLAS thread unless the plan says otherwise; set before the fork
    # server starts, OpenBLAS never spins up (and busy-waits on) a thread pool per worker
    for name in BLAS_VARIABLES:
        os.environ.setdefault(name, "1")
    _own_temp_dir()
    if method == "forkserver":
        ctx.set_forkserver_preload([*PRELOAD, QUIET_START])
        _start_fork_server()
    return ctx


TEMP_PREFIX = "parcat-mp-"
"""multiprocessing's temporary folder (the fork server's socket) is
``parcat-mp-<pid>-<random>``, so one a killed run left behind can be found."""


def _own_temp_dir() -> None:
    """Give multiprocessing a temporary folder marked with this process's signature (it
    would make an anonymous ``pymp-*`` one), and remove those of parcat processes that are
    provably gone (the same test as for shared-memory blocks: our PID namespace, a pid
    that is free or reused since)."""
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


_fork_server_of: int | None = None
"""The process that started its fork server through :func:`_start_fork_server`."""


def _start_fork_server() -> None:
    """Start the fork server with Ctrl-C blocked.

    The fork server is a process of its own in our process group: a Ctrl-C while it
    imports its preload would print its traceback and break every worker after. It
    inherits the blocked signal until it ignores Ctrl-C for good, and so do the workers it
    forks until :func:`become_worker`; here a Ctrl-C meanwhile waits and arrives after.
    (Blocking, not ignoring: a signal that arrives while ignored is lost.)
    """
    from multiprocessing import forkserver, resource_tracker

    global _fork_server_of
    if _fork_server_of == os.getpid():
        forkserver.ensure_running()  # restarts it if it died; no signal juggling
        return
    _check_headroom("the fork server")
    _fork_server_of = os.getpid()
    try:
        if threading.current_thread() is not threading.main_thread():
            # Ctrl-C is the main thread's: blocking it in this thread only decides what the
            # fork server inherits (the resource tracker's start unblocks it: first)
            resource_tracker.ensure_running()
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                forkserver.ensure_running()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            return
        # the resource tracker first: starting it unblocks Ctrl-C, which must not happen
        # while the fork server starts below
        resource_tracker.ensure_running()
        with _ctrl_c_deferred():
            forkserver.ensure_running()
    except OSError as exc:
        raise _limit_error("the fork server", exc) from exc


EXIT_UNGUARDED_MAIN = 86
"""Exit code of a worker that found parcat started while it imported the main script."""
UNGUARDED_MAIN = (
    "a worker process ran this program's main script and it started parcat again: put the "
    "code that runs parcat under `if __name__ == \"__main__\":` (worker processes import "
    "the main script to find functions defined in it)"
)


def _refuse_unguarded_main() -> None:
    """In a worker still importing the parent's main script: say why in one line, exit."""
    sys.stderr.write(f"parcat: error: {UNGUARDED_MAIN}\n")
    sys.stderr.flush()
    os._exit(EXIT_UNGUARDED_MAIN)


def raise_if_unguarded_main(worker: Worker) -> None:
    """Raise :class:`WorkerError` when ``worker`` died of an unguarded main script."""
    if worker.process.exitcode == EXIT_UNGUARDED_MAIN:
        raise WorkerError(UNGUARDED_MAIN)


TASKS_PER_WORKER = 4
"""Processes and threads a new worker may need: itself, its watch thread, and the fork
server's and resource tracker's share, with margin."""


def _check_headroom(name: str) -> None:
    """Refuse a worker up front when the pids cgroup has no room for it.

    Past the limit the fork server's own ``fork()`` fails, and it prints its traceback
    and dies; asking first keeps that one clean line.
    """
    left = pids_headroom()
    if left is not None and left < TASKS_PER_WORKER:
        raise ResourceLimitError(
            f"cannot start {name}: the pids cgroup allows {max(left, 0)} more process(es) or "
            f"thread(s), a worker needs {TASKS_PER_WORKER}; lower --jobs, or raise the "
            "container's pids limit"
        )


def _limit_error(name: str, exc: OSError) -> Exception:
    if exc.errno in (errno.EAGAIN, errno.ENOMEM):
        return ResourceLimitError(
            f"cannot start {name}: {exc.strerror} (the system's limit on processes or "
            "memory was reached); lower --jobs, or raise the limit (ulimit -u, the "
            "container's pids limit)"
        )
    return exc


class Worker:
    """The parent's handle on one worker process running ``target(conn, parent_pid, *args)``.

    Args:
        target: The worker's entry point (a module-level function).
        args: Its arguments after ``(conn, parent_pid)``.
        name: The process name (also used in messages).
        start_method: ``forkserver`` or ``spawn`` (ignored when ``ctx`` is given).
        ctx: A context from :func:`get_context`, when the caller needs it for more
            (e.g. a shared ``Value``).
    """

    def __init__(self, target: Callable[..., Any], args: tuple[Any, ...], name: str,
                 start_method: str | None = None, ctx: BaseContext | None = None) -> None:
        if getattr(mp.process.current_process(), "_inheriting", False):
            _refuse_unguarded_main()
        _check_headroom(name)
        ctx = ctx or get_context(start_method)
        self.name = name
        ours, theirs = ctx.Pipe(duplex=True)
        self._status: Any = ctx.Array("q", 2, lock=False)
        self._last_beat = (0, time.monotonic())
        # not a daemon: episode workers start policy workers of their own
        self.process: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
            target=_bootstrap, args=(target, self._status, theirs, os.getpid(), *args),
            name=name, daemon=False,
        )
        try:
            with _main_without_missing_file(), _ctrl_c_deferred():
                self.process.start()
        except OSError as exc:
            ours.close()
            theirs.close()
            raise _limit_error(f"worker process {name}", exc) from exc
        except BaseException:  # an interrupt held back during the start: no orphan
            ours.close()
            theirs.close()
            if self.process.pid is not None:
                self.process.kill()
                self.process.join(STOP_GRACE_S)
            raise
        theirs.close()
        self.conn: Connection = ours
        self._ready = False
        self._stopped = False

    # -- state ------------------------------------------------------------------------

    @property
    def state(self) -> WorkerState:
        """Where the worker is in its life."""
        if self._stopped:
            return WorkerState.STOPPED
        if not self.process.is_alive():
            return WorkerState.DEAD
        return WorkerState.READY if self._ready else WorkerState.STARTING

    @property
    def alive(self) -> bool:
        """Whether the process is running."""
        return not self._stopped and self.process.is_alive()

    @property
    def pid(self) -> int | None:
        """The process id."""
        return self.process.pid

    @property
    def sentinel(self) -> int:
        """Becomes ready when the process ends (for :func:`wait`)."""
        return int(self.process.sentinel)

    def frozen(self, limit_s: float | None = None) -> bool:
        """Whether the worker is alive but its heartbeat has not moved for ``limit_s``
        (default :data:`LIVENESS_TIMEOUT_S`); before its first beat it is never frozen."""
        beat, since = self._last_beat
        now_beat, now = int(self._status[BEAT]), time.monotonic()
        if now_beat != beat:
            self._last_beat = (now_beat, now)
            return False
        limit = LIVENESS_TIMEOUT_S if limit_s is None else limit_s
        return beat > 0 and now - since > limit and self.alive

    def acting(self) -> int | None:
        """The index of the agent whose code the worker runs now (or ran when it died)."""
        value = int(self._status[ACTING])
        return value - 1 if value > 0 else None

    def describe(self) -> str:
        """How the worker ended, e.g. ``died (signal SIGKILL)``, or that it froze."""
        if self.frozen():
            return f"stopped responding (no heartbeat for {LIVENESS_TIMEOUT_S:g} s)"
        self.process.join(0.5)
        return f"died ({describe_exit(self.process)})"

    # -- messages ---------------------------------------------------------------------

    def send(self, message: Any) -> None:
        """Send a message (pickled).

        Raises:
            WorkerLostError: the pipe is broken (the worker is gone).
        """
        try:
            with _ctrl_c_deferred(_MESSAGE):  # half a message would jam the pipe
                self.conn.send(message)
        except (OSError, ValueError) as exc:
            raise WorkerLostError(f"{self.name} {self.describe()}") from exc

    def poll(self) -> bool:
        """Whether a message is waiting (also true at end-of-file)."""
        try:
            return self.conn.poll()
        except (OSError, ValueError):
            return True

    def recv(self, timeout: float, skip: Sequence[str] = ()) -> tuple[Any, ...]:
        """The next message whose name is not in ``skip``, waiting at most ``timeout`` s.

        Raises:
            WorkerLostError: the worker died, or said nothing in time.
        """
        end = time.monotonic() + timeout
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise WorkerLostError(f"{self.name} did not answer in {timeout:g} s")
            ready = wait([self.conn, self.process.sentinel], min(remaining, PARENT_CHECK_S))
            if not ready and self.frozen():
                raise WorkerLostError(f"{self.name} {self.describe()}")
            if self.conn in ready:
                try:
                    with _ctrl_c_deferred(_MESSAGE):  # read whole or not at all
                        message = self.conn.recv()
                except (EOFError, OSError) as exc:
                    raise WorkerLostError(f"{self.name} {self.describe()}") from exc
                if message[0] not in skip:
                    return tuple(message)
            elif ready:
                raise WorkerLostError(f"{self.name} {self.describe()}")

    def wait_ready(self, timeout: float) -> Any:
        """The handshake: wait for the set-up's ``("ok", ready)`` and return ``ready``.

        Raises:
            WorkerRaisedError: the worker's set-up raised (its report is attached).
            WorkerLostError: it died, or was not ready in time.
        """
        try:
            result = self._reply(timeout)
        except WorkerLostError:
            raise_if_unguarded_main(self)
            raise
        self._ready = True
        return result

    def reply(self, timeout: float) -> Any:
        """The result of the last command (the handshake is read first if still unread).

        Raises:
            WorkerRaisedError: the command raised in the worker (its report is attached).
            WorkerLostError: the worker died, or did not answer in time.
        """
        if not self._ready:
            self.wait_ready(timeout)
        return self._reply(timeout)

    def call(self, command: str, *payload: Any, timeout: float) -> Any:
        """Send ``command`` and return its result (see :meth:`reply`)."""
        self.send((command, *payload))
        return self.reply(timeout)

    def _reply(self, timeout: float) -> Any:
        message = self.recv(timeout, skip=("done", "wake"))
        if message[0] == "ok":
            return message[1]
        if message[0] == "error":
            raise WorkerRaisedError(self.name, message[1])
        raise WorkerLostError(f"{self.name} sent {message[0]!r} instead of a reply")

    # -- stopping ---------------------------------------------------------------------

    def stop(self, grace_s: float = STOP_GRACE_S, terminate: bool = False) -> None:
        """Ask the worker to close (or, with ``terminate``, SIGTERM it at once), then
        SIGTERM, then SIGKILL it, ``grace_s`` apart; always reap it and close the pipe.
        A frozen worker is killed at once."""
        if self._stopped:
            return
        if self.frozen():  # a stopped or stuck process answers neither the pipe nor SIGTERM
            self.process.kill()
        elif terminate and self.process.is_alive():
            self.process.terminate()
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(("close",))
        self.process.join(grace_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(grace_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(grace_s)
        with contextlib.suppress(OSError):
            self.conn.close()
        self._stopped = True


def wait_any(workers: Iterable[Worker], timeout: float) -> None:
    """Block until some worker sent a message or ended, or ``timeout`` passed."""
    objects: list[Any] = []
    for worker in workers:
        objects += [worker.conn, worker.process.sentinel]
    if objects:
        wait(objects, timeout=timeout)
    else:
        time.sleep(timeout)


def stop_all(workers: Iterable[Worker], grace_s: float = STOP_GRACE_S) -> None:
    """Stop several workers: every one is asked to close before any is waited for."""
    workers = list(workers)
    for worker in workers:
        with contextlib.suppress(OSError, ValueError):
            worker.conn.send(("close",))
    for worker in workers:
        worker.stop(grace_s)


def call_in_worker(function: Callable[..., Any], args: tuple[Any, ...], name: str,
                   timeout_s: float | None = None, start_method: str | None = None) -> Any:
    """``function(*args)`` in a worker process, where user code's ``sys.exit``, crash or
    hang ends the worker, not this process; its return value comes back pickled.

    A parcat error it raises (:mod:`parcat.core.errors`) is raised here again, message kept.

    Raises:
        SetupFailedError: it raised something else, ended its process, froze, or ran past
            ``timeout_s`` (default :data:`SETUP_TIMEOUT_S`).
        TypeError, AttributeError, pickle.PicklingError: ``args`` cannot reach a worker.
    """
    timeout_s = SETUP_TIMEOUT_S if timeout_s is None else timeout_s
    worker = start_worker(_call, (function, args), name, start_method=start_method)
    try:
        return worker.wait_ready(timeout_s)
    except WorkerRaisedError as exc:
        report = exc.report
        known = getattr(errors, report.kind, None)
        if isinstance(known, type) and issubclass(known, errors.ParcatError):
            raise _rebuilt(known, report.message) from None
        happened = report.message if report.kind == "SystemExit" else f"raised {report.summary}"
        raise SetupFailedError(happened, report.agent, report.kind != "SystemExit") from None
    except WorkerLostError:
        raise SetupFailedError(_how_it_ended(worker, timeout_s), worker.acting(), False) from None
    finally:
        worker.stop(grace_s=0.5, terminate=True)


def _rebuilt(kind: type[errors.ParcatError], message: str) -> errors.ParcatError:
    """The parcat error a worker raised, rebuilt here from its message."""
    try:
        return kind(message)
    except TypeError:  # a class whose constructor takes more than the message
        return errors.WorkerError(message) if issubclass(kind, errors.RunError) \
            else errors.UsageError(message)


def _how_it_ended(worker: Worker, timeout_s: float) -> str:
    if worker.alive and worker.frozen():
        return worker.describe()
    if worker.alive:
        return f"did not finish in {timeout_s:g} s (PARCAT_SETUP_TIMEOUT)"
    worker.process.join(0.5)
    code = worker.process.exitcode
    if code is not None and code >= 0:
        return f"ended its process with exit code {code}"
    return f"crashed ({describe_exit(worker.process)})"


def _call(function: Callable[..., Any], args: tuple[Any, ...]) -> Handlers:
    return Handlers(ready=function(*args))


def in_worker() -> bool:
    """Whether this process is a parcat worker (user code here ends only the worker)."""
    return _status is not None


def mark_acting(index: int | None) -> None:
    """In a worker: note which item (agent, policy, environment) its code runs now, so
    the parent can name it when the worker dies; outside a worker nothing happens."""
    if _status is not None:
        _status[ACTING] = 0 if index is None else index + 1


def _acting_now() -> int | None:
    value = int(_status[ACTING]) if _status is not None else 0
    return value - 1 if value > 0 else None


_deferral: dict[str, Any] = {"depth": 0, "pending": set()}
"""How deep in :func:`_ctrl_c_deferred` the main thread is, and which signals wait."""


def postpone_interrupt(signum: int = signal.SIGINT) -> bool:
    """For a SIGINT or SIGTERM handler: True (and the signal is kept for later) while the
    main thread must not be interrupted; it is raised again when that part is done. The
    same signal again meanwhile is not postponed: that part is stuck (a pipe no one reads)."""
    if _deferral["depth"] > 0 and signum not in _deferral["pending"]:
        _deferral["pending"].add(signum)
        return True
    _deferral["pending"].discard(signum)
    return False


SHUTTING_DOWN = threading.Event()
"""Set where parcat has caught an interrupt and stops the run (each step with a deadline);
until then, a run that SIGTERM does not end soon is stuck in user code and the CLI ends it
at once."""


_MESSAGE = frozenset[int]()
"""Around a message on a pipe, no signal is blocked: the CLI's handlers postpone Ctrl-C and
SIGTERM (:func:`postpone_interrupt`), and a second one still ends a send that waits on a
pipe no one reads."""


@contextlib.contextmanager
def _ctrl_c_deferred(blocked: frozenset[int] = frozenset({signal.SIGINT})) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block is done (they arrive right after).

    Starting a worker is a conversation with the fork server, and a message on a pipe is
    written and read in several calls; cut in the middle, the other side reads half a
    message. The CLI's handlers postpone what arrives meanwhile
    (:func:`postpone_interrupt`); the ``blocked`` signals are also blocked in this thread,
    so that processes started here inherit them blocked (Ctrl-C, which workers ignore,
    around a start).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    _deferral["depth"] += 1
    try:
        yield
    finally:
        _deferral["depth"] -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if _deferral["depth"] == 0 and _deferral["pending"]:
            pending, _deferral["pending"] = _deferral["pending"], set()
            for signum in sorted(pending):
                signal.raise_signal(signum)


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


def kill_descendants() -> None:
    """SIGKILL every process started below this one (a last resort: the second Ctrl-C)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()


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
    """Whether the process ``parent_pid`` still runs (a zombie, dead but not reaped, does not)."""
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{parent_pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: existence is all we can tell
    return state not in (b"Z", b"X")


# -- the worker's side -----------------------------------------------------------------


def become_worker(parent_pid: int, blas_threads: int = 1,
                  check_every_s: float = PARENT_CHECK_S) -> None:
    """Set up a worker process: ignore Ctrl-C, clean up on SIGTERM, die with the parent,
    print on stderr.

    Ctrl-C reaches the whole process group, but the parent decides how a run ends, so
    workers ignore SIGINT. SIGTERM raises :class:`Terminated` so ``finally`` blocks release
    shared memory and stop child workers. A daemon thread bumps the heartbeat the parent
    watches, checks that the parent is alive and sends this process SIGTERM when it is not
    (a SIGKILLed parent cannot tell us). BLAS/OpenMP pools are capped at ``blas_threads``.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with contextlib.suppress(OSError, ValueError):  # stdout is the command's output alone
        sys.stdout.flush()
        os.dup2(2, 1)
    limit_blas_threads(blas_threads)
    status = _status

    def watch() -> None:
        next_check = time.monotonic() + check_every_s
        while True:
            if status is not None:
                status[BEAT] += 1
            time.sleep(BEAT_S)
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + check_every_s
            if not parent_alive(parent_pid):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5.0)
                os._exit(1)  # cleanup is stuck in a native call: go anyway

    threading.Thread(target=watch, name="parcat-parent-watch", daemon=True).start()


def worker_pipe() -> Connection:
    """In a worker: its end of the pipe to its parent (a handoff's wake-ups travel on it)."""
    assert _pipe is not None, "not in a worker process"
    return _pipe


def acting_marker() -> Any:
    """In a worker: a writable view of its status cells (``marker[ACTING] = index + 1``
    while agent ``index``'s code runs, 0 after), or ``None`` outside a worker."""
    return None if _status is None else memoryview(_status).cast("B").cast("q")


def _bootstrap(target: Callable[..., Any], status: Any, conn: Connection, parent_pid: int,
               *args: Any) -> None:
    """Every worker's first frame: keep its status cells for :func:`become_worker`, run.
    SIGTERM ends it by default again (the fork server it was forked from ignores it)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    global _status, _pipe, _parent_pid
    _status, _pipe, _parent_pid = status, conn, parent_pid
    try:
        target(conn, parent_pid, *args)
    except Terminated as stop:
        sys.exit(stop.code)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise Terminated(128 + signum)


def hold_sigterm(hold_s: float) -> None:
    """In a worker that holds what its parent still needs (the trained learners): a
    SIGTERM while the parent lives is held, so that one sent to the whole process group
    (``kill -- -PGID``, systemd) leaves the parent time to ask for it and close this
    worker. It ends after ``hold_s`` all the same, at a second SIGTERM (the parent's
    :meth:`Worker.stop` escalating) or at once when the parent is gone. Outside a worker,
    nothing changes."""
    if _pipe is None:
        return

    def on_sigterm(signum: int, frame: object) -> None:
        if not parent_alive(_parent_pid):
            raise Terminated(128 + signum)
        signal.signal(signal.SIGTERM, _exit_on_sigterm)  # the next one ends it
        timer = threading.Timer(hold_s, os.kill, (os.getpid(), signal.SIGTERM))
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, on_sigterm)


# -- the command loop: every worker kind is a set of handlers ---------------------------


class ReportedError(Exception):
    """Raised by a handler to send back ``report`` as it is (its own wording or agent)."""

    def __init__(self, report: ErrorReport) -> None:
        super().__init__(report.summary)
        self.report = report


@dataclass
class Handlers:
    """One worker kind: what its set-up function (run once in the worker) returns.

    The worker replies ``("ok", ready)`` when set up, then serves ``(command, *payload)``
    messages: ``("ok", commands[command](*payload))``, or ``("error", ErrorReport)`` when a
    handler raised. ``close``, a parent gone and SIGTERM end every worker kind alike.
    """

    commands: dict[str, Callable[..., Any]] = field(default_factory=dict)
    """The handler of each command name."""
    ready: Any = None
    """Sent with the set-up's ``("ok", ready)``."""
    idle: Callable[[], bool] | None = None
    """Serves the per-step data path (a shared-memory handoff) between commands; returns
    False when it stopped for a message on the pipe."""
    close: Callable[[], None] | None = None
    """Releases what the set-up acquired (shared memory, environments)."""


def start_worker(setup: Callable[..., Handlers], args: tuple[Any, ...], name: str,
                 blas_threads: int = 1, start_method: str | None = None,
                 ctx: BaseContext | None = None) -> Worker:
    """A worker process serving the :class:`Handlers` that ``setup(*args)`` returns there."""
    return Worker(_command_loop, (setup, args, blas_threads), name, start_method, ctx)


def _command_loop(conn: Connection, parent_pid: int, setup: Callable[..., Handlers],
                  args: tuple[Any, ...], blas_threads: int) -> None:
    become_worker(parent_pid, blas_threads)
    handlers = Handlers()
    try:
        try:
            handlers = setup(*args)
        except USER_CODE_ERRORS as exc:
            _reply_error(conn, exc)
            return
        _reply(conn, handlers.ready)
        while True:
            if handlers.idle is not None and handlers.idle():
                continue
            command, *payload = conn.recv()
            if command == "close":
                return
            if command == "wake":  # a handoff's wake-up: the next idle() serves its request
                continue
            try:
                result = handlers.commands[command](*payload)
            except USER_CODE_ERRORS as exc:
                _reply_error(conn, exc)
                continue
            _reply(conn, result)
    except Terminated as stop:  # the parent keeps what the interrupted work had got
        if stop.partial is not None:
            with contextlib.suppress(OSError, ValueError):
                conn.send(("partial", stop.partial))
    except (EOFError, OSError):
        pass  # the parent is gone
    except Exception as exc:  # the data path broke: say so before going
        _reply_error(conn, exc)
    finally:
        if handlers.close is not None:
            handlers.close()
        with contextlib.suppress(OSError):
            conn.close()


def _reply(conn: Connection, result: Any) -> None:
    try:
        data = pickle.dumps(("ok", result))
    except Exception as exc:  # a result that cannot be pickled is the handler's error
        _reply_error(conn, exc)
        return
    conn.send_bytes(data)


def _reply_error(conn: Connection, exc: BaseException) -> None:
    report = exc.report if isinstance(exc, ReportedError) \
        else ErrorReport.from_exception(exc, _acting_now())
    with contextlib.suppress(OSError, ValueError):
        conn.send(("error", report))
