"""Tests of the replay buffer: ring order, seeded sampling and saved state."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parcat.core.errors import CheckpointError, ConfigError
from parcat.train.buffer import FIELDS, ReplayBuffer, transition_bytes
from parcat.train.learner import Transitions

OBS_DIM = 3


def _transitions(start: int, count: int) -> Transitions:
    """Transitions numbered start .. start + count - 1; every field encodes the number."""
    ids = np.arange(start, start + count)
    obs = np.repeat(ids[:, None], OBS_DIM, axis=1).astype(np.float32)
    return Transitions(obs, ids, ids * 0.5, obs + 1000, ids % 2 == 0)


def _ids(buffer: ReplayBuffer) -> list[int]:
    """The transition numbers in storage order."""
    return [int(a) for a in buffer.state_dict()["actions"]]


def _same_state(a: ReplayBuffer, b: ReplayBuffer) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)


def test_add_and_sample_give_typed_arrays() -> None:
    buffer = ReplayBuffer(100, OBS_DIM, seed=0)
    buffer.add_batch(_transitions(0, 10))
    batch = buffer.sample(32)
    assert len(buffer) == 10
    assert set(batch) == set(FIELDS)
    assert batch["obs"].shape == (32, OBS_DIM) and batch["obs"].dtype == np.float32
    assert batch["next_obs"].dtype == np.float32
    assert batch["actions"].dtype == np.int64
    assert batch["rewards"].dtype == np.float32
    assert batch["terminated"].dtype == np.bool_
    # the rows stay whole transitions
    np.testing.assert_array_equal(batch["obs"][:, 0], batch["actions"])
    np.testing.assert_array_equal(batch["next_obs"][:, 0], batch["actions"] + 1000)
    np.testing.assert_array_equal(batch["terminated"], batch["actions"] % 2 == 0)


def test_ring_wraps_around_and_overwrites_the_oldest() -> None:
    buffer = ReplayBuffer(5, OBS_DIM, seed=0)
    buffer.add_batch(_transitions(0, 3))
    buffer.add_batch(_transitions(3, 4))
    assert len(buffer) == 5
    assert _ids(buffer) == [5, 6, 2, 3, 4]
    assert int(buffer.state_dict()["pos"]) == 2
    sampled = set(buffer.sample(200)["actions"].tolist())
    assert sampled == {2, 3, 4, 5, 6}


def test_a_batch_larger_than_the_capacity_keeps_its_last_rows() -> None:
    buffer = ReplayBuffer(5, OBS_DIM, seed=0)
    buffer.add_batch(_transitions(0, 12))
    assert _ids(buffer) == [10, 11, 7, 8, 9]


@given(
    capacity=st.integers(1, 9),
    sizes=st.lists(st.integers(0, 12), max_size=6),
)
def test_any_split_of_a_stream_gives_the_same_ring(capacity: int, sizes: list[int]) -> None:
    chunked = ReplayBuffer(capacity, OBS_DIM, seed=1)
    one_by_one = ReplayBuffer(capacity, OBS_DIM, seed=1)
    start = 0
    for size in sizes:
        chunked.add_batch(_transitions(start, size))
        start += size
    for i in range(start):
        one_by_one.add_batch(_transitions(i, 1))
    assert len(chunked) == min(capacity, start)
    assert _same_state(chunked, one_by_one)


def test_sampling_is_seeded() -> None:
    a, b, c = (ReplayBuffer(50, OBS_DIM, seed=s) for s in (7, 7, 8))
    for buffer in (a, b, c):
        buffer.add_batch(_transitions(0, 50))
    draws = [buffer.sample(16)["actions"] for buffer in (a, b, c)]
    np.testing.assert_array_equal(draws[0], draws[1])
    assert not np.array_equal(draws[0], draws[2])


def test_state_dict_round_trip_through_npz(tmp_path: Path) -> None:
    buffer = ReplayBuffer(6, OBS_DIM, seed=3)
    buffer.add_batch(_transitions(0, 9))
    buffer.sample(5)
    arrays: dict[str, Any] = buffer.state_dict()
    np.savez(tmp_path / "buffer.npz", **arrays)
    restored = ReplayBuffer(6, OBS_DIM, seed=99)
    with np.load(tmp_path / "buffer.npz") as data:
        restored.load_state_dict({key: data[key] for key in data.files})
    assert _same_state(buffer, restored)
    for b in (buffer, restored):
        b.add_batch(_transitions(9, 2))
    assert _same_state(buffer, restored)
    np.testing.assert_array_equal(buffer.sample(10)["obs"], restored.sample(10)["obs"])


def test_pickle_round_trip_keeps_contents_and_generator() -> None:
    buffer = ReplayBuffer(4, OBS_DIM, seed=0)
    buffer.add_batch(_transitions(0, 3))
    copy = pickle.loads(pickle.dumps(buffer))
    assert _same_state(buffer, copy)
    copy.add_batch(_transitions(3, 1))  # the copy goes on taking transitions
    assert len(copy) == 4


def test_memory_is_reported_per_transition() -> None:
    buffer = ReplayBuffer(1_000_000, (2, 2), seed=0)
    assert buffer.nbytes == 0
    per_transition = transition_bytes(4)
    assert per_transition == 2 * 4 * 4 + 8 + 4 + 1
    buffer.add_batch(Transitions(
        np.zeros((10, 2, 2)), np.zeros(10), np.zeros(10), np.zeros((10, 2, 2)), np.zeros(10)
    ))
    # storage grows on demand rather than allocating the capacity up front
    assert 10 * per_transition <= buffer.nbytes < 10_000 * per_transition


def test_loading_another_capacity_fails() -> None:
    saved = ReplayBuffer(6, OBS_DIM, seed=0).state_dict()
    message = (
        "array 'capacity' is 6, but this buffer holds 7; "
        "build the learner with the buffer size it was saved with"
    )
    with pytest.raises(CheckpointError, match=re.escape(message)):
        ReplayBuffer(7, OBS_DIM, seed=0).load_state_dict(saved)


def test_loading_a_missing_key_fails() -> None:
    saved = ReplayBuffer(6, OBS_DIM, seed=0).state_dict()
    del saved["rewards"]
    message = "array 'rewards' is missing from the learner state"
    with pytest.raises(CheckpointError, match=re.escape(message)):
        ReplayBuffer(6, OBS_DIM, seed=0).load_state_dict(saved)


def test_mismatched_batch_is_rejected() -> None:
    obs, actions, rewards, next_obs, terminated, *_ = _transitions(0, 4)
    message = "replay buffer: 'next_obs' expected shape (4, 3) (from 4 actions), got (3, 3)"
    with pytest.raises(ValueError, match=re.escape(message)):
        ReplayBuffer(8, OBS_DIM).add_batch(
            Transitions(obs, actions, rewards, next_obs[:3], terminated))


def test_bad_capacity_and_empty_sample_are_rejected() -> None:
    message = "replay buffer: 'capacity' must be an integer >= 1, got 0"
    with pytest.raises(ConfigError, match=re.escape(message)):
        ReplayBuffer(0, OBS_DIM)
    message = "cannot sample from an empty replay buffer; add transitions first"
    with pytest.raises(ValueError, match=re.escape(message)):
        ReplayBuffer(4, OBS_DIM).sample(1)
