"""Block names and stale-block removal: only blocks of our PID namespace whose creator is
provably gone are removed, on real shared memory and (where ``unshare`` works) a real
second PID namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from parcat.ipc.shm import ArrayBlock, remove_stale_blocks
from parcat.ipc.shm_names import PREFIX, block_creator, this_creator

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /dev/shm and /proc")

SHM = Path("/dev/shm")
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0
"""Upper bound on any wait for a child process (never reached when things work)."""


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=TIMEOUT_S)
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    return proc.pid


def start_of(pid: int | str) -> str:
    """A process's start time as block names record it (``/proc/<pid>/stat`` field 22)."""
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return format(int(fields[19]), "x")


def name(namespace: str, pid: int, start: str, token: str = "0123456789ab") -> str:
    return f"{PREFIX}ns{namespace}_{pid}_{start}_{token}"


@pytest.fixture
def zombie() -> Iterator[int]:
    """A child process that has exited and is not reaped yet."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # wait, but leave it a zombie
    yield proc.pid
    proc.wait(timeout=TIMEOUT_S)


def test_a_block_name_records_its_creator_s_namespace_pid_and_start_time() -> None:
    block = ArrayBlock({"x": ((3,), np.int64)})
    try:
        creator = block_creator(block.name)
        assert creator == this_creator()
        assert creator.pid == os.getpid() and creator.start == start_of("self")
        assert len(creator.namespace) == 12
        assert len(block.name) <= 60  # NAME_MAX is 255
        assert (SHM / block.name).exists()
    finally:
        block.close()


def test_only_our_namespace_s_blocks_whose_creator_is_gone_are_removed(zombie: int) -> None:
    me = this_creator()
    other = format(int(me.namespace, 16) ^ 1, "012x")
    dead = dead_pid()
    removable = {
        name(me.namespace, dead, "1"): "a dead creator",
        name(me.namespace, os.getpid(), format(int(me.start, 16) + 1, "x")): "a reused pid",
        name(me.namespace, zombie, start_of(zombie)): "a zombie creator",
    }
    kept = {
        name(other, dead, "1"): "another namespace, its pid dead here",
        name(other, os.getpid(), "1"): "another namespace, its pid alive here",
        name(me.namespace, os.getpid(), me.start): "a live creator",
    }
    for block in [*removable, *kept]:
        (SHM / block).write_bytes(b"\0" * 64)
    try:
        removed = remove_stale_blocks()
        # another test run may remove a stale block first; none of the kept ones, ever
        assert set(removed) & {*removable, *kept} <= set(removable)
        assert {b: why for b, why in removable.items() if (SHM / b).exists()} == {}
        assert {b: why for b, why in kept.items() if not (SHM / b).exists()} == {}
    finally:
        for block in [*removable, *kept]:
            (SHM / block).unlink(missing_ok=True)


def test_names_in_an_older_or_foreign_form_are_kept(tmp_path: Path) -> None:
    me = this_creator()
    dead = dead_pid()
    stale = name(me.namespace, dead, "1")
    foreign = [
        f"{PREFIX}{dead}_0123456789ab",  # parcat's older form: its namespace is unknown
        name(me.namespace, dead, "1z"), name(me.namespace, dead, "1", token=""),
        f"{PREFIX}ns{me.namespace}_{dead}_1", f"{PREFIX}ns{me.namespace}_x_1_ab",
        "parcatx_1_a", f"{PREFIX}notapid_a", "other_1_a", PREFIX,
    ]
    for block in (stale, *foreign):
        (tmp_path / block).write_bytes(b"\0" * 64)
    assert remove_stale_blocks(folder=str(tmp_path)) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(foreign)
    assert remove_stale_blocks(folder=str(tmp_path)) == []


def test_stale_block_removal_in_a_missing_folder_finds_nothing(tmp_path: Path) -> None:
    assert remove_stale_blocks(folder=str(tmp_path / "absent")) == []


# -- a real second PID namespace ------------------------------------------------------------

NAMESPACE_INIT = """
import subprocess, sys
pid = int(sys.argv[1])
if pid:  # the next process this namespace starts gets this pid
    with open("/proc/sys/kernel/ns_last_pid", "w") as last:
        last.write(str(pid - 1))
sys.exit(subprocess.call([sys.executable, "-c", sys.argv[2]]))
"""
MAKE_BLOCK = """
import os, sys
import numpy as np
from parcat.ipc.shm import ArrayBlock
block = ArrayBlock({"x": ((4,), np.int64)})
block.arrays["x"][:] = 7
print(block.name, os.getpid(), flush=True)
sys.stdin.read()  # until the test is done with it
block.close()
"""


def unshare_command(own_proc: bool) -> list[str]:
    """``unshare`` into a new PID (and user) namespace, or skip saying why it cannot."""
    command = ["unshare", "--map-root-user", "--pid", "--fork",
               *(["--mount-proc"] if own_proc else [])]
    if shutil.which("unshare") is None:
        pytest.skip("no unshare command: cannot start a second PID namespace")
    probe = subprocess.run([*command, "true"], capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    if probe.returncode != 0:
        reason = f"cannot start a second PID namespace: {probe.stderr.strip()}"
        print(reason)
        pytest.skip(reason)
    return command


@pytest.mark.parametrize("own_proc", [True, False], ids=["its-own-proc", "our-proc"])
def test_a_live_block_of_another_pid_namespace_is_never_removed(own_proc: bool) -> None:
    """A run in a container sharing /dev/shm: its creator's pid is dead here, yet its
    block lives. With our /proc mounted (its pids are not ours) the name's tag is random."""
    command = unshare_command(own_proc)
    pid = dead_pid() if own_proc else 0
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([*command, sys.executable, "-c", NAMESPACE_INIT, str(pid),
                             MAKE_BLOCK], env=env, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline().split()
        assert len(line) == 2, proc.communicate(timeout=TIMEOUT_S)[1]
        block, creator_pid = line[0], int(line[1])
        creator = block_creator(block)
        assert creator is not None and creator.pid == creator_pid
        assert creator.namespace != this_creator().namespace
        if own_proc:
            assert creator_pid == pid
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)  # that pid is dead in our namespace
        assert block not in remove_stale_blocks()
        attached = ArrayBlock({"x": ((4,), np.int64)}, name=block)
        try:
            assert attached.arrays["x"].tolist() == [7, 7, 7, 7]
        finally:
            attached.close()
    finally:
        proc.stdin.close()
        proc.wait(timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert not (SHM / block).exists()  # its creator unlinked it


def test_temp_folders_of_gone_processes_in_our_namespace_go_others_stay(tmp_path: Path) -> None:
    me, gone = this_creator(), dead_pid()
    ours_dead = tmp_path / f"parcat-mp-ns{me.namespace}_{gone}_{me.start}-abc"
    other_ns = tmp_path / f"parcat-mp-ns{'f' * 12 if me.namespace != 'f' * 12 else 'e' * 12}" \
        f"_{gone}_{me.start}-abc"
    ours_alive = tmp_path / f"parcat-mp-ns{me.namespace}_{me.pid}_{me.start}-abc"
    old_form = tmp_path / f"parcat-mp-{gone}-abc"
    for folder in (ours_dead, other_ns, ours_alive, old_form):
        folder.mkdir()
    code = "from parcat.ipc.start import own_temp_dir; own_temp_dir()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT_S,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(tmp_path)})
    assert not ours_dead.exists()
    assert other_ns.exists() and ours_alive.exists() and old_form.exists()
