"""Built-in policies respect an ``action_mask`` in the observation (PettingZoo classic's
``{"observation": ..., "action_mask": ...}``), so they never forfeit by an illegal move."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gymnasium import spaces

from parcat.core.errors import PolicyError
from parcat.policies.base import AgentSpec
from parcat.policies.builtin import MLPPolicy, NoopPolicy, RandomPolicy

N = 9
SPEC = AgentSpec(
    mission="board", agent_id="player_0", agent_index=0,
    observation_space=spaces.Dict({
        "observation": spaces.Box(0, 1, (3, 3, 2), dtype=np.int8),
        "action_mask": spaces.Box(0, 1, (N,), dtype=np.int8),
    }),
    action_space=spaces.Discrete(N),
)


def observations(count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(count):
        mask = (rng.random(N) < 0.3).astype(np.int8)
        mask[rng.integers(N)] = 1  # at least one legal move
        found.append({"observation": rng.integers(0, 2, (3, 3, 2)).astype(np.int8),
                      "action_mask": mask})
    return found


@pytest.mark.parametrize("make", [RandomPolicy, NoopPolicy, lambda s: MLPPolicy(s, width=16)])
def test_every_builtin_policy_plays_only_legal_moves(make: object) -> None:
    policy = make(SPEC)  # type: ignore[operator]
    policy.reset(3)
    obs = observations(500)
    actions = [policy.step(o) for o in obs]
    assert all(o["action_mask"][a] == 1 for o, a in zip(obs, actions, strict=True))
    policy.reset(3)
    assert policy.step_batch(obs[:50]) == actions[:50]


def test_random_draws_uniformly_among_legal_moves_and_repeats_per_seed() -> None:
    policy = RandomPolicy(SPEC)
    obs = {"observation": np.zeros((3, 3, 2), np.int8),
           "action_mask": np.array([0, 1, 0, 1, 0, 0, 0, 1, 0], np.int8)}
    policy.reset(7)
    first = [policy.step(obs) for _ in range(3000)]
    counts = np.bincount(first, minlength=N)
    assert set(np.flatnonzero(counts)) == {1, 3, 7}
    assert counts[[1, 3, 7]].min() > 850  # ~1000 each
    policy.reset(7)
    assert [policy.step(obs) for _ in range(3000)] == first


def test_noop_takes_its_neutral_action_where_legal_else_the_lowest_legal_one() -> None:
    policy = NoopPolicy(SPEC)
    legal_zero = {"observation": np.zeros((3, 3, 2), np.int8), "action_mask": np.ones(N, np.int8)}
    no_zero = {**legal_zero, "action_mask": np.array([0, 0, 1, 1, 0, 0, 0, 0, 0], np.int8)}
    assert policy.step(legal_zero) == 0
    assert policy.step(no_zero) == 2


def test_mlp_takes_its_best_legal_move() -> None:
    policy = MLPPolicy(SPEC, width=16)
    obs = observations(1)[0]
    obs["action_mask"][:] = 1
    best = policy.step(obs)
    obs["action_mask"][best] = 0
    second = policy.step(obs)
    assert second != best and obs["action_mask"][second] == 1


def test_a_mask_of_the_wrong_size_is_one_clear_error() -> None:
    obs = {"observation": np.zeros((3, 3, 2), np.int8), "action_mask": np.ones(4, np.int8)}
    message = "action_mask has 4 entries; the action space Discrete(9) has 9 actions"
    with pytest.raises(PolicyError, match=re.escape(message)):
        RandomPolicy(SPEC).step(obs)
