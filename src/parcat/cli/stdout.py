"""stdout that reports its own failures, so a full disk or a closed pipe is never a traceback.

While a command runs, ``sys.stdout`` is a :class:`GuardedStdout` over the same buffer: a
failed write or flush raises :class:`StdoutError` (whatever printed: ``print_json``, rich,
``typer.echo``), and the CLI turns it into one line and exit 1 — or, for a reader that
closed the pipe early (``parcat eval -f json | head -c 10``), into silence and exit 141.
Afterwards stdout is pointed at ``/dev/null`` so that what is still buffered cannot fail
again when Python exits ("Exception ignored ... BrokenPipeError").

stdout holds the command's output alone: while a command runs user code (policies,
environments, learners) in this process, ``sys.stdout`` is stderr
(:func:`user_prints_on_stderr`), so a policy's ``print()`` cannot break ``-f json``; worker
processes send their stdout to stderr too (:func:`parcat.ipc.process.become_worker`).

Why 141 for a closed pipe: it is what the shell reports for a program killed by SIGPIPE, as
``cat`` and ``yes`` are in ``yes | head -1``; like 130 (SIGINT) and 143 (SIGTERM) it says
"stopped from outside, not failed", and ``set -o pipefail`` treats parcat like coreutils.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator


class StdoutError(Exception):
    """Writing to stdout failed; ``cause`` is the operating system's error."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.cause = cause

    @property
    def pipe_closed(self) -> bool:
        """The reader went away (``| head``): not parcat's failure."""
        return self.cause.errno == errno.EPIPE


class GuardedStdout(io.TextIOWrapper):
    """A text stdout whose write and flush failures raise :class:`StdoutError`."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except OSError as exc:
            raise StdoutError(exc) from exc

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise StdoutError(exc) from exc


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """Run the block with ``sys.stdout`` guarded, and flush it before leaving.

    Only the process's real stdout is guarded; a stream a test put in its place is left alone.
    """
    stream = sys.stdout
    if type(stream) is not io.TextIOWrapper:
        yield
        return
    guard = GuardedStdout(stream.buffer, encoding=stream.encoding, errors=stream.errors,
                          line_buffering=stream.line_buffering,
                          write_through=stream.write_through)
    try:
        try:
            stream.flush()  # what was printed before goes first
        except OSError as exc:
            raise StdoutError(exc) from exc
        sys.stdout = guard
        yield
        guard.flush()  # fail here, not at exit where Python can only print "Exception ignored"
    except StdoutError:
        _discard(stream)
        raise
    finally:
        if sys.stdout is guard:
            sys.stdout = stream
        _detach(guard, stream)


def _detach(guard: GuardedStdout, stream: io.TextIOWrapper) -> None:
    """Let go of the real stdout's buffer without closing it (closing ``guard`` would)."""
    try:
        guard.detach()  # flushes first
    except StdoutError:
        _discard(stream)  # a failure after another error (a Ctrl-C): send the rest nowhere
        with contextlib.suppress(StdoutError, ValueError):
            guard.detach()


def _discard(stream: io.TextIOWrapper) -> None:
    """Point stdout's file descriptor at /dev/null: what is still buffered goes nowhere."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)


@contextlib.contextmanager
def user_prints_on_stderr() -> Iterator[None]:
    """Run the block (which runs user code) with ``sys.stdout`` pointing at stderr.

    What parcat shows meanwhile on stdout (train's epoch lines) writes to the stream it took
    before the block.
    """
    saved = sys.stdout
    with contextlib.suppress(OSError, ValueError, AttributeError):  # None: no stdout
        saved.flush()  # what was printed before goes first
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved
