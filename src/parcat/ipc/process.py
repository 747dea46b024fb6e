"""Worker processes: the one place they are started, watched and stopped.

Workers start with ``forkserver`` (``spawn`` where there is none), never plain fork, which
copies locks held by other threads. The parent holds a :class:`Worker` (process, duplex
pipe, :class:`WorkerState`); every wait on it has a timeout and watches the process
sentinel and the worker's heartbeat, so a dead or frozen worker is a
:class:`WorkerLostError` at once. Every worker kind is one command loop
(:func:`start_worker`, in the manner of Gymnasium's ``_async_worker``): its set-up returns
:class:`Handlers`; the parent sends ``(command, *payload)`` and gets ``("ok", result)`` or
``("error", ErrorReport)``. Per-step data travels in shared memory (:mod:`parcat.ipc.handoff`).
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from parcat.core import errors
from parcat.core.errors import USER_CODE_ERRORS, WorkerError, one_line_warning
from parcat.core.resources import BLAS_VARIABLES, limit_blas_threads
from parcat.ipc.shm_names import proc_stat_fields
from parcat.ipc.start import (
    EXIT_UNGUARDED_MAIN,
    UNGUARDED_MAIN,
    check_headroom,
    interrupts_deferred,
    limit_error,
    main_without_missing_file,
    own_temp_dir,
    refuse_unguarded_main,
    start_fork_server,
)


class StartMethod(str, enum.Enum):
    """How worker processes start (``--start-method``): never plain fork."""

    FORKSERVER = "forkserver"
    SPAWN = "spawn"


START_METHODS = tuple(m.value for m in StartMethod)
PRELOAD: list[str] = ["threadpoolctl"]
"""Modules the fork server imports once, so the workers it forks start warm."""
QUIET_START = "parcat.ipc.quiet_start"
"""Imported last by the fork server: its hook is the fork server's, no one else's."""
STOP_GRACE_S = 2.0  # how long each step of stopping a worker (close, SIGTERM, SIGKILL) waits
BEAT_S = 0.2  # how often a worker's watch thread bumps its heartbeat
LIVENESS_TIMEOUT_S = float(os.environ.get("PARCAT_LIVENESS_TIMEOUT", "15"))
"""A worker whose heartbeat has not moved for this long is frozen (stopped, deadlocked)."""
PARENT_CHECK_S = 1.0  # how often a worker checks that its parent is alive
SETUP_TIMEOUT_S = float(os.environ.get("PARCAT_SETUP_TIMEOUT", "60"))
"""Longest run of user code's set-up in a worker (:func:`call_in_worker`)."""
BEAT, ACTING = 0, 1
"""A worker's status cells: its heartbeat, and 1 + the index of the agent whose code it
runs now (0: none), so the parent can name the agent a dying worker was stepping."""
SHUTTING_DOWN = threading.Event()
"""Set where parcat caught an interrupt and stops the run (each step with a deadline);
until then, a run that SIGTERM does not end soon is stuck in user code."""

SPARE_S = 2.0
"""How long a worker kept for reuse waits unused (:func:`keep_spare`): a run's checks,
calibration and first episode worker follow each other within milliseconds."""
_spare: list[tuple[Worker, threading.Timer]] = []  # the kept worker, if any, and its timer
_SPARE_LOCK = threading.Lock()

# this worker's own status cells, pipe and parent, set by _bootstrap
_status: Any = None
_pipe: Connection | None = None
_parent_pid = 0


def preload(module: str) -> None:
    """Have the fork server import ``module`` (a module calls this with its own ``__name__``)."""
    if module not in PRELOAD:
        PRELOAD.append(module)


class WorkerLostError(Exception):
    """The worker process ended (or its pipe broke, or it said nothing in time)."""


class Terminated(BaseException):
    """Raised in a worker by SIGTERM. Not a ``SystemExit``, so code that catches what user
    code raises lets it through; ``partial`` is what the stopped work had produced."""

    def __init__(self, code: int, partial: Any = None) -> None:
        super().__init__(code)
        self.code = code
        self.partial = partial


