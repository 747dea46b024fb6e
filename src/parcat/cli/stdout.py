"""stdout that reports its own failures, so a full disk or a closed pipe is never a traceback.

A failed write raises :class:`StdoutError`, which the CLI turns into one line and exit 1, or,
for a reader that closed the pipe (``| head``), into silence and exit 141 (as the shell
reports SIGPIPE); stdout then points at ``/dev/null`` so nothing fails again at exit. While
user code runs in this process, ``sys.stdout`` is stderr, so a ``print()`` cannot break
``-f json``.
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
    """Run the block with the real ``sys.stdout`` guarded (not a test's), flushed at the end."""
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
    """Run the block (which runs user code) with ``sys.stdout`` pointing at stderr (parcat's
    own output meanwhile writes to the stream it took before)."""
    saved = sys.stdout
    with contextlib.suppress(OSError, ValueError, AttributeError):  # None: no stdout
        saved.flush()  # what was printed before goes first
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved
