"""Codec, ArrayBlock and SlotBlock, on real shared memory."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given
from hypothesis import strategies as st

from parcat.ipc.layout import HEADER_SLOTS
from parcat.ipc.process import Worker, become_worker
from parcat.ipc.shm import ALIGN, ArrayBlock, Codec, SlotBlock
from parcat.ipc.shm_names import block_creator, this_creator

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /dev/shm")

SHM = Path("/dev/shm")
TIMEOUT_S = 60.0
"""Upper bound on any wait for a child process (never reached when things work)."""
SIGINTS = 2000
"""Ctrl-Cs sent into a loop of block lives (hundreds land in its finalizers' window)."""

BOX_SPACES = [
    spaces.Box(-100, 100, (3,), np.int8),
    spaces.Box(-1.0, 1.0, (2, 5), np.float32),
    spaces.Box(-1e300, 1e300, (7,), np.float64),
    spaces.Box(0, 255, (4, 4, 3), np.uint8),
    spaces.Box(-(2**62), 2**62, (2,), np.int64),
    spaces.Box(0, 1, (6,), np.bool_),
    spaces.Box(-5.0, 5.0, (), np.float32),
]
COMPOSITE_SPACES = [
    spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "mode": spaces.Discrete(4)}),
    spaces.Tuple((spaces.Discrete(3, start=-1), spaces.Box(0, 9, (2, 2), np.int32))),
    spaces.MultiDiscrete([3, 5, 2]),
    spaces.MultiBinary(5),
    spaces.Dict({"inner": spaces.Tuple((spaces.Discrete(2), spaces.MultiDiscrete([4, 4])))}),
]
CODECS = [(Codec.for_space(spaces.Box(-1.0, 1.0, (3,), np.float32)),
           Codec.for_space(spaces.Discrete(5))),
          (Codec.for_space(COMPOSITE_SPACES[0]),
           Codec.for_space(spaces.Box(-2.0, 2.0, (2,), np.float64)))]