@dataclass(frozen=True)
class ErrorReport:
    """What a worker sends back when code it ran raised."""

    kind: str
    """The exception's type name."""
    message: str
    traceback: str
    agent: Any = None
    """The agent whose code raised, where there was one."""

    @classmethod
    def from_exception(cls, exc: BaseException, agent: Any = None) -> ErrorReport:
        formatted = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        message = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else str(exc)
        return cls(type(exc).__name__, message, formatted, agent)

    @property
    def summary(self) -> str:
        return f"{self.kind}: {self.message}"


class WorkerRaisedError(Exception):
    """A worker reported an error; ``report`` holds it, traceback included."""

    def __init__(self, worker: str, report: ErrorReport) -> None:
        super().__init__(f"{worker} raised {report.summary}")
        self.report = report


class SetupFailedError(Exception):
    """User code run by :func:`call_in_worker` raised, ended its process, froze or hung:
    ``happened`` says what (``ended its process with exit code 6``), ``acting`` is the item
    it was on (:func:`mark_acting`), ``raised`` whether it raised."""

    def __init__(self, happened: str, acting: int | None, raised: bool) -> None:
        super().__init__(happened)
        self.happened = happened
        self.acting = acting
        self.raised = raised

    def as_error(self, subject: str, when: str, usage: type[Exception]) -> Exception:
        """One line naming ``subject``: ``usage`` (exit 2) when the code raised (it refused
        what it was given), :class:`WorkerError` (exit 1) when it crashed."""
        kind = usage if self.raised else WorkerError
        return kind(f"{subject} {self.happened} {when}")


class WorkerState(enum.Enum):
    """Where a worker is in its life: ``STOPPED`` by the parent, ``DEAD`` on its own."""

    STARTING = "starting"
    READY = "ready"
    STOPPED = "stopped"
    DEAD = "dead"


