"""Reading a user's file without hanging on a FIFO, a device or a socket: open without
blocking, check the opened file is regular, then read."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

NOT_REGULAR = "not a regular file (a FIFO, device or socket?)"
"""The ``strerror`` of the ``OSError`` for a path that is no regular file nor directory."""


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit`` + 1 with a ``limit``,
    so a caller can tell a file over it); an ``OSError`` for any other kind of file
    (``IsADirectoryError``, or ``strerror`` :data:`NOT_REGULAR`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as stream:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, NOT_REGULAR, str(path))
        os.set_blocking(fd, True)
        return stream.read() if limit is None else stream.read(limit + 1)

