"""SeqSlot: consistent snapshots of one writer's values, read from another process."""

from __future__ import annotations

import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from parcat.ipc.process import Worker, become_worker
from parcat.ipc.seqlock import SeqSlot
from parcat.ipc.shm import ArrayBlock, Codec
from parcat.sim.slots import SimBlock

TIMEOUT_S = 60.0
"""Upper bound on any wait (never reached when things work)."""
BIG = Codec.for_space(spaces.Box(-1e9, 1e9, (257,), np.float64))
"""Two kilobytes: far too big to be copied in one instruction, so tears would show."""
SPECS: dict[str, tuple[tuple[int, ...], Any]] = {
    "meta": ((4,), np.int64),
    "data": (BIG.shape, BIG.dtype),
    "reads": ((1,), np.int64),  # snapshots the reader took after the first write
}
MIN_WRITES = 20_000
MIN_READS = 2_000


def make_slot(block: ArrayBlock) -> SeqSlot:
    return SeqSlot(block.arrays["meta"], block.arrays["data"], BIG)


def local_slot(codec: Codec, fields: int = 3) -> SeqSlot:
    return SeqSlot(np.zeros(fields + 1, np.int64), np.zeros(codec.shape, codec.dtype), codec)


def write_counters(conn: Connection, parent_pid: int, block_name: str) -> None:
    """Write value ``k`` (every element ``k``) with fields ``(k, 2k, -k)`` for k = 1, 2, ...

    Keeps writing until it has written ``MIN_WRITES`` values *and* the reader has taken
    ``MIN_READS`` snapshots, so that many reads overlap writes whatever the scheduler does.
    """
    become_worker(parent_pid)
    block = ArrayBlock(SPECS, name=block_name)
    try:
        slot, reads = make_slot(block), block.arrays["reads"]
        value = np.zeros(BIG.shape, BIG.dtype)
        k, end = 0, time.monotonic() + TIMEOUT_S
        while (k < MIN_WRITES or reads[0] < MIN_READS) and time.monotonic() < end:
            k += 1
            value.fill(k)
            slot.write(value, (k, 2 * k, -k))
        conn.send(("wrote", k))
    finally:
        block.close()
    conn.poll(TIMEOUT_S)


def test_a_fresh_slot_reads_as_sequence_zero_with_zero_value_and_fields() -> None:
    slot = local_slot(BIG)
    assert slot.seq == 0
    got = slot.read()
    assert got is not None
    seq, value, fields = got
    assert seq == 0 and not value.any() and fields.tolist() == [0, 0, 0]


def test_each_write_advances_the_sequence_by_two_and_reads_return_it() -> None:
    codec = Codec.for_space(spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32),
                                         "mode": spaces.Discrete(3)}))
    slot = local_slot(codec)
    for k in range(1, 4):
        slot.write({"pos": np.array([0.5, -0.25 * k], np.float32), "mode": k % 3}, (k, 7))
        assert slot.seq == 2 * k
        got = slot.read()
        assert got is not None
        seq, value, fields = got
        assert seq == 2 * k and value["mode"] == k % 3
        assert value["pos"].tolist() == [0.5, -0.25 * k]
        assert fields.tolist() == [k, 7, 0]  # a field not written keeps its old value


def test_a_read_is_a_private_copy() -> None:
    slot = local_slot(BIG)
    slot.write(np.ones(BIG.shape), (1, 2, 3))
    got = slot.read()
    assert got is not None
    _, value, fields = got
    value[:] = 5
    fields[:] = 5
    again = slot.read()
    assert again is not None
    assert (again[1] == 1).all() and again[2].tolist() == [1, 2, 3]


def test_a_write_left_half_done_reads_as_none() -> None:
    slot = local_slot(BIG)
    slot.write(np.full(BIG.shape, 4.0), (4, 8, -4))
    slot.meta[0] += 1  # the writer died between its two sequence updates
    assert slot.read(tries=200) is None
    assert slot.read(tries=1) is None


@pytest.mark.usefixtures("clean_machine")
def test_reads_during_another_process_writes_are_never_torn() -> None:
    block = ArrayBlock(SPECS)
    try:
        worker = Worker(write_counters, (block.name,), "test-seqlock-writer",
                        start_method="forkserver")
        try:
            slot, reads = make_slot(block), block.arrays["reads"]
            last, end = 0, time.monotonic() + TIMEOUT_S
            while not worker.poll() and time.monotonic() < end:
                got = slot.read()
                if got is None:
                    continue  # the writer was descheduled mid-write for all the tries: allowed
                seq, value, fields = got
                k = int(value[0])
                assert (value == k).all(), f"torn value: {np.unique(value)}"
                assert seq == 2 * k and fields.tolist() == [k, 2 * k, -k], (seq, k, fields)
                assert k >= last, "a read went back in time"
                last = k
                if k > 0:
                    reads[0] += 1
            kind, written = worker.recv(TIMEOUT_S)
            assert kind == "wrote" and written >= MIN_WRITES
            assert reads[0] >= MIN_READS
            final = slot.read()
            assert final is not None and final[0] == 2 * written and (final[1] == written).all()
        finally:
            worker.stop()
    finally:
        block.close()


@pytest.mark.usefixtures("clean_machine")
def test_a_sim_block_lays_out_one_obs_and_one_action_slot_per_agent() -> None:
    obs = [BIG, Codec.for_space(spaces.Box(0, 1, (3,), np.float32))]
    acts = [Codec.for_space(spaces.Discrete(4)), Codec.for_space(spaces.MultiDiscrete([2, 3]))]
    block = SimBlock(obs, acts)
    try:
        other = SimBlock(obs, acts, name=block.name)
        try:
            other.actions[1].write(np.array([1, 2]), (5,))
            other.obs[1].write(np.array([0.5, 0.25, 1.0], np.float32), (3, 0, 99))
            got = block.actions[1].read()
            assert got is not None and got[1].tolist() == [1, 2] and got[2][0] == 5
            got = block.obs[1].read()
            assert got is not None and got[1].tolist() == [0.5, 0.25, 1.0]
            assert not block.stopped
            other.stop()
            assert block.stopped
        finally:
            other.close()
        assert Path("/dev/shm", block.name).exists() or sys.platform != "linux"
    finally:
        name = block.name
        block.close()
    assert not Path("/dev/shm", name).exists()
    block.stop()  # after close: harmless
