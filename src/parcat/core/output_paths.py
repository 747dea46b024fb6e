"""Output paths checked before a run starts, so a bad one costs nothing and breaks nothing.

Every file parcat writes (``--output``, ``--trace``, ``--history``, charts) and every
folder it fills (``--run-dir``, sim ``--output``) is checked up front:

- a path that exists must be a regular file (a folder, for folders) and not a symlink:
  parcat replaces files atomically by renaming a temp file over them, which would turn a
  device node, a FIFO, a socket or a symlink into a plain file;
- the parent folder must exist or be creatable, and be writable: a temp file is created
  and removed there, which also catches read-only mounts and ``/proc``;
- the file system must have room for a first write.

Standard output is not a path: ``--format json`` (and ``-`` where a flag accepts it)
writes to it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from parcat.core.errors import OutputError

MIN_FREE_BYTES = 1 << 20
"""Room a file system must have left before a run writes its first file there."""

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symlink"),
)


def check_output_file(path: Path, flag: str, free_bytes: int = MIN_FREE_BYTES) -> Path:
    """Check that ``path`` can be written as a regular file; create its parent folders.

    Raises:
        OutputError: ``path`` is something else than a regular file (or is a symlink),
            or its folder cannot be created or written, or its file system is full.
    """
    _refuse_non_file(path, flag)
    _check_folder(path.parent, flag, path, free_bytes)
    return path


def _refuse_non_file(path: Path, flag: str) -> None:
    kind = _kind(path)
    if kind is not None:
        raise OutputError(f"{flag} '{path}' is {kind}, not a regular file; parcat replaces "
                          "its output files, so give the path of a file")


def check_output_suffix(path: Path, flag: str, formats: Mapping[str, str]) -> str:
    """The extension of ``path`` (lower case), one of those in ``formats``.

    Every ``-o/--output`` file takes its format from its extension, so an extension the
    command does not write is refused before anything runs, never written as another format.

    Args:
        path: The output file.
        flag: How the message names the flag (``--output``).
        formats: Every extension the command writes (``.json``) and what it holds there.

    Raises:
        OutputError: naming the extension that arrived and every one expected.
    """
    _refuse_non_file(path, flag)  # what the path is tells more than its name: /dev/full
    suffix = path.suffix.lower()
    if suffix not in formats:
        got = f"'{suffix}'" if suffix else "(none)"
        expected = ", ".join(f"{ext} ({what})" for ext, what in formats.items())
        raise OutputError(f"{flag} '{path}': unknown extension {got}; expected {expected}")
    return suffix


def check_output_folder(path: Path, flag: str, free_bytes: int = MIN_FREE_BYTES) -> Path:
    """Check that ``path`` is (or can be created as) a writable folder; create it.

    Raises:
        OutputError: ``path`` exists and is not a folder (or is a symlink), or it cannot
            be created or written, or its file system is full.
    """
    kind = _kind(path)
    if kind is not None and kind != "a folder":
        raise OutputError(f"{flag} '{path}' is {kind}, not a folder; give the path of a folder")
    _check_folder(path, flag, path, free_bytes)
    return path


def _kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``None`` otherwise)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # a parent is a file: _check_folder names it
    except OSError:
        return None  # unreadable: the write check below says why
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _check_folder(folder: Path, flag: str, target: Path, free_bytes: int) -> None:
    """Create ``folder`` if needed, then create and remove a temp file in it; a folder
    refused is left as it was found (the folders made for it removed again)."""
    for parent in (folder, *folder.parents):
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise OutputError(f"{flag} '{target}': '{parent}' is not a folder")
            break
    made = missing_folders(folder)
    try:
        _probe(folder, flag, target, free_bytes)
    except OutputError:
        remove_empty(made)
        raise


def _probe(folder: Path, flag: str, target: Path, free_bytes: int) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".parcat-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{flag} '{target}': cannot write to '{folder}' "
                          f"({_reason(exc)})") from None
    with contextlib.suppress(OSError):
        info = os.statvfs(folder)
        if info.f_bavail * info.f_frsize < free_bytes:
            raise OutputError(f"{flag} '{target}': the file system of '{folder}' is full "
                              f"({info.f_bavail * info.f_frsize} bytes free)")


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist yet, the deepest first: what creating
    it makes, and what :func:`remove_empty` takes away again."""
    missing = []
    for parent in (folder, *folder.parents):
        if parent.exists() or parent.is_symlink():
            break
        missing.append(parent)
    return missing


def remove_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that is empty: a refused or empty run
    leaves no folder behind."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _reason(exc: OSError) -> str:
    if exc.errno == errno.EROFS:
        return "read-only file system"
    return exc.strerror or type(exc).__name__