def same(a: Any, b: Any) -> bool:
    """Exact equality of (possibly nested) space values, dtype and shape included."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and bool(np.array_equal(a, b)))
    return type(a) is type(b) and a == b


def round_trip(space: spaces.Space[Any], value: Any) -> tuple[Codec, np.ndarray, Any]:
    codec = Codec.for_space(space)
    slot = np.zeros(codec.shape, codec.dtype)
    codec.write(slot, value)
    return codec, slot, codec.read(slot)


def address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


# -- Codec ----------------------------------------------------------------------------------


@pytest.mark.parametrize("space", BOX_SPACES, ids=str)
def test_box_values_round_trip_exactly_as_raw_arrays(space: spaces.Box) -> None:
    value = np.asarray(space.sample())
    codec, slot, back = round_trip(space, value)
    assert codec.kind == "box" and codec.shape == space.shape and codec.dtype == space.dtype
    assert codec.nbytes == value.nbytes == slot.nbytes
    assert same(back, value)


@given(dtype=st.sampled_from([np.int8, np.uint8, np.int16, np.int32, np.int64, np.float32,
                              np.float64, np.bool_]),
       shape=st.lists(st.integers(1, 4), max_size=3).map(tuple),
       seed=st.integers(0, 2**32 - 1))
def test_any_box_round_trips_exactly(dtype: Any, shape: tuple[int, ...], seed: int) -> None:
    if dtype is np.bool_:
        space = spaces.Box(0, 1, shape, dtype, seed=seed)
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        space = spaces.Box(int(info.min), int(info.max), shape, dtype, seed=seed)
    else:
        space = spaces.Box(-1e30, 1e30, shape, dtype, seed=seed)
    value = np.asarray(space.sample())  # a shape-() integer Box samples a numpy scalar
    codec, _, back = round_trip(space, value)
    assert codec.nbytes == value.nbytes
    assert same(back, value)


@pytest.mark.parametrize("start", [0, -3, 7])
def test_discrete_values_round_trip_as_one_int64(start: int) -> None:
    space = spaces.Discrete(5, start=start)
    for value in range(start, start + 5):
        codec, slot, back = round_trip(space, value)
        assert (codec.kind, codec.shape, codec.dtype, codec.nbytes) == ("discrete", (1,),
                                                                        np.int64, 8)
        assert back == value and type(back) is int and slot[0] == value
    _, _, back = round_trip(space, np.int64(start + 2))  # what a numpy policy returns
    assert back == start + 2 and type(back) is int


# the flat slot's dtype: int64 when every part is an integer (exact past 2**53), else float64
FLAT_DTYPES = [np.float64, np.int64, np.int64, np.int64, np.int64]


@pytest.mark.parametrize(("space", "dtype"), list(zip(COMPOSITE_SPACES, FLAT_DTYPES, strict=True)),
                         ids=str)
def test_composite_values_round_trip_exactly_through_flatten(space: spaces.Space[Any],
                                                             dtype: Any) -> None:
    space.seed(3)
    for _ in range(20):
        value = space.sample()
        codec, _, back = round_trip(space, value)
        assert codec.kind == "flat" and codec.dtype == dtype
        assert codec.shape == (spaces.flatdim(space),)
        assert codec.nbytes == spaces.flatdim(space) * 8
        assert same(back, value), (value, back)


def test_large_integers_inside_a_dict_round_trip_exactly() -> None:
    space = spaces.Dict({"id": spaces.Box(-(2**62), 2**62, (2,), np.int64)})
    value = {"id": np.array([2**53 + 1, -(2**60) - 1], np.int64)}
    _, _, back = round_trip(space, value)
    assert same(back, value)


@pytest.mark.parametrize("space", [BOX_SPACES[1], COMPOSITE_SPACES[0], COMPOSITE_SPACES[2]],
                         ids=str)
def test_reads_are_private_copies(space: spaces.Space[Any]) -> None:
    space.seed(1)
    codec, slot, back = round_trip(space, space.sample())
    before = slot.copy()
    if isinstance(back, dict):
        back["pos"][...] = 0.5
    else:
        back[...] = 1
    assert np.array_equal(slot, before)
    assert same(codec.read(slot), codec.read(before))


def test_discrete_reads_are_plain_ints_not_views() -> None:
    _, slot, back = round_trip(spaces.Discrete(4), 3)
    slot[0] = 1
    assert back == 3


# -- ArrayBlock -----------------------------------------------------------------------------

ODD_SPECS: dict[str, tuple[tuple[int, ...], Any]] = {
    "flags": ((3,), np.uint8),
    "scalar": ((), np.float32),
    "grid": ((7, 3), np.int16),
    "wide": ((5,), np.float64),
    "bools": ((65,), np.bool_),
    "last": ((1,), np.int64),
}


@pytest.mark.usefixtures("clean_machine")
def test_every_array_is_64_byte_aligned_and_none_overlap() -> None:
    block = ArrayBlock(ODD_SPECS)
    try:
        base = address(block.header)
        assert base % ALIGN == 0 and block.header.shape == (HEADER_SLOTS,)
        assert block.header.dtype == np.int64 and not block.header.any()
        spans = [(0, block.header.nbytes)]
        for key, (shape, dtype) in ODD_SPECS.items():
            array = block.arrays[key]
            assert array.shape == shape and array.dtype == dtype
            assert address(array) % ALIGN == 0, key
            start = address(array) - base
            spans.append((start, start + array.nbytes))
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start
        assert spans[-1][1] <= block.size
    finally:
        block.close()


@pytest.mark.usefixtures("clean_machine")
def test_a_block_attached_by_name_shares_memory_and_header() -> None:
    first = ArrayBlock(ODD_SPECS)
    try:
        first.header[3] = 42
        first.arrays["grid"][2, 1] = -7
        second = ArrayBlock(ODD_SPECS, name=first.name)
        try:
            assert not second.owner and second.name == first.name
            assert second.header[3] == 42  # attaching does not reset the header
            assert second.arrays["grid"][2, 1] == -7
            second.arrays["wide"][:] = np.arange(5.0)
            second.header[4] = 9
            assert np.array_equal(first.arrays["wide"], np.arange(5.0))
            assert first.header[4] == 9
        finally:
            second.close()
        assert (SHM / first.name).exists(), "the attacher's close unlinked the block"
        assert first.arrays["grid"][2, 1] == -7  # the creator's views still work
    finally:
        first.close()


@pytest.mark.usefixtures("clean_machine")
def test_the_creator_unlinks_on_close_and_names_it_after_itself() -> None:
    block = ArrayBlock(ODD_SPECS)
    name = block.name
    assert block_creator(name) == this_creator()
    assert (SHM / name).exists()
    block.close()
    assert not (SHM / name).exists()
    assert block.arrays == {} and block.header.size == 0
    block.close()  # a second close is harmless
    with pytest.raises(FileNotFoundError):
        ArrayBlock(ODD_SPECS, name=name)


def double_in_child(conn: Connection, parent_pid: int, name: str) -> None:
    """Attach to ``name``, report what the parent wrote, write back, close (no unlink)."""
    become_worker(parent_pid)
    block = ArrayBlock(ODD_SPECS, name=name)
    try:
        conn.send(("seen", block.arrays["wide"].tolist(), int(block.header[5])))
        block.arrays["wide"] *= 2
        block.arrays["flags"][:] = [1, 2, 3]
        block.header[6] = os.getpid()
    finally:
        block.close()
    conn.send(("closed",))
    conn.poll(TIMEOUT_S)  # wait for the parent's "close" so it can check the block first


@pytest.mark.usefixtures("clean_machine")
def test_a_child_process_sees_and_makes_writes_and_its_close_does_not_unlink() -> None:
    block = ArrayBlock(ODD_SPECS)
    try:
        worker = Worker(double_in_child, (block.name,), "test-shm-child",
                        start_method="forkserver")
        try:
            block.arrays["wide"][:] = [1.5, 2.5, 3.5, 4.5, 5.5]
            block.header[5] = 1234
            # the child attaches after Worker() returns, so it sees these writes
            assert worker.recv(TIMEOUT_S) == ("seen", [1.5, 2.5, 3.5, 4.5, 5.5], 1234)
            assert worker.recv(TIMEOUT_S) == ("closed",)
            assert np.array_equal(block.arrays["wide"], [3.0, 5.0, 7.0, 9.0, 11.0])
            assert block.arrays["flags"].tolist() == [1, 2, 3]
            assert block.header[6] == worker.pid
            assert (SHM / block.name).exists()
        finally:
            worker.stop()
    finally:
        block.close()
    assert worker.process.exitcode is not None
    assert not (SHM / block.name).exists()


# -- SlotBlock ------------------------------------------------------------------------------


def act_in_child(conn: Connection, parent_pid: int, name: str) -> None:
    """Read each live agent's observation and write an action derived from it."""
    become_worker(parent_pid)
    block = SlotBlock(CODECS, name=name, create=False)
    try:
        (obs0_codec, act0_codec), (obs1_codec, act1_codec) = block.codecs
        a0, a1 = block.agents
        if a0.live[0]:
            act0_codec.write(a0.action, int(np.argmax(obs0_codec.read(a0.obs))))
        if a1.live[0]:
            obs = obs1_codec.read(a1.obs)
            act1_codec.write(a1.action, np.array([obs["mode"], -obs["mode"]], np.float64))
    finally:
        block.close()
    conn.send(("acted",))
    conn.poll(TIMEOUT_S)


