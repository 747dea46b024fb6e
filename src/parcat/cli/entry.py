"""The console script: Ctrl-C and SIGTERM handled from parcat's first line.

An interrupt while the CLI imports waits until the imports are done; any ends the run with
one line and exit code 130 (143 for SIGTERM), never a traceback, even when some library
swallows it. A second Ctrl-C ends parcat at once (workers killed, shared memory unlinked).
One that lands in a ``__del__`` or a weakref callback, where Python drops it, is delivered
again a moment later.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import errno
import itertools
import os
import resource  # here: under a low ulimit -v, importing it later can fail
import signal
import sys
import threading
import time
from collections.abc import Iterator

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

INTERRUPTS = threading.Event()
"""Set by the first Ctrl-C."""
_EXIT_CODE: list[int] = []
"""The code :func:`main`'s run decided to exit with (the last exit handler ends the process
with it)."""
EARLY_PRELOAD = ("parcat.parallel.calibration", "parcat.parallel.episode_worker")
"""What the fork server imports when it starts before the CLI (:func:`start_fork_server_early`):
the modules of the first worker's check, calibration and episodes."""


def postponed(signum: int) -> bool:
    """For a signal handler: whether the main thread is in a part that must not be cut
    (a message on a worker's pipe), after which the signal is raised again."""
    # not imported here: a handler may run in the middle of an import
    ipc = sys.modules.get("parcat.ipc.start")
    postpone = getattr(ipc, "postpone_interrupt", None)
    return postpone is not None and bool(postpone(signum))


def _on_sigint(signum: int, frame: object) -> None:
    if postponed(signum):
        return
    if INTERRUPTS.is_set():
        stop_now(EXIT_INTERRUPTED, "parcat: interrupted again: stopping now")
    INTERRUPTS.set()
    raise KeyboardInterrupt


def _on_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        INTERRUPTS.clear()  # the next one is still the first
        threading.Thread(target=_interrupt_again, name="parcat-interrupt", daemon=True).start()
        return
    sys.__unraisablehook__(unraisable)


def _interrupt_again() -> None:
    """Raise the Ctrl-C again in the main thread, once our handler is in place."""
    for _ in range(200):
        time.sleep(0.01)
        if signal.getsignal(signal.SIGINT) is _on_sigint:
            _thread.interrupt_main(signal.SIGINT)
            return


