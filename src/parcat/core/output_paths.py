"""Output paths checked before a run starts, so a bad one costs nothing and breaks nothing.

A path that exists must be a regular file (a folder, for folders) and no symlink: parcat
replaces files by renaming a temp file over them, which would turn a device, FIFO, socket
or symlink into a plain file. The folder must be creatable and writable (a temp file is
made and removed there) and its file system must have room for a first write.
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
    """Check that ``path`` can be written as a regular file (else :class:`OutputError`);
    create its parent folders."""
    _refuse_non_file(path, flag)
    _check_folder(path.parent, flag, path, free_bytes)
    return path


def _refuse_non_file(path: Path, flag: str) -> None:
    kind = _kind(path)
    if kind is not None:
        raise OutputError(f"{flag} '{path}' is {kind}, not a regular file; parcat replaces "
                          "its output files, so give the path of a file")


def check_output_suffix(path: Path, flag: str, formats: Mapping[str, str]) -> str:
    """The extension of ``path`` (lower case), one of ``formats`` (extension → what the
    command writes there); any other is an :class:`OutputError` naming those expected."""
    _refuse_non_file(path, flag)  # what the path is tells more than its name: /dev/full
    suffix = path.suffix.lower()
    if suffix not in formats:
        got = f"'{suffix}'" if suffix else "(none)"
        expected = ", ".join(f"{ext} ({what})" for ext, what in formats.items())
        raise OutputError(f"{flag} '{path}': unknown extension {got}; expected {expected}")
    return suffix


def check_output_folder(path: Path, flag: str, free_bytes: int = MIN_FREE_BYTES) -> Path:
    """Check that ``path`` is (or can be created as) a writable folder (else
    :class:`OutputError`); create it."""
    kind = _kind(path)
    if kind is not None and kind != "a folder":
        raise OutputError(f"{flag} '{path}' is {kind}, not a folder; give the path of a folder")
    _check_folder(path, flag, path, free_bytes)
    return path


def _kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``None`` otherwise)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None  # missing, or a parent is a file or unreadable: _check_folder says why
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _check_folder(folder: Path, flag: str, target: Path, free_bytes: int) -> None:
    """Create ``folder`` if needed, then create and remove a temp file in it; a folder
    refused is left as it was found (the folders made for it removed again)."""
    made = missing_folders(folder)
    existing = made[-1].parent if made else folder
    if not existing.is_dir():
        raise OutputError(f"{flag} '{target}': '{existing}' is not a folder")
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