def default_start_method() -> str:
    """``forkserver`` where the platform has it, else ``spawn``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def check_start_method(method: str | None) -> str | None:
    """``method`` if it is one of :data:`START_METHODS` (or empty: the default), else
    ``ValueError``."""
    if method and method not in START_METHODS:
        raise ValueError(f"start method must be one of {', '.join(START_METHODS)}, got {method!r}")
    return method


def get_context(method: str | None = None) -> BaseContext:
    """The multiprocessing context for ``method`` (default: :func:`default_start_method`)."""
    if getattr(mp.process.current_process(), "_inheriting", False):
        refuse_unguarded_main()
    method = check_start_method(method) or default_start_method()
    ctx = mp.get_context(method)
    # workers run one BLAS thread unless the plan says otherwise; set before the fork
    # server starts, OpenBLAS never spins up (and busy-waits on) a thread pool per worker
    for name in BLAS_VARIABLES:
        os.environ.setdefault(name, "1")
    own_temp_dir()
    if method == "forkserver":
        ctx.set_forkserver_preload([*PRELOAD, QUIET_START])
        start_fork_server()
    return ctx


def raise_if_unguarded_main(worker: Worker) -> None:
    """Raise :class:`WorkerError` when ``worker`` died of an unguarded main script."""
    if worker.process.exitcode == EXIT_UNGUARDED_MAIN:
        raise WorkerError(UNGUARDED_MAIN)


class Worker:
    """The parent's handle on one worker process running ``target(conn, parent_pid, *args)``
    (a module-level function). ``ctx``, from :func:`get_context`, when the caller needs it
    for more (e.g. a shared ``Value``); else one for ``start_method``."""

    def __init__(self, target: Callable[..., Any], args: tuple[Any, ...], name: str,
                 start_method: str | None = None, ctx: BaseContext | None = None) -> None:
        if getattr(mp.process.current_process(), "_inheriting", False):
            refuse_unguarded_main()
        check_headroom(name)
        ctx = ctx or get_context(start_method)
        self.name = name
        self.start_method: str = ctx.get_start_method()
        ours, theirs = ctx.Pipe(duplex=True)
        self._status: Any = ctx.Array("q", 2, lock=False)
        self._last_beat = (0, time.monotonic())
        # not a daemon: episode workers start policy workers of their own
        self.process: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
            target=_bootstrap, args=(target, self._status, theirs, os.getpid(), *args),
            name=name, daemon=False,
        )
        try:
            with main_without_missing_file(), interrupts_deferred():
                self.process.start()
        except BaseException as exc:
            ours.close()
            theirs.close()
            if isinstance(exc, OSError):
                raise limit_error(f"worker process {name}", exc) from exc
            if self.process.pid is not None:  # an interrupt held back during the start
                self.process.kill()
                self.process.join(STOP_GRACE_S)
            raise
        theirs.close()
        self.conn: Connection = ours
        self._ready = False
        self._stopped = self._stopping = False
        with _RUNNING_LOCK:
            _running.add(self)

    @property
    def state(self) -> WorkerState:
        if self._stopped:
            return WorkerState.STOPPED
        if not self.process.is_alive():
            return WorkerState.DEAD
        return WorkerState.READY if self._ready else WorkerState.STARTING

    @property
    def alive(self) -> bool:
        return not self._stopped and self.process.is_alive()

    @property
    def pid(self) -> int | None:
        return self.process.pid

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

    def become(self, setup: Callable[..., Handlers], args: tuple[Any, ...], name: str,
               blas_threads: int = 1) -> None:
        """Have this idle worker serve ``setup(*args)``'s handlers from now on, as a new
        one would (its set-up's reply is the next handshake); a start saved."""
        self.send(("become", setup, args, blas_threads, name))
        self.name, self._ready = name, False

    def send(self, message: Any) -> None:
        """Send a message (pickled); :class:`WorkerLostError` when the pipe is broken."""
        try:
            with interrupts_deferred(frozenset()):  # half a message would jam the pipe
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
        """The next message whose name is not in ``skip``, waiting at most ``timeout`` s;
        :class:`WorkerLostError` when the worker died or said nothing in time."""
        end = time.monotonic() + timeout
        while (remaining := end - time.monotonic()) > 0:
            ready = wait([self.conn, self.process.sentinel], min(remaining, PARENT_CHECK_S))
            if not ready and self.frozen():
                raise WorkerLostError(f"{self.name} {self.describe()}")
            if ready and self.conn not in ready:
                raise WorkerLostError(f"{self.name} {self.describe()}")
            if ready:
                try:
                    with interrupts_deferred(frozenset()):  # read whole or not at all
                        message = self.conn.recv()
                except (EOFError, OSError) as exc:
                    raise WorkerLostError(f"{self.name} {self.describe()}") from exc
                if message[0] not in skip:
                    return tuple(message)
        raise WorkerLostError(f"{self.name} did not answer in {timeout:g} s")

    def wait_ready(self, timeout: float) -> Any:
        """The handshake: the set-up's ``ready`` value (:class:`WorkerRaisedError` when the
        set-up raised, :class:`WorkerLostError` when the worker died or was late)."""
        try:
            result = self._reply(timeout)
        except WorkerLostError:
            raise_if_unguarded_main(self)
            raise
        self._ready = True
        return result

    def reply(self, timeout: float) -> Any:
        """The result of the last command (the handshake is read first if still unread)."""
        if not self._ready:
            self.wait_ready(timeout)
        return self._reply(timeout)

    def call(self, command: str, *payload: Any, timeout: float) -> Any:
        """Send ``command`` and return its result."""
        self.send((command, *payload))
        return self.reply(timeout)

    def _reply(self, timeout: float) -> Any:
        message = self.recv(timeout, skip=("done", "wake"))
        if message[0] == "ok":
            return message[1]
        if message[0] == "error":
            raise WorkerRaisedError(self.name, message[1])
        raise WorkerLostError(f"{self.name} sent {message[0]!r} instead of a reply")

    def stop(self, grace_s: float = STOP_GRACE_S, terminate: bool = False) -> None:
        """Ask the worker to close (with ``terminate``, SIGTERM it at once), then SIGTERM,
        then SIGKILL it, ``grace_s`` apart; a frozen one is killed at once. Always reaps
        it and closes the pipe."""
        with _RUNNING_LOCK:  # one stopper only: a second could signal a reaped pid
            if self._stopped or self._stopping:
                return
            self._stopping = True
        if self.frozen():  # a stopped or stuck process answers neither the pipe nor SIGTERM
            self.process.kill()
        elif terminate and self.process.is_alive():
            self.process.terminate()
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(("close",))
        for end in (self.process.terminate, self.process.kill, None):
            self.process.join(grace_s)
            if end is None or not self.process.is_alive():
                break
            end()
        with contextlib.suppress(OSError):
            self.conn.close()
        self._stopped = True
        with _RUNNING_LOCK:
            _running.discard(self)


_running: weakref.WeakSet[Worker] = weakref.WeakSet()
"""Workers this process started and has not stopped (a forgotten one is stopped at exit)."""
_RUNNING_LOCK = threading.Lock()


def _forget_parents_workers() -> None:
    """In a process forked from one with workers: they are its parent's, not this one's
    (stopping them at this process's exit would end the parent's run)."""
    global _RUNNING_LOCK, _SPARE_LOCK
    _RUNNING_LOCK, _SPARE_LOCK = threading.Lock(), threading.Lock()  # held by a thread at the fork?
    _running.clear()
    _spare.clear()


os.register_at_fork(after_in_child=_forget_parents_workers)


def wait_any(workers: Iterable[Worker], timeout: float) -> None:
    """Block until some worker sent a message or ended, or ``timeout`` passed."""
    objects = [o for w in workers for o in (w.conn, w.process.sentinel)]
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
    hang ends the worker, not this process; a parcat error it raises is raised here again.

    Raises:
        SetupFailedError: it raised something else, ended its process, froze, or ran past
            ``timeout_s`` (default :data:`SETUP_TIMEOUT_S`).
    """
    timeout_s = SETUP_TIMEOUT_S if timeout_s is None else timeout_s
    worker = start_worker(_call, (function, args), name, start_method=start_method, reuse=True)
    kept = False
    try:
        result = worker.wait_ready(timeout_s)
        kept = keep_spare(worker)
        return result
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
        if not kept:
            worker.stop(grace_s=0.5, terminate=True)


def keep_spare(worker: Worker) -> bool:
    """Keep ``worker``, idle and set up cleanly, for the next :func:`start_worker` with
    ``reuse`` (a check, the calibration, the first episode worker are then one process, not
    one each: a start costs a fork and the user's imports); it stops after :data:`SPARE_S`
    unused, or at exit. ``False`` (the caller stops it) when another is kept already."""
    with _SPARE_LOCK:
        if _spare or not worker.alive:
            return False
        timer = threading.Timer(SPARE_S, release_spare, (worker,))
        timer.daemon = True
        _spare.append((worker, timer))
    timer.start()
    return True


def take_spare(start_method: str | None = None) -> Worker | None:
    """The kept worker (:func:`keep_spare`) if it started by ``start_method`` (default:
    :func:`default_start_method`) and still lives; it is the caller's now."""
    method = start_method or default_start_method()
    with _SPARE_LOCK:
        if not _spare or _spare[0][0].start_method != method:
            return None
        worker, timer = _spare.pop()
    timer.cancel()
    if worker.alive:
        return worker
    worker.stop(grace_s=0.5)
    return None


def release_spare(only: Worker | None = None) -> None:
    """Stop the kept worker (``only``: if it is that one, as its timer says)."""
    with _SPARE_LOCK:
        if not _spare or only not in (None, _spare[0][0]):
            return
        worker, timer = _spare.pop()
    timer.cancel()
    worker.stop(grace_s=0.5)


def _stop_at_exit() -> None:
    """Stop the kept worker and any worker its owner never stopped (an interrupt between a
    worker's start and the code that would stop it)."""
    release_spare()
    with _RUNNING_LOCK:
        forgotten = list(_running)
    stop_all(forgotten, grace_s=0.5)


# registered after multiprocessing's own exit hook (imported above), so it runs first:
# that hook would wait forever for a live worker, which waits for commands
atexit.register(_stop_at_exit)


def _rebuilt(kind: type[errors.ParcatError], message: str) -> errors.ParcatError:
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
    """In a worker: note which item (agent, policy, environment) its code runs now, so the
    parent can name it when the worker dies; outside a worker nothing happens."""
    if _status is not None:
        _status[ACTING] = 0 if index is None else index + 1


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
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def parent_alive(parent_pid: int) -> bool:
    """Whether ``parent_pid`` still runs (a zombie, dead but not reaped, does not)."""
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = proc_stat_fields(str(parent_pid))  # None without /proc: it exists, that is all
    return fields is None or fields[0] not in (b"Z", b"X")


def become_worker(parent_pid: int, blas_threads: int = 1,
                  check_every_s: float = PARENT_CHECK_S) -> None:
    """Set up a worker process: ignore Ctrl-C (the parent decides how a run ends), raise
    :class:`Terminated` on SIGTERM (so ``finally`` blocks release shared memory), print on
    stderr, cap BLAS pools at ``blas_threads``; a daemon thread bumps the heartbeat and
    SIGTERMs this process when the parent is gone (a SIGKILLed parent cannot tell us)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with contextlib.suppress(OSError, ValueError):  # stdout is the command's output alone
        sys.stdout.flush()
        os.dup2(2, 1)
    limit_blas_threads(blas_threads)
    warnings.showwarning = one_line_warning  # as the CLI shows them
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
    """Every worker's first frame. SIGTERM ends it by default again (the fork server it was
    forked from ignores it)."""
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
    """In a worker holding what its parent still needs (the trained learners): a SIGTERM
    while the parent lives is held, so one sent to the whole process group leaves the
    parent time to ask for it. It ends after ``hold_s`` all the same, at a second SIGTERM,
    or at once when the parent is gone. Outside a worker, nothing changes."""
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


class ReportedError(Exception):
    """Raised by a handler to send back ``report`` as it is (its own wording or agent)."""

    def __init__(self, report: ErrorReport) -> None:
        super().__init__(report.summary)
        self.report = report


@dataclass
class Handlers:
    """One worker kind: what its set-up function (run once in the worker) returns.

    The worker replies ``("ok", ready)`` when set up, then serves ``(command, *payload)``
    with ``("ok", commands[command](*payload))`` or ``("error", ErrorReport)``. ``close``,
    a parent gone and SIGTERM end every worker kind alike.
    """

    commands: dict[str, Callable[..., Any]] = field(default_factory=dict)
    ready: Any = None
    idle: Callable[[], bool] | None = None
    """Serves the per-step data path (a shared-memory handoff) between commands; returns
    False when it stopped for a message on the pipe."""
    close: Callable[[], None] | None = None
    """Releases what the set-up acquired (shared memory, environments)."""
    threads: int = 1
    """Commands served at once. Above 1, each command runs on one of this many threads and
    is answered as soon as it is done, so replies may come back in another order than the
    commands: a handler whose replies must be matched returns its own tag. (With 1, the
    command runs on the main thread, where SIGTERM can hand back a partial result.)"""
    stream: Callable[[Iterator[tuple[str, list[Any]] | None]], Iterator[Any]] | None = None
    """Serves the commands together on one thread instead: it is given ``(command,
    payload)`` as each arrives, or ``None`` when none is waiting while some it was given are
    unanswered (it must not wait then), and yields one tagged reply per command when it is
    ready. Used to play several episodes in lockstep."""


def start_worker(setup: Callable[..., Handlers], args: tuple[Any, ...], name: str,
                 blas_threads: int = 1, start_method: str | None = None,
                 ctx: BaseContext | None = None, reuse: bool = False) -> Worker:
    """A worker process serving the :class:`Handlers` that ``setup(*args)`` returns there;
    with ``reuse``, the kept one (:func:`keep_spare`) where there is one."""
    spare = take_spare(ctx.get_start_method() if ctx else start_method) if reuse else None
    if spare is not None:
        try:
            spare.become(setup, args, name, blas_threads)
            return spare
        except WorkerLostError:
            spare.stop(grace_s=0.5, terminate=True)
    return Worker(_command_loop, (setup, args, blas_threads), name, start_method, ctx)


def _command_loop(conn: Connection, parent_pid: int, setup: Callable[..., Handlers],
                  args: tuple[Any, ...], blas_threads: int) -> None:
    become_worker(parent_pid, blas_threads)
    handlers = Handlers()
    try:
        while True:  # a worker reused (Worker.become) is set up again
            try:
                handlers = setup(*args)
            except USER_CODE_ERRORS as exc:
                return _reply_error(conn, exc)
            _reply(conn, handlers.ready)
            then = _serve_commands(conn, handlers)
            if then is None:
                return
            if handlers.close is not None:
                handlers.close()
            handlers = Handlers()
            setup, args, blas_threads, mp.current_process().name = then
            limit_blas_threads(blas_threads)
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


def _serve_commands(conn: Connection, handlers: Handlers) -> list[Any] | None:
    """Serve commands until ``close`` (``None``) or ``become`` (its payload)."""
    pool = _CommandThreads(conn, handlers) \
        if handlers.threads > 1 or handlers.stream is not None else None
    if pool is not None:
        handlers.close = pool.closing(handlers.close)
    while True:
        if handlers.idle is not None and handlers.idle():
            continue
        command, *payload = conn.recv()
        if command == "close":
            return None
        if command == "become":
            return payload
        if command == "wake":  # a handoff's wake-up: the next idle() serves its request
            continue
        if pool is not None:
            pool.submit(command, payload)
            continue
        _serve(conn, handlers, command, payload)


def _serve(conn: Connection, handlers: Handlers, command: str, payload: list[Any]) -> None:
    """Run one command and send its reply (or its error)."""
    try:
        result = handlers.commands[command](*payload)
    except USER_CODE_ERRORS as exc:
        return _reply_error(conn, exc)
    _reply(conn, result)


class _CommandThreads:
    """The threads of a worker that serves several commands at once (``Handlers.threads``),
    or the one thread that serves them as a stream (``Handlers.stream``)."""

    def __init__(self, conn: Connection, handlers: Handlers) -> None:
        self._queue: queue.SimpleQueue[tuple[str, list[Any]] | None] = queue.SimpleQueue()
        self._unanswered = 0  # commands given to the stream, not yet answered
        self._closing = threading.Event()
        targets = [self._stream] if handlers.stream is not None \
            else [self._work] * handlers.threads
        self._threads = [threading.Thread(target=target, args=(conn, handlers), daemon=True,
                                          name=f"parcat-command-{i}")
                         for i, target in enumerate(targets)]
        for thread in self._threads:
            thread.start()

    def submit(self, command: str, payload: list[Any]) -> None:
        self._queue.put((command, payload))

    def _work(self, conn: Connection, handlers: Handlers) -> None:
        while (item := self._queue.get()) is not None:
            with contextlib.suppress(OSError, ValueError):  # the parent is gone
                _serve(conn, handlers, *item)

    def _stream(self, conn: Connection, handlers: Handlers) -> None:
        assert handlers.stream is not None
        try:
            for result in handlers.stream(self._commands()):
                self._unanswered -= 1
                with contextlib.suppress(OSError, ValueError):  # the parent is gone
                    _reply(conn, result)
        except Exception:
            if self._closing.is_set():
                return  # what it used was released under it: the worker is ending anyway
            # nothing answers the commands in flight any more: the worker ends, so the
            # parent replaces it and plays them again. SIGTERM to the main thread (one the
            # kernel picked, often this one, would not wake its read of the pipe), which
            # cleans up and exits; a signal that landed just before it blocked in the read
            # is never seen there: go anyway, as the watch thread does
            traceback.print_exc()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
            time.sleep(5.0)
            os._exit(1)

    def _commands(self) -> Iterator[tuple[str, list[Any]] | None]:
        while True:
            try:
                item = self._queue.get_nowait() if self._unanswered else self._queue.get()
            except queue.Empty:
                yield None
                continue
            if item is None:
                return
            self._unanswered += 1
            yield item

    def closing(self, close: Callable[[], None] | None) -> Callable[[], None]:
        """``close`` run once the threads finished what they were given."""
        def stop() -> None:
            self._closing.set()
            for _ in self._threads:
                self._queue.put(None)
            end = time.monotonic() + STOP_GRACE_S  # for all of them: a SIGTERM is waiting
            for thread in self._threads:
                thread.join(max(0.0, end - time.monotonic()))
            if close is not None:
                close()
        return stop


_SENDING = threading.Lock()
"""Replies from several threads of one worker go on its pipe one whole message at a time."""


def _reply(conn: Connection, result: Any) -> None:
    try:
        data = pickle.dumps(("ok", result))
    except Exception as exc:  # a result that cannot be pickled is the handler's error
        return _reply_error(conn, exc)
    with _SENDING:
        conn.send_bytes(data)


def _reply_error(conn: Connection, exc: BaseException) -> None:
    acting = int(_status[ACTING]) - 1 if _status is not None else -1
    report = exc.report if isinstance(exc, ReportedError) \
        else ErrorReport.from_exception(exc, acting if acting >= 0 else None)
    with contextlib.suppress(OSError, ValueError), _SENDING:
        conn.send(("error", report))
