"""The wire format of served policies: data, never code; float32 bit for bit."""

from __future__ import annotations

import io
import re
import sys

import numpy as np
import pytest
from gymnasium import spaces

from parcat.core.errors import PolicyError
from parcat.envs.missions import load_mission
from parcat.policies.builtin import MLPPolicy
from parcat.policies.remote import (
    RemotePolicy,
    decode_actions,
    decode_observations,
    encode_actions,
    encode_observations,
)


def test_float32_observations_cross_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    obs = [rng.standard_normal(103).astype(np.float32) for _ in range(5)]
    obs[0][:4] = [np.nan, -0.0, np.inf, np.finfo(np.float32).tiny / 8]  # NaN, sign, denormal
    back = decode_observations(encode_observations(obs))
    assert [o.dtype for o in back] == [np.float32] * 5
    assert all(a.tobytes() == b.tobytes() for a, b in zip(obs, back, strict=True))


def test_dict_observations_cross_key_by_key() -> None:
    obs = [{"observation": np.full((2, 3), i, np.int8), "action_mask": np.array([1, 0, i % 2])}
           for i in range(3)]
    back = decode_observations(encode_observations(obs))
    assert [sorted(o) for o in back] == [["action_mask", "observation"]] * 3
    assert all(np.array_equal(o["observation"], b["observation"]) and
               np.array_equal(o["action_mask"], b["action_mask"])
               for o, b in zip(obs, back, strict=True))


def test_a_pickled_body_is_refused_unread() -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array([object()], dtype=object), allow_pickle=True)  # a pickle inside
    with pytest.raises(ValueError, match=r"body is not an \.npy or \.npz of stacked"):
        decode_observations(buffer.getvalue())


@pytest.mark.parametrize("body", [b"", b"garbage", b"PK\x03\x04broken zip"])
def test_a_malformed_body_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError, match=r"body is not an \.npy or \.npz of stacked"):
        decode_observations(body)


def test_actions_come_back_as_the_policy_returned_them() -> None:
    assert decode_actions(encode_actions([3, 0, 4]), spaces.Discrete(5)) == [3, 0, 4]
    assert type(decode_actions(encode_actions([3]), spaces.Discrete(5))[0]) is int
    box = [np.array([0.25, -1.5], np.float32), np.array([1e-40, 3.0], np.float32)]
    back = decode_actions(encode_actions(box), spaces.Box(-2, 2, (2,), np.float32))
    assert all(a.dtype == np.float32 and a.tobytes() == b.tobytes()
               for a, b in zip(box, back, strict=True))


def test_mlp_batched_equals_one_at_a_time_on_harvest() -> None:
    """What makes a served batch give the in-process results: a batch of any size acts as
    one observation at a time, bit for bit."""
    agent = load_mission("harvest").agents()[0]
    policy = MLPPolicy(agent, width=256)
    rng = np.random.default_rng(1)
    obs = [agent.observation_space.sample().astype(np.float32) * rng.random()
           for _ in range(33)]
    alone = np.stack([policy.forward(o[None, :])[0] for o in obs])
    together = policy.forward(np.stack(obs))
    assert alone.tobytes() == together.tobytes()
    assert policy.step_batch(obs) == [policy.step(o) for o in obs]


def test_without_urllib3_a_served_policy_is_one_policy_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "urllib3", None)  # what `import urllib3` finds uninstalled
    agent = load_mission("harvest").agents()[0]
    with pytest.raises(PolicyError, match=re.escape(
            "policy 'http://127.0.0.1:1': a served policy needs urllib3: pip install "
            "'parcat[serve]'")):
        RemotePolicy(agent, "http://127.0.0.1:1")


def test_an_npz_that_inflates_past_the_cap_is_refused_unread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A small body must not fill the server's memory: the .npz's declared sizes are
    checked before any member is inflated."""
    import zipfile

    from parcat.policies import remote

    monkeypatch.setattr(remote, "MAX_INFLATED_BYTES", 2**20)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("obs.x.npy", b"\0" * (remote.MAX_INFLATED_BYTES + 1))
    assert len(buffer.getvalue()) < 2**12  # zeros deflate ~1000:1
    with pytest.raises(ValueError, match=r"not an \.npy or \.npz"):
        remote.decode_observations(buffer.getvalue())
