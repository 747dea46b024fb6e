"""Deep Q-learning in numpy: parcat's built-in learner, one per agent.

The Q-network is the ``mlp`` policy's network (:class:`~parcat.policies.builtin.MLPPolicy`:
same layers, by default the same He initialisation from the seed (``init: uniform``
draws PyTorch's ``nn.Linear`` default instead), same ``einsum`` forward), so
:meth:`DQNLearner.policy_arrays` loads straight into ``MLPPolicy(spec, width, depth)`` and
acts greedily exactly like the learner. Training uses BLAS (``@``) for speed; on the same
shapes it is deterministic from run to run.

All arithmetic is float32 and every random draw comes from the config's seed, so two
learners fed the same transitions stay bit-identical, and :meth:`DQNLearner.state_dict`
captures everything needed to resume bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

from parcat.core.errors import ConfigError
from parcat.core.seeding import derive_seed
from parcat.train.buffer import ReplayBuffer
from parcat.train.dqn_config import DQNConfig, check_sizes
from parcat.train.learner import Transitions, decode_rng, encode_rng
from parcat.train.mlp import (
    Layers,
    adam_update,
    backward,
    clip_grad,
    expect_array,
    forward_blas,
    forward_einsum,
    init_params,
    single_threaded_blas,
    views,
)
from parcat.train.mlp_learner import MLPLearner, is_int

__all__ = ["DQNConfig", "DQNLearner", "check_sizes"]

_EXPLORE_STREAM, _REPLAY_STREAM = 1, 2


class DQNLearner(MLPLearner):
    """(Double) deep Q-learning with a numpy MLP, Adam, a target network and replay.

    Implements :class:`~parcat.train.learner.Learner` (``--learner dqn``). :meth:`act` uses
    the weights as they were at the end of the last ``train_step`` (or
    :meth:`load_policy_arrays`).

    Args:
        obs_dim: Length of a flat observation.
        num_actions: Number of discrete actions (actions are ``0 .. num_actions - 1``).
        config: Hyperparameters; the defaults if omitted.

    Raises:
        ConfigError: ``obs_dim`` or ``num_actions`` is not an integer >= 1.
    """

    def __init__(self, obs_dim: int, num_actions: int, config: DQNConfig | None = None) -> None:
        for name, value in (("obs_dim", obs_dim), ("num_actions", num_actions)):
            if not is_int(value) or value < 1:
                raise ConfigError(f"dqn: '{name}' must be an integer >= 1, got {value!r}")
        self.settings = config = config if config is not None else DQNConfig()
        self.obs_dim = obs_dim
        self.num_actions = num_actions
        self._sizes = check_sizes(config, obs_dim, num_actions)
        # flat parameter vectors with per-layer views: Adam, clipping and the target
        # copy are then one numpy call each
        self._online = init_params(self._sizes, config.seed, config.init)
        self._target = self._online.copy()
        self._grad = np.zeros_like(self._online)
        self._adam_m = np.zeros_like(self._online)
        self._adam_v = np.zeros_like(self._online)
        self._adam_step = 0
        self._online_layers = views(self._online, self._sizes)
        self._target_layers = views(self._target, self._sizes)
        self._grad_layers = views(self._grad, self._sizes)
        self._acting: Layers = []
        self._publish()
        self._gamma = np.float32(config.gamma)
        self.num_observed = 0
        """Environment transitions observed so far (the epsilon schedule's position)."""
        self.num_updates = 0
        """Gradient updates done so far."""
        self.rng = np.random.default_rng(derive_seed(config.seed, _EXPLORE_STREAM))
        """The exploration generator."""
        self.buffer = ReplayBuffer(
            config.buffer_size, obs_dim, derive_seed(config.seed, _REPLAY_STREAM)
        )
        """The replay buffer that :meth:`observe` fills."""

    action_spaces = (gymnasium.spaces.Discrete,)
    """It learns Discrete actions only (``ppo`` learns Box actions too)."""
    options_class = DQNConfig

    @classmethod
    def from_spaces(cls, observation_space: gymnasium.spaces.Space[Any],
                    action_space: gymnasium.spaces.Space[Any], options: Mapping[str, Any],
                    seed: int) -> DQNLearner:
        """Build for a flat Box observation and Discrete actions (the trainer's way).

        Raises:
            ConfigError: an unknown option, a value out of range, or other spaces.
        """
        if not isinstance(action_space, gymnasium.spaces.Discrete) or action_space.start != 0:
            raise ConfigError(f"dqn: needs Discrete actions starting at 0, got {action_space}")
        obs_dim = int(np.prod(observation_space.shape or (0,)))
        return cls(obs_dim, int(action_space.n), DQNConfig.from_mapping({**options, "seed": seed}))

    @property
    def exploration(self) -> float:
        """The epsilon of the per-epoch log."""
        return self.epsilon

    @property
    def epsilon(self) -> float:
        """The exploration rate now: linear from ``eps_start`` to ``eps_end``."""
        config = self.settings
        if config.eps_decay_steps == 0:
            return float(config.eps_end)
        done = min(1.0, self.num_observed / config.eps_decay_steps)
        return float(config.eps_start + done * (config.eps_end - config.eps_start))

    def act(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        """One action per row of ``obs_batch`` (shape ``(batch, obs_dim)``), as int64.

        Greedy actions are computed exactly as ``MLPPolicy`` computes them; with
        ``explore`` each is replaced by a uniform one with probability :attr:`epsilon`.
        The generator advances by the same amount whatever the outcome.
        """
        x = np.asarray(obs_batch, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ValueError(
                f"dqn: obs_batch must have shape (batch, {self.obs_dim}), got {x.shape}"
            )
        actions = forward_einsum(self._acting, x).argmax(axis=1).astype(np.int64)
        if explore:
            uniform = self.rng.integers(self.num_actions, size=len(x), dtype=np.int64)
            explored = self.rng.random(len(x)) < self.epsilon
            actions = np.where(explored, uniform, actions)
        return actions

    def observe(self, batch: Transitions) -> None:
        """Add a batch of transitions to the replay buffer; see ``Learner.observe``.

        Raises:
            ValueError: an action is outside ``0 .. num_actions - 1``, or shapes disagree.
        """
        actions = np.asarray(batch.actions, dtype=np.int64)
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise ValueError(
                f"dqn: actions must be in 0 .. {self.num_actions - 1}, "
                f"got {actions.min()} .. {actions.max()}"
            )
        self.buffer.add_batch(batch._replace(actions=actions))
        self.num_observed += len(actions)

    def train_step(self) -> dict[str, float]:
        """Run ``config.train_steps`` gradient updates on batches sampled from the buffer.

        Returns:
            ``{}`` until the buffer holds ``max(learning_starts, batch_size)`` transitions;
            then the mean ``loss``, ``q_mean`` (of Q(s, a)) and ``grad_norm`` (before
            clipping) over the updates, and the current ``epsilon`` and ``num_updates``.
        """
        config = self.settings
        if len(self.buffer) < max(config.learning_starts, config.batch_size):
            return {}
        totals = [0.0, 0.0, 0.0]
        with single_threaded_blas():
            for _ in range(config.train_steps):
                stats = self._update(self.buffer.sample(config.batch_size))
                totals = [total + value for total, value in zip(totals, stats, strict=True)]
        self._publish()
        loss, q_mean, grad_norm = (total / config.train_steps for total in totals)
        return {
            "loss": loss,
            "q_mean": q_mean,
            "grad_norm": grad_norm,
            "epsilon": self.epsilon,
            "num_updates": float(self.num_updates),
        }

    def policy_arrays(self) -> dict[str, np.ndarray]:
        """The greedy network as ``MLPPolicy.state_dict`` names it (``w0, ..., b0, ...``)."""
        arrays = {f"w{i}": w.copy() for i, (w, _) in enumerate(self._acting)}
        arrays.update({f"b{i}": b.copy() for i, (_, b) in enumerate(self._acting)})
        return arrays

    def load_policy_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Act (and go on learning) with greedy weights in :meth:`policy_arrays` layout;
        the target network starts from them too.

        Raises:
            CheckpointError: a weight is missing or has another shape.
        """
        flat = np.empty_like(self._online)
        for i, (w, b) in enumerate(views(flat, self._sizes)):
            w[...] = _expect(arrays, f"w{i}", w.shape)
            b[...] = _expect(arrays, f"b{i}", b.shape)
        self._online[...] = flat
        self._target[...] = flat  # a fresh start from these weights (--init-from)
        self._publish()

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to continue bit-identically, as named arrays.

        Online and target weights (``online.w0``, ``target.b1``, ...), Adam's moments and
        step, the counters, the exploration generator and the replay buffer (``buffer.*``).
        Call it while no ``train_step`` is running.
        """
        arrays: dict[str, np.ndarray] = {}
        for name, flat in (("online", self._online), ("target", self._target)):
            for i, (w, b) in enumerate(views(flat.copy(), self._sizes)):
                arrays[f"{name}.w{i}"], arrays[f"{name}.b{i}"] = w, b
        arrays["adam.m"] = self._adam_m.copy()
        arrays["adam.v"] = self._adam_v.copy()
        arrays["adam.step"] = np.array(self._adam_step, dtype=np.int64)
        arrays["num_observed"] = np.array(self.num_observed, dtype=np.int64)
        arrays["num_updates"] = np.array(self.num_updates, dtype=np.int64)
        arrays["rng"] = encode_rng(self.rng)
        arrays.update({f"buffer.{k}": v for k, v in self.buffer.state_dict().items()})
        return arrays

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned; nothing changes if it raises.

        Raises:
            CheckpointError: a key is missing or a shape does not match this learner.
        """
        online, target = self._read_params(arrays, "online"), self._read_params(arrays, "target")
        shape = self._online.shape
        adam_m, adam_v = _expect(arrays, "adam.m", shape), _expect(arrays, "adam.v", shape)
        counters = [int(_expect(arrays, key, ())) for key in ("adam.step", "num_observed")]
        num_updates = int(_expect(arrays, "num_updates", ()))
        rng = decode_rng(_expect(arrays, "rng", None))
        self.buffer.load_state_dict(arrays, prefix="buffer.")
        self._online[...], self._target[...] = online, target
        self._adam_m[...], self._adam_v[...] = adam_m, adam_v
        self._adam_step, self.num_observed = counters
        self.num_updates, self.rng = num_updates, rng
        self._publish()

    def _update(self, batch: dict[str, np.ndarray]) -> tuple[float, float, float]:
        config = self.settings
        size = config.batch_size
        rows = np.arange(size)
        # one online pass over obs and next_obs together: double DQN needs both
        x = np.concatenate((batch["obs"], batch["next_obs"])) if config.double else batch["obs"]
        activations = forward_blas(self._online_layers, x)
        q_online = activations.pop()
        q_next = forward_blas(self._target_layers, batch["next_obs"])[-1]
        if config.double:
            next_value = q_next[rows, q_online[size:].argmax(axis=1)]
        else:
            next_value = q_next.max(axis=1)
        target = batch["rewards"] + self._gamma * next_value * ~batch["terminated"]
        q_taken = q_online[rows, batch["actions"]]
        td = q_taken - target
        if config.huber:
            abs_td = np.abs(td)
            loss = np.where(abs_td <= 1.0, 0.5 * td * td, abs_td - 0.5).mean()
            grad_td = np.clip(td, -1.0, 1.0)
        else:
            loss = (0.5 * td * td).mean()
            grad_td = td
        grad_q = np.zeros((size, self.num_actions), dtype=np.float32)
        grad_q[rows, batch["actions"]] = grad_td / np.float32(size)
        backward(self._online_layers, self._grad_layers, [a[:size] for a in activations], grad_q)
        norm = clip_grad(self._grad, config.grad_clip)
        self._adam()
        self.num_updates += 1
        if self.num_updates % config.target_update_every == 0:
            np.copyto(self._target, self._online)
        return float(loss), float(q_taken.mean()), norm

    def _adam(self) -> None:
        self._adam_step += 1
        adam_update(self._online, self._grad, self._adam_m, self._adam_v, self._adam_step,
                    self.settings.lr)

    def _publish(self) -> None:
        # fresh arrays, swapped in whole: a concurrent act() sees the old or the new net
        self._acting = [(w.copy(), b.copy()) for w, b in self._online_layers]

    def _read_params(self, arrays: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        flat = np.empty_like(self._online)
        for i, (w, b) in enumerate(views(flat, self._sizes)):
            w[...] = _expect(arrays, f"{name}.w{i}", w.shape)
            b[...] = _expect(arrays, f"{name}.b{i}", b.shape)
        return flat


def _expect(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...] | None) -> Any:
    return expect_array(arrays, key, shape, "dqn",
                        "the obs_dim, num_actions, width and depth it was saved with")
