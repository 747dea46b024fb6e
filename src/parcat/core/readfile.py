"""Reading a user's file without hanging on a FIFO, a device or a socket.

Every file parcat reads goes through :func:`read_regular`: it opens without blocking, checks
the opened file is a regular one, and only then reads, so a FIFO where a file was expected is
one ``OSError`` (whose ``strerror`` callers show) instead of a read that waits forever.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

NOT_REGULAR = "not a regular file (a FIFO, device or socket?)"
"""The ``strerror`` of the ``OSError`` for a path that is no regular file nor directory."""


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit`` + 1 with a ``limit``,
    so a caller can tell a file over it).

    Raises:
        OSError: the path is missing or unreadable, a directory (``IsADirectoryError``), or
            any other non-regular file (``strerror`` :data:`NOT_REGULAR`).
        ValueError: a NUL byte in the path.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as stream:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, NOT_REGULAR, str(path))
        os.set_blocking(fd, True)
        return stream.read() if limit is None else stream.read(limit + 1)

