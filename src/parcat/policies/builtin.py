"""Built-in policies: ``random``, ``noop`` and ``mlp`` (the CPU-heavy reference)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from parcat.core.errors import PolicyError, brief
from parcat.core.limits import MAX_NET_DEPTH, MAX_NET_WIDTH, dense_sizes, network_parameters
from parcat.policies.base import AgentSpec

_BLOCK = 256


def legal_actions(obs: Any, space: gymnasium.spaces.Space[Any]) -> np.ndarray | None:
    """The legal action indices (ascending) where ``obs`` carries an ``action_mask`` for a
    Discrete space (PettingZoo's classic games); otherwise ``None``: every action is legal."""
    if not isinstance(space, spaces.Discrete) or not isinstance(obs, Mapping):
        return None
    mask = obs.get("action_mask")
    if mask is None:
        return None
    mask = np.asarray(mask).reshape(-1)
    if mask.shape != (int(space.n),):
        raise PolicyError(f"action_mask has {mask.size} entries; the action space {space} "
                          f"has {int(space.n)} actions")
    return np.flatnonzero(mask)


class RandomPolicy:
    """Uniformly random (legal) actions, seeded per episode; Discrete ones drawn in blocks,
    so a step costs a list index rather than a call into numpy's generator."""

    def __init__(self, spec: AgentSpec) -> None:
        self.space = spec.action_space
        self._rng = np.random.default_rng(0)
        self._block: list[int] = []
        self._space_copy: gymnasium.spaces.Space[Any] | None = None

    def reset(self, seed: int) -> None:
        """Reseed the generator."""
        self._rng = np.random.default_rng(seed)
        self._block = []
        if not isinstance(self.space, spaces.Discrete | spaces.Box):
            self._space_copy = copy.deepcopy(self.space)
            self._space_copy.seed(seed)

    def step(self, obs: Any) -> Any:
        """Draw one action."""
        space = self.space
        if isinstance(space, spaces.Discrete):
            legal = legal_actions(obs, space)
            if legal is not None:
                if not len(legal):
                    return int(space.start)  # nothing is legal: the turn is a formality
                return int(legal[self._rng.integers(len(legal))]) + int(space.start)
            if not self._block:
                draws = self._rng.integers(space.n, size=_BLOCK) + int(space.start)
                self._block = draws.tolist()[::-1]
            return self._block.pop()
        if isinstance(space, spaces.Box):
            low = np.where(np.isfinite(space.low), space.low, -1.0)
            high = np.where(np.isfinite(space.high), space.high, 1.0)
            return self._rng.uniform(low, high).astype(space.dtype)
        assert self._space_copy is not None, "reset() must be called before step()"
        return self._space_copy.sample()

    def step_batch(self, obs_batch: Sequence[Any]) -> list[Any]:
        """Draw one action per observation."""
        return [self.step(obs) for obs in obs_batch]


class NoopPolicy:
    """Always the 'do nothing' action (:func:`noop_action`), or the lowest legal one where
    an ``action_mask`` forbids it, so a noop player never forfeits a turn-based game."""

    stateless = True
    """Actions depend only on the observation: one instance may act for many agents."""

    def __init__(self, spec: AgentSpec) -> None:
        self.space: Any = spec.action_space
        self.action = noop_action(spec.action_space)

    def reset(self, seed: int) -> None:
        """Nothing to reset."""

    def step(self, obs: Any) -> Any:
        """Return the no-op action (the lowest legal one where it is masked)."""
        legal = legal_actions(obs, self.space)
        if legal is not None and len(legal) and self.action - self.space.start not in legal:
            return int(legal[0]) + int(self.space.start)
        return copy.copy(self.action)

    def step_batch(self, obs_batch: Sequence[Any]) -> list[Any]:
        """Return the no-op action for every observation."""
        return [self.step(obs) for obs in obs_batch]


def noop_action(space: gymnasium.spaces.Space[Any]) -> Any:
    """The neutral action of a space: the mission's default for late or missing actions."""
    if isinstance(space, spaces.Discrete):
        return int(space.start)
    if isinstance(space, spaces.Box):
        return np.clip(np.zeros(space.shape, dtype=space.dtype), space.low, space.high)
    if isinstance(space, spaces.MultiDiscrete):
        return np.array(space.start, dtype=space.dtype).copy()
    if isinstance(space, spaces.MultiBinary):
        return np.zeros(space.shape, dtype=space.dtype)
    raise PolicyError(f"no neutral action for action space {space}")


class MLPPolicy:
    """A numpy multi-layer perceptron: the CPU-heavy reference policy for benchmarks.

    Weights are drawn from ``init_seed`` (or loaded from a checkpoint). Discrete actions take
    the argmax of the outputs; Box actions squash them with ``tanh`` into the bounds.

    Args:
        agent_ids: A network shared by these agents (``parcat train --shared-learner``):
            the one-hot of ``spec.agent_id``'s position among them follows the observation.
    """

    stateless = True
    """One instance may act for many agents (not with ``agent_ids``)."""

    def __init__(self, spec: AgentSpec, width: int = 64, depth: int = 2, init_seed: int = 0,
                 agent_ids: Sequence[str] | None = None):
        self.obs_space = spec.observation_space
        self.action_space = spec.action_space
        self.agent_id = _one_hot(spec, agent_ids)
        if agent_ids is not None:
            self.stateless = False
        n_in = spaces.flatdim(self.obs_space) + len(self.agent_id)
        sizes = mlp_sizes(n_in, _output_size(self.action_space), width, depth)
        rng = np.random.default_rng(init_seed)
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            scale = np.sqrt(2.0 / fan_in)
            self.weights.append((rng.standard_normal((fan_in, fan_out)) * scale).astype(np.float32))
            self.biases.append(np.zeros(fan_out, dtype=np.float32))

    def reset(self, seed: int) -> None:
        """Nothing to reset."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Outputs for a batch of flat observations, shape (batch, outputs)."""
        return dense_forward(zip(self.weights, self.biases, strict=True), x)

    def step(self, obs: Any) -> Any:
        """Act on one observation."""
        return self.step_batch([obs])[0]

    def step_batch(self, obs_batch: Sequence[Any]) -> list[Any]:
        """Act on many observations with one forward pass."""
        boxed = isinstance(self.obs_space, spaces.Box)  # no action masks: one array at once
        x = (np.asarray(obs_batch, dtype=np.float32).reshape(len(obs_batch), -1) if boxed
             else np.stack([flat_observation(self.obs_space, o) for o in obs_batch]))
        if len(self.agent_id):
            x = np.concatenate((x, np.tile(self.agent_id, (len(x), 1))), axis=1)
        out = self.forward(x)
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            for row, obs in enumerate(() if boxed else obs_batch):
                legal = legal_actions(obs, space)
                if legal is not None and len(legal):  # the best legal action
                    masked = np.full(out.shape[1], -np.inf, dtype=out.dtype)
                    masked[legal] = out[row, legal]
                    out[row] = masked
            return (out.argmax(axis=1) + int(space.start)).tolist()
        assert isinstance(space, spaces.Box)
        low, high = space.low, space.high
        squashed = np.tanh(out).reshape((len(obs_batch), *space.shape))
        acts = low + (squashed + 1.0) * 0.5 * (high - low)
        return [a.astype(space.dtype) for a in acts]

    def state_dict(self) -> dict[str, np.ndarray]:
        """The weights as named arrays (the checkpoint format)."""
        return {**{f"w{i}": w for i, w in enumerate(self.weights)},
                **{f"b{i}": b for i, b in enumerate(self.biases)}}

    def load_state_dict(self, arrays: dict[str, np.ndarray]) -> None:
        """Load weights saved by :meth:`state_dict`; shapes must match."""
        for i in range(len(self.weights)):
            for prefix, store in (("w", self.weights), ("b", self.biases)):
                key = f"{prefix}{i}"
                if key not in arrays or arrays[key].shape != store[i].shape:
                    got = arrays[key].shape if key in arrays else "missing"
                    raise PolicyError(
                        f"mlp: array '{key}' expected shape {store[i].shape}, got {got}"
                    )
                store[i] = np.asarray(arrays[key], dtype=np.float32)


ROW_BLOCK = 32
"""Rows are padded to a multiple of this, and multiplied at most :data:`ROWS_PER_CALL` at a
time: OpenBLAS picks its kernel by matrix shape, and only blocks of these sizes were found to
give every row the same bits whatever the batch (BENCHMARKS.md, "Bit-identical batches")."""
ROWS_PER_CALL = 256


def dense_forward(layers: Iterable[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    """A ReLU network's outputs for a batch of rows ``x``; each row's outputs are the same
    bits in a batch of any size, so batching across agents and episodes changes no action.

    Args:
        layers: (weights of shape (in, out), biases) per layer.
        x: The inputs, shape (batch, in), float32.
    """
    layers = list(layers)
    rows = len(x)
    x = np.concatenate((x, np.zeros((-rows % ROW_BLOCK, x.shape[1]), x.dtype)))
    for i, (w, b) in enumerate(layers):
        out = np.empty((len(x), w.shape[1]), dtype=np.result_type(x, w))
        for start in range(0, len(x), ROWS_PER_CALL):
            np.matmul(x[start:start + ROWS_PER_CALL], w, out=out[start:start + ROWS_PER_CALL])
        out += b
        if i < len(layers) - 1:
            np.maximum(out, 0.0, out=out)
        x = out
    return x[:rows]


def mlp_parameters(spec: AgentSpec, width: Any = 64, depth: Any = 2, **_: Any) -> int:
    """Parameters of the network ``MLPPolicy(spec, width, depth)`` would build, unbuilt."""
    sizes = mlp_sizes(spaces.flatdim(spec.observation_space), _output_size(spec.action_space),
                      width, depth)
    return network_parameters(sizes)


def mlp_sizes(n_in: int, n_out: int, width: Any, depth: Any) -> list[int]:
    """The layer sizes of an ``mlp`` network, checked against parcat's limits (``PolicyError``)."""
    for name, value, high in (("width", width, MAX_NET_WIDTH), ("depth", depth, MAX_NET_DEPTH)):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
            raise PolicyError(
                f"mlp: '{name}' must be an integer between 1 and {high:,}, got {brief(value)}"
            )
    return dense_sizes("mlp", n_in, width, depth, n_out, PolicyError)


def _one_hot(spec: AgentSpec, agent_ids: Sequence[str] | None) -> np.ndarray:
    if agent_ids is None:
        return np.zeros(0, dtype=np.float32)
    ids = [str(a) for a in agent_ids] if isinstance(agent_ids, list | tuple) else None
    if not ids or str(spec.agent_id) not in ids:
        raise PolicyError(f"mlp: 'agent_ids' must be a list naming agent '{spec.agent_id}', "
                          f"got {brief(agent_ids)}")
    one_hot = np.zeros(len(ids), dtype=np.float32)
    one_hot[ids.index(str(spec.agent_id))] = 1.0
    return one_hot


def flat_observation(space: gymnasium.spaces.Space[Any], obs: Any) -> np.ndarray:
    """``obs`` as the ``mlp`` policy's input: flattened to one float32 row."""
    if isinstance(space, spaces.Box):
        return np.asarray(obs, dtype=np.float32).reshape(-1)
    return np.asarray(spaces.flatten(space, obs), dtype=np.float32)


def _output_size(space: gymnasium.spaces.Space[Any]) -> int:
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    raise PolicyError(f"mlp supports Discrete and Box action spaces, got {space}")