def stop_now(code: int, line: str) -> None:
    """The second Ctrl-C (or SIGTERM): say ``line``, kill every worker, unlink our shared
    memory, exit with ``code`` — whatever the main thread is doing."""
    say(line)
    try:
        from parcat.ipc.process import kill_descendants
        from parcat.ipc.shm import unlink_own_blocks
        kill_descendants()
        unlink_own_blocks()
    finally:
        os._exit(code)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back while the block runs (an import); they arrive after it.

    A module being imported could swallow them; threads that libraries start meanwhile (BLAS
    pools) inherit the block, so Ctrl-C always reaches the main thread.
    """
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # read first, change in the try:
    try:  # an interrupt raised at any moment never leaves the mask blocked
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        yield
    finally:
        try:
            _raise_if_self_interrupted()  # also when the import failed: it is why
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _raise_if_self_interrupted() -> None:
    """Raise :class:`MemoryError` if a library loaded in the block sent this process Ctrl-C
    (OpenBLAS does when it cannot start its threads); one from elsewhere is sent again."""
    if signal.SIGINT not in signal.sigpending():
        return
    info = signal.sigtimedwait({signal.SIGINT}, 0)
    if info is None:
        return
    if info.si_pid != os.getpid():
        os.kill(os.getpid(), signal.SIGINT)
        return
    raise MemoryError("a native library could not start its threads while parcat was loading")


def main() -> None:
    """The ``parcat`` console script and ``python -m parcat``: :func:`run`, the process
    ended with its code once the exit handlers ran (the process is parcat's alone)."""
    run(end_process=True)


def run(end_process: bool = False) -> None:
    """Run the CLI on ``sys.argv`` and exit (:class:`SystemExit`) with its code;
    ``end_process``: then skip Python's teardown (:func:`_skip_teardown`), which would also
    skip an in-process caller's own exit handlers and code."""
    signal.signal(signal.SIGINT, _on_sigint)
    sys.unraisablehook = _on_unraisable
    atexit.register(_ignore_signals)  # registered first: runs after every other handler
    if not _stdout_open():
        say("parcat: error: stdout is closed (>&-): parcat prints its results there; "
             "redirect it to a file, or to /dev/null")
        sys.exit(EXIT_USAGE)
    try:
        with signals_held():
            start_fork_server_early(sys.argv)
            from parcat.cli.main import main
        code = main()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Exception as exc:
        line = resource_limit_line(exc)
        if line is not None:
            say(line)
            code = EXIT_FAILED
        elif INTERRUPTS.is_set():
            # a Ctrl-C inside a class body or an import surfaces wrapped (RuntimeError, ...)
            code = EXIT_INTERRUPTED
        else:
            raise
    if INTERRUPTS.is_set() and code == 0:
        code = EXIT_INTERRUPTED  # the interrupt was swallowed on its way up
    common = sys.modules.get("parcat.cli.common")
    if code == EXIT_INTERRUPTED and not (common and common.INTERRUPT_SAID.is_set()):
        say("parcat: interrupted")  # unless the CLI has said it
    shm = sys.modules.get("parcat.ipc.shm")
    if shm is not None:
        shm.unlink_own_blocks()
    if end_process:
        _EXIT_CODE.append(code)
    sys.exit(code)


def start_fork_server_early(argv: list[str]) -> None:
    """Start the fork server now, while this process imports the CLI, when ``argv`` is an
    ``eval`` or ``plan`` of a policy from outside parcat: its check and calibration run in a
    worker, whose fork server would otherwise import its modules only after the CLI did."""
    if not names_foreign_policy(argv):
        return
    try:
        from parcat.core.resources import BLAS_VARIABLES
        from parcat.ipc import process

        for module in EARLY_PRELOAD:
            process.preload(module)
        blas = {name: os.environ.get(name) for name in BLAS_VARIABLES}
        held = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        try:
            process.get_context()
        finally:  # starting the resource tracker unblocks both: signals_held's hold again
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        # the fork server keeps its one BLAS thread; this process's numpy is not yet imported
        for name, value in blas.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    except Exception:  # the run starts it when it needs it, and says then what fails
        return


def names_foreign_policy(argv: list[str]) -> bool:
    """Whether ``argv`` is ``parcat eval`` or ``parcat plan`` with a ``-p module:Class``
    (code from outside parcat) on a local fork server (no ``spawn``, no Ray)."""
    if len(argv) < 2 or argv[1] not in ("eval", "plan") or {"spawn", "ray"} & set(argv):
        return False
    values = [value for flag, value in itertools.pairwise(argv) if flag in ("-p", "--policy")]
    values += [arg.partition("=")[2] for arg in argv if arg.startswith("--policy=")]
    for value in values:
        target = value.split(",", 1)[0].split("@", 1)[0]
        if ":" in target and not target.startswith(("parcat.", "http:", "https:", "unix:")):
            return True
    return False


def _ignore_signals() -> None:
    """At the very end of the exit: a late Ctrl-C must not kill parcat with the signal
    instead of the code decided (once Python puts the default handlers back)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    _skip_teardown()


def _skip_teardown() -> None:
    """End the process with the code :func:`run` decided, once every other exit handler has
    run (workers stopped, blocks unlinked, files written and closed): Python's own teardown
    after them (a garbage collection per module it clears, every object freed) costs 0.1-0.4 s
    of CPU on the CLI's heap and does nothing the exit needs."""
    if not _EXIT_CODE:
        return  # an error that escaped: Python prints it and exits as it does
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # Python's teardown says what it says of a stream it cannot flush
    os._exit(_EXIT_CODE[0])


def _stdout_open() -> bool:
    try:
        os.fstat(1)
    except OSError:
        return False
    return True


def resource_limit_line(exc: BaseException) -> str | None:
    """The one line for a failure that a limit of the process (memory, open files) caused,
    naming the limit; ``None`` for any other failure."""
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (f"parcat: error: too many open files ({exc.strerror}): the open-file limit "
                f"(ulimit -n) is {soft}; raise it (ulimit -n 4096) or lower --jobs")
    if isinstance(exc, ImportError) and "failed to map segment" in str(exc):
        detail = " (a compiled module could not be loaded)"  # numpy's message is a page
    elif isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        detail = f" ({exc.strerror})"
    elif isinstance(exc, MemoryError):
        detail = f" ({str(exc).splitlines()[0]})" if str(exc).strip() else ""
    else:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    return (f"parcat: error: out of memory{detail}: the address-space limit (ulimit -v) is "
            f"{limit}; raise it (parcat needs about 1 GB with numpy and its workers), or "
            "free memory")


def say(line: str) -> None:
    """``line`` on stderr, if it is open."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)
