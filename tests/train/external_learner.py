"""A learner written outside parcat, as a user would: one-step REINFORCE, linear softmax.

Selected with ``--learner tests.train.external_learner:OneStepReinforce`` (or the train
YAML's ``learner: {class: ...}``); it uses nothing of parcat's but its error class, and
its evaluation policy :class:`LinearPolicy` is its own.

Each action is credited with its own reward, less the batch's mean (a contextual bandit's
policy gradient): enough for goal_tasks' direction tasks, whose every step pays the
progress made along the goal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np

from parcat.core.errors import ConfigError

OPTIONS = {"lr": 0.5}


class OneStepReinforce:
    """A linear softmax policy trained on each transition's own reward."""

    action_spaces = (gymnasium.spaces.Discrete,)
    policy = "tests.train.external_learner:LinearPolicy"

    def __init__(self, observation_space: gymnasium.spaces.Box,
                 action_space: gymnasium.spaces.Discrete, options: Mapping[str, Any],
                 seed: int) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"one-step reinforce: unknown option '{unknown[0]}'; "
                              f"known: {', '.join(OPTIONS)}")
        self.options = {**OPTIONS, **options}
        obs_dim, num_actions = int(np.prod(observation_space.shape)), int(action_space.n)
        self.w = np.zeros((obs_dim, num_actions))
        self.b = np.zeros(num_actions)
        self.rng = np.random.default_rng(seed)
        self.num_observed = 0
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"one-step reinforce: unknown option '{unknown[0]}'")

    @property
    def policy_kwargs(self) -> dict[str, Any]:
        return {}

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.options)

    def act(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        probs = _softmax(np.asarray(obs_batch, np.float64) @ self.w + self.b)
        if not explore:
            return probs.argmax(axis=1).astype(np.int64)
        draws = self.rng.random(len(probs))[:, None]
        return np.minimum((probs.cumsum(axis=1) < draws).sum(axis=1),
                          probs.shape[1] - 1).astype(np.int64)

    def observe(self, batch: Any) -> None:
        self.pending.append((np.asarray(batch.obs, np.float64),
                             np.asarray(batch.actions, np.int64),
                             np.asarray(batch.rewards, np.float64)))
        self.num_observed += len(batch.rewards)

    def train_step(self) -> dict[str, float]:
        if not self.pending:
            return {}
        obs, actions, rewards = (np.concatenate(c) for c in zip(*self.pending, strict=True))
        self.pending = []
        advantage = rewards - rewards.mean()
        probs = _softmax(obs @ self.w + self.b)
        d_logits = -probs
        d_logits[np.arange(len(actions)), actions] += 1.0
        d_logits *= advantage[:, None] / len(actions)
        self.w += self.options["lr"] * obs.T @ d_logits
        self.b += self.options["lr"] * d_logits.sum(axis=0)
        return {"loss": float(-(advantage * np.log(
            probs[np.arange(len(actions)), actions] + 1e-12)).mean())}

    def state_dict(self) -> dict[str, np.ndarray]:
        rng = json.dumps(self.rng.bit_generator.state).encode()
        pending = self.pending or [(np.zeros((0, self.w.shape[0])), np.zeros(0, np.int64),
                                    np.zeros(0))]
        obs, actions, rewards = (np.concatenate(c) for c in zip(*pending, strict=True))
        return {"w": self.w.copy(), "b": self.b.copy(),
                "rng": np.frombuffer(rng, np.uint8).copy(),
                "num_observed": np.array(self.num_observed),
                "buffer.obs": obs, "buffer.actions": actions, "buffer.rewards": rewards}

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.w, self.b = np.array(arrays["w"]), np.array(arrays["b"])
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = json.loads(np.asarray(arrays["rng"]).tobytes())
        self.num_observed = int(arrays["num_observed"])
        rows = (np.array(arrays["buffer.obs"]), np.array(arrays["buffer.actions"]),
                np.array(arrays["buffer.rewards"]))
        self.pending = [rows] if len(rows[2]) else []

    def policy_arrays(self) -> dict[str, np.ndarray]:
        return {"w": self.w.copy(), "b": self.b.copy()}

    def load_policy_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.w, self.b = np.array(arrays["w"]), np.array(arrays["b"])


class LinearPolicy:
    """The greedy linear policy ``parcat eval -p RUN`` builds from a run of this learner."""

    def __init__(self, spec: Any, agent_ids: Sequence[str] | None = None) -> None:
        self.one_hot = np.zeros(0)
        if agent_ids is not None:
            self.one_hot = np.eye(len(agent_ids))[list(agent_ids).index(str(spec.agent_id))]
        self.w = self.b = np.zeros(0)

    def reset(self, seed: int) -> None:
        """Deterministic: nothing to reset."""

    def step(self, obs: Any) -> int:
        x = np.concatenate((np.asarray(obs, np.float64).reshape(-1), self.one_hot))
        return int((x @ self.w + self.b).argmax())

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.w, self.b = np.array(arrays["w"]), np.array(arrays["b"])


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