@pytest.mark.usefixtures("clean_machine")
def test_slot_blocks_carry_observations_and_actions_between_processes() -> None:
    block = SlotBlock(CODECS)
    name = block.name
    try:
        worker = Worker(act_in_child, (block.name,), "test-slots-child",
                        start_method="forkserver")
        try:
            assert len(block.agents) == 2 and block.header.shape == (HEADER_SLOTS,)
            (obs0, _), (obs1, _) = CODECS
            obs0.write(block.agents[0].obs, np.array([0.1, 0.9, -0.3], np.float32))
            obs1.write(block.agents[1].obs, {"pos": np.zeros(2, np.float32), "mode": 3})
            block.agents[0].live[0] = 1
            block.agents[1].live[0] = 1
            assert worker.recv(TIMEOUT_S) == ("acted",)
            assert CODECS[0][1].read(block.agents[0].action) == 1
            assert same(CODECS[1][1].read(block.agents[1].action), np.array([3.0, -3.0]))
            assert (SHM / block.name).exists()
        finally:
            worker.stop()
    finally:
        block.close()
    assert block.agents == [] and not (SHM / name).exists()


@pytest.mark.usefixtures("clean_machine")
def test_slot_block_layout_matches_the_codecs() -> None:
    block = SlotBlock(CODECS)
    try:
        for slots, (obs_codec, act_codec) in zip(block.agents, CODECS, strict=True):
            assert (slots.obs.shape, slots.obs.dtype) == (obs_codec.shape, obs_codec.dtype)
            assert (slots.action.shape, slots.action.dtype) == (act_codec.shape,
                                                                act_codec.dtype)
            assert slots.live.shape == (1,) and slots.live[0] == 0
            for array in (slots.live, slots.obs, slots.action):
                assert address(array) % ALIGN == 0
    finally:
        block.close()



