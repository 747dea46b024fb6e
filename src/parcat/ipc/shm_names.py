"""Shared-memory block names: who made a block, and whether that process is provably gone.

A block is ``parcat_ns<namespace>_<pid>_<start>_<random>``: ``namespace`` tags the creator's
PID (and time) namespace, since ``/dev/shm`` is often shared between containers and only
blocks of our own tag are judged (without a ``/proc`` of ours the tag is random: no one
judges them); ``pid`` and ``start`` (clock ticks after boot, hex) tell a reused pid from its
creator. Any other name is never removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from dataclasses import dataclass

PREFIX = "parcat_"  # every block's name starts with this, so leftovers can be found
NAMESPACE_MARK = "ns"

_NAME = re.compile(f"{PREFIX}{NAMESPACE_MARK}([0-9a-f]+)_([0-9]+)_([0-9a-f]+)_[0-9a-f]+")
_START_FIELD = 19
"""``starttime`` in ``/proc/<pid>/stat``, counted from the state (the field after ``comm``)."""


@dataclass(frozen=True)
class BlockCreator:
    """The process that made a block, as its name records it."""

    namespace: str
    pid: int
    start: str


def block_creator(name: str) -> BlockCreator | None:
    """Who made block ``name``; ``None`` when it is not a parcat block of this form."""
    match = _NAME.fullmatch(name)
    return BlockCreator(match[1], int(match[2]), match[3]) if match else None


def this_creator() -> BlockCreator:
    """How this process signs the blocks it makes (worked out once per process)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached.pid != pid:
        tag = _namespace_tag()
        start = _start_ticks("self") if tag is not None else None
        if tag is None or start is None:
            tag, start = secrets.token_hex(6), "0"
        _cached = BlockCreator(tag, pid, start)
    return _cached


_cached: BlockCreator | None = None


def new_block_name() -> str:
    """A fresh name for a block this process makes."""
    return f"{PREFIX}{signature()}_{secrets.token_hex(6)}"


def signature() -> str:
    """This process as block names record it, ``ns<namespace>_<pid>_<start>``: also the
    mark of other things it leaves behind (its temporary folder)."""
    me = this_creator()
    return f"{NAMESPACE_MARK}{me.namespace}_{me.pid}_{me.start}"


def signature_is_stale(mark: str) -> bool:
    """Whether :func:`signature` ``mark`` is of a process of our namespace that is gone."""
    return block_is_stale(f"{PREFIX}{mark}_0")


def block_is_stale(name: str) -> bool:
    """Whether block ``name`` was made in our PID namespace by a process that is gone
    (anything not provably gone is kept)."""
    creator = block_creator(name)
    if creator is None or creator.namespace != this_creator().namespace:
        return False
    return _gone(creator.pid, creator.start)


def remove_stale_blocks(folder: str = "/dev/shm") -> list[str]:
    """Unlink blocks whose creator is provably gone (e.g. a SIGKILLed run); their names."""
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in sorted(names):
        if name.startswith(PREFIX) and block_is_stale(name):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
                removed.append(name)
    return removed


def _gone(pid: int, start: str) -> bool:
    """Whether process ``pid`` (of our namespace) that started at ``start`` has ended."""
    if pid < 1:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: it exists
    except (OverflowError, OSError):
        return False
    fields = proc_stat_fields(str(pid))
    if fields is None or len(fields) <= _START_FIELD:
        return False  # exists, but /proc will not say which process it is: keep
    if fields[0] in (b"Z", b"X"):
        return True  # dead, not reaped yet
    return _start_hex(fields[_START_FIELD]) != start  # the pid now names another process


def _start_hex(ticks: bytes) -> str:
    return format(int(ticks), "x")


def _start_ticks(pid: str) -> str | None:
    fields = proc_stat_fields(pid)
    if fields is None or len(fields) <= _START_FIELD:
        return None
    return _start_hex(fields[_START_FIELD])


def proc_stat_fields(pid: str) -> list[bytes] | None:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _namespace_tag() -> str | None:
    """A tag of this process's PID and time namespaces; ``None`` if ``/proc`` is not ours."""
    if not _proc_is_ours():
        return None
    try:
        pid_ns = os.stat("/proc/self/ns/pid")
    except OSError:
        return None
    try:
        time_ns = os.stat("/proc/self/ns/time").st_ino
    except OSError:
        time_ns = 0  # before Linux 5.6: no time namespaces
    identity = f"{pid_ns.st_dev}:{pid_ns.st_ino}:{time_ns}".encode()
    return hashlib.blake2b(identity, digest_size=6).hexdigest()


def _proc_is_ours() -> bool:
    """Whether ``/proc`` numbers processes as our PID namespace does (``NSpid`` then has
    one entry)."""
    try:
        with open("/proc/self/status", "rb") as status:
            lines = status.read().splitlines()
        self_is_us = os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False
    for line in lines:
        if line.startswith(b"NSpid:"):
            return line.split()[1:] == [str(os.getpid()).encode()]
    return self_is_us  # before Linux 4.1 (no NSpid)


