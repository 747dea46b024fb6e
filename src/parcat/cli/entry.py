"""The console script: Ctrl-C and SIGTERM handled from parcat's first line.

Importing the CLI, and then the command that runs, takes a noticeable fraction of a
second; an interrupt in that window waits until the imports are done, and then, like one
anywhere later, ends the run with one line and exit code 130 (143 for SIGTERM), never a
traceback. A second Ctrl-C ends parcat at once: workers are killed, parcat's shared
memory is unlinked. Python drops an exception raised in a ``__del__`` method or a weakref
callback (printing "Exception ignored"); a Ctrl-C that lands there is delivered again a
moment later instead. One that some library swallows still makes the run exit with 130,
so a script never reads an interrupted run as a success.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import errno
import os
import resource  # here: under a low ulimit -v, importing it later can fail
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

INTERRUPTS = threading.Event()
"""Set by the first Ctrl-C."""


def postponed(signum: int) -> bool:
    """For a signal handler: whether the main thread is in a part that must not be cut
    (a message on a worker's pipe); the signal is then raised again right after it."""
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
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)
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

    A KeyboardInterrupt raised in the middle of an import can be swallowed by the module
    being imported (and the run then goes on); held back, it arrives right after. Threads
    that libraries start while importing (BLAS pools) inherit the block, so Ctrl-C always
    reaches the main thread. Commands are imported when they run (:mod:`parcat.cli.lazy`),
    after the CLI's SIGTERM handler is set, so SIGTERM is held back too.
    """
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        try:
            _raise_if_self_interrupted()  # also when the import failed: it is why
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _raise_if_self_interrupted() -> None:
    """Raise :class:`MemoryError` if a library loaded in the block sent this process Ctrl-C.

    OpenBLAS does, when it cannot start its threads (``ulimit -v`` too low): that is no
    user's Ctrl-C. One from elsewhere is sent again, to arrive once the block is done.
    """
    if signal.SIGINT not in signal.sigpending():
        return
    info = signal.sigtimedwait({signal.SIGINT}, 0)
    if info is None:
        return
    if info.si_pid != os.getpid():
        os.kill(os.getpid(), signal.SIGINT)
        return
    raise MemoryError("a native library could not start its threads while parcat was loading")


def _import_quietly() -> Any:
    """Import the CLI with Ctrl-C held back until it is done."""
    with signals_held():
        from parcat.cli.main import main
    return main


def run() -> None:
    """Entry point of the ``parcat`` command and of ``python -m parcat``."""
    signal.signal(signal.SIGINT, _on_sigint)
    sys.unraisablehook = _on_unraisable
    atexit.register(_ignore_signals)  # registered first: runs after every other handler
    if not _stdout_open():
        _say("parcat: error: stdout is closed (>&-): parcat prints its results there; "
             "redirect it to a file, or to /dev/null")
        sys.exit(EXIT_USAGE)
    try:
        main = _import_quietly()
        code = main()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Exception as exc:
        line = resource_limit_line(exc)
        if line is not None:
            _say(line)
            code = EXIT_FAILED
        elif INTERRUPTS.is_set():
            # a Ctrl-C inside a class body or an import surfaces wrapped (RuntimeError, ...)
            code = EXIT_INTERRUPTED
        else:
            raise
    if INTERRUPTS.is_set() and code == 0:
        code = EXIT_INTERRUPTED  # the interrupt was swallowed on its way up
    if code == EXIT_INTERRUPTED:
        _say_interrupted()
    shm = sys.modules.get("parcat.ipc.shm")
    if shm is not None:
        shm.unlink_own_blocks()
    sys.exit(code)


def _ignore_signals() -> None:
    """At the very end of the exit: the code is decided, and Python is about to put the
    default handlers back, by which a late Ctrl-C would kill parcat with the signal instead
    of the code (a second Ctrl-C before this point still stops a stuck exit at once)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def _stdout_open() -> bool:
    try:
        os.fstat(1)
    except OSError:
        return False
    return True


def resource_limit_line(exc: BaseException) -> str | None:
    """The one line for a failure that a limit of the process caused (memory, open files),
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


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)


def _say_interrupted() -> None:
    """The one line of an interrupted run, unless the CLI has said it."""
    common = sys.modules.get("parcat.cli.common")
    said = getattr(common, "INTERRUPT_SAID", None)
    if said is None or not said.is_set():
        with contextlib.suppress(OSError):
            print("parcat: interrupted", file=sys.stderr)