# -- Ctrl-C at any moment of a block's life -------------------------------------------------

BLOCK_CYCLES = """\
import select
import signal
import sys

# Python's own Ctrl-C, whatever this process inherited (a mask or SIG_IGN survive exec)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
from parcat.ipc.shm import ArrayBlock, unlink_own_blocks

specs = {"a": ((16,), np.int64)}
counts = {"cycles": 0, "interrupts": 0}

def cycles():
    print("ready", flush=True)  # again after a Ctrl-C between two tries
    while not select.select([sys.stdin], [], [], 0)[0]:  # until told to stop
        try:
            block = ArrayBlock(specs)
            try:
                ArrayBlock(specs, name=block.name).close()
            finally:
                block.close()
            del block  # the last reference: a SharedMemory left to its finalizer runs it here
            counts["cycles"] += 1
        except KeyboardInterrupt:
            counts["interrupts"] += 1

while True:  # a Ctrl-C between two tries lands here
    try:
        cycles()
        break
    except KeyboardInterrupt:
        counts["interrupts"] += 1
unlink_own_blocks()  # a Ctrl-C between a create and its try is this script's, not parcat's
print(counts["cycles"], counts["interrupts"], flush=True)
"""


@pytest.mark.usefixtures("clean_machine")
def test_ctrl_c_at_any_moment_of_a_blocks_life_is_never_lost_in_a_finalizer() -> None:
    """A library user's Ctrl-C (Python's own handler and unraisable hook, no CLI) landing
    anywhere while blocks are created, attached, closed and dropped: it always surfaces as a
    KeyboardInterrupt, never as an ``Exception ignored in: SharedMemory.__del__`` line."""
    # one thread, as a plain script has: a Ctrl-C the main thread holds back cannot go to
    # another thread (numpy's BLAS pool), whose handler Python would run in the main one
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", BLOCK_CYCLES], text=True, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for _ in range(SIGINTS):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.001)
        time.sleep(0.2)  # the last one lands while the cycles still run
        out, err = proc.communicate("", timeout=TIMEOUT_S)
    finally:
        proc.kill()
        proc.wait()
    assert "SharedMemory.__del__" not in err, err
    if proc.returncode != 0:
        # a Ctrl-C between the script's own tries (a loop head, its last lines, Python's
        # exit) ends it as Ctrl-C ends any script; never in a block's finalizer
        assert "KeyboardInterrupt" in err, err
        return
    cycles, interrupts = map(int, out.splitlines()[-1].split())
    assert cycles > 0 and interrupts > 0, (out, err)
