"""One writer per run: an exclusive ``flock`` on a lock file, held for the whole run.

``RUN/.parcat.lock`` (train), ``DIR/.parcat.lock`` (sim), ``.FILE.lock`` beside eval's
results file. A second writer fails at once, naming the holder's pid. The file holds the
holder's pid and is removed at the end; a killed holder's is taken over (the kernel drops
the ``flock``). Re-entrant within one process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path

from parcat.core.errors import OutputError, RunLockedError

LOCK_FILE = ".parcat.lock"
"""The lock file inside a folder a run writes (a run directory, a sim output folder)."""

_HELD: dict[str, list[int]] = {}  # lock file's absolute path -> [descriptor, holds]


def lock_beside(path: Path) -> Path:
    """The lock file of an output file: ``.NAME.lock`` in the same folder."""
    return path.with_name(f".{path.name}.lock")


class RunLock:
    """A held lock; :meth:`release` (or leaving the ``with`` block) lets it go."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._key: str | None = os.path.abspath(file)

    def release(self) -> None:
        """Let go (the last hold in this process removes the lock file); idempotent."""
        key, self._key = self._key, None
        if key is None or key not in _HELD:
            return
        entry = _HELD[key]
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _HELD[key]
        # unlink before unlocking: whoever opened this file meanwhile sees it is gone
        # once it gets the lock, and takes a new one (see _open_locked)
        with contextlib.suppress(OSError):
            if _same_file(os.lstat(key), os.fstat(entry[0])):  # never a link put there since
                os.unlink(key)
        os.close(entry[0])

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(file: Path, what: str, fix: str) -> RunLock:
    """Take the lock ``file`` (created if needed; its folder must exist) or fail at once.
    Messages name ``what`` is locked (``run directory 'runs/x'``) and the ``fix``.

    Raises:
        RunLockedError: another process holds the lock (the message names its pid).
        OutputError: the lock file cannot be created.
    """
    key = os.path.abspath(file)
    if key in _HELD:
        _HELD[key][1] += 1
        return RunLock(file)
    fd = _open_locked(key, what, fix)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = [fd, 1]
    return RunLock(file)


def _open_locked(key: str, what: str, fix: str) -> int:
    while True:
        fd = _open_file(key, what)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunLockedError(f"{what} is in use by another parcat process{holder}; wait for "
                              f"it to end, or {fix}") from None
        with contextlib.suppress(FileNotFoundError):
            if _same_file(os.lstat(key), os.fstat(fd)):
                return fd
        os.close(fd)  # the holder removed it as we opened it: take the next one


def _open_file(key: str, what: str) -> int:
    """Open (or create) the lock file itself: never a symlink's target, never a FIFO or
    device (the pid is written into it and it is removed at the end)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(key, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(_not_ours(key, what, "a symlink")) from None
        if exc.errno == errno.ENXIO:  # a FIFO no one reads
            raise OutputError(_not_ours(key, what, "a FIFO")) from None
        raise OutputError(f"{what}: cannot create the lock file '{key}' "
                          f"({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(_not_ours(key, what, "not a regular file"))
    return fd


def _not_ours(key: str, what: str, kind: str) -> str:
    kind = kind if kind.startswith("not") else f"{kind}, not a regular file"
    return (f"{what}: the lock file '{key}' is {kind}; parcat writes its pid there and "
            "removes it, so remove it or give another output")


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev)


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, 32, 0).decode().strip())
        return f" (pid {pid})"
    return ""


def _forget_in_child() -> None:
    # a forked child does not hold its parent's locks (closing its copies of the
    # descriptors leaves the parent's flock in place)
    for fd, _ in _HELD.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)
