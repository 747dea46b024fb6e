"""Deep Q-learning in numpy: parcat's built-in learner (``--learner dqn``).

The Q-network is the ``mlp`` policy's (:class:`~parcat.policies.builtin.MLPPolicy`: same
layers, by default the same He initialisation from the seed, same forward), so
:meth:`DQNLearner.policy_arrays` load straight into ``MLPPolicy(spec, width, depth)``,
which acts greedily exactly like the learner. All arithmetic is float32 and every random
draw comes from the seed, so two learners fed the same transitions stay bit-identical and
:meth:`DQNLearner.state_dict` resumes bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium
import numpy as np

from parcat.core.errors import ConfigError, brief
from parcat.core.limits import MAX_BATCH_SIZE, MAX_BUFFER_BYTES, MAX_COUNT, dense_sizes
from parcat.core.seeding import derive_seed
from parcat.train.buffer import ReplayBuffer, transition_bytes
from parcat.train.learner import Transitions
from parcat.train.mlp import (
    INIT_SCHEMES,
    MLPLearner,
    MLPOptions,
    assign_layers,
    backward,
    clip_grad,
    forward_acting,
    forward_blas,
    init_params,
    is_int,
    single_threaded_blas,
    views,
)

__all__ = ["DQNConfig", "DQNLearner", "check_sizes"]

_EXPLORE_STREAM, _REPLAY_STREAM = 1, 2


@dataclass(frozen=True)
class DQNConfig(MLPOptions):
    """Hyperparameters of :class:`DQNLearner` (with :class:`MLPOptions`' own), validated on
    construction."""

    batch_size: int = 64
    """Transitions sampled per gradient update."""
    buffer_size: int = 50_000
    """Replay buffer capacity, in transitions."""
    learning_starts: int = 500
    """Transitions in the buffer before the first update."""
    target_update_interval: int = 250
    """Environment steps (this learner's observed transitions) between copies of the online
    network into the target network, as rl-zoo's ``target_update_interval``; checked before
    each update, and a round's updates all follow its collection, so at most once a round."""
    eps_start: float = 1.0
    """Exploration rate (probability of a uniformly random action) at the start."""
    eps_end: float = 0.05
    """Exploration rate once the decay is over."""
    eps_decay_steps: int = 10_000
    """Environment transitions observed over which epsilon falls linearly to ``eps_end``."""
    lr_end: float | None = None
    """The learning rate once ``lr_decay_steps`` transitions are observed, falling linearly
    from ``lr`` (the two are given together); ``None``: ``lr`` throughout."""
    lr_decay_steps: int = 0
    """Environment transitions observed over which the learning rate falls to ``lr_end``."""
    ema: float = 0.0
    """Polyak averaging of the weights the learner acts with (and checkpoints and evaluates):
    after each update they move ``1 - ema`` of the way to the online network's, a mean over
    about ``1 / (1 - ema)`` updates, steadier than any one of them; 0: the online weights."""
    double: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    huber: bool = True
    """Huber (smooth L1, delta 1) loss on the TD error instead of half the squared error."""
    grad_clip: float | None = 10.0
    """Largest global gradient norm; ``None`` disables clipping."""
    init: str = "he"
    """Initial weights: ``he`` (``MLPPolicy``'s draw) or ``uniform`` (``nn.Linear``'s)."""
    seed: int = 0
    """Seed of the initial weights (as ``MLPPolicy``'s ``init_seed``), exploration and replay."""

    learner: ClassVar[str] = "dqn"
    int_ranges: ClassVar[dict[str, tuple[int, int | None]]] = {
        "batch_size": (1, MAX_BATCH_SIZE), "buffer_size": (1, MAX_COUNT),
        "target_update_interval": (1, MAX_COUNT), "learning_starts": (0, MAX_COUNT),
        "eps_decay_steps": (0, MAX_COUNT), "lr_decay_steps": (0, MAX_COUNT), "seed": (0, None),
    }
    unit_fields: ClassVar[tuple[str, ...]] = ("eps_start", "eps_end", "ema")
    flags: ClassVar[tuple[str, ...]] = ("double", "huber")
    renamed: ClassVar[Mapping[str, str]] = {
        "train_steps": "the run's gradient_steps (--gradient-steps): updates per epoch",
        "target_update_every": "target_update_interval, in environment steps (rl-zoo's unit)",
    }

    def check(self) -> None:
        """``init``, ``grad_clip``, and a buffer that can start training."""
        if self.init not in INIT_SCHEMES:
            raise ConfigError(f"dqn: 'init' must be {' or '.join(INIT_SCHEMES)}, "
                              f"got {brief(self.init)}")
        self.check_positive("grad_clip", off=True)
        for name in ("learning_starts", "batch_size"):
            if getattr(self, name) > self.buffer_size:
                raise ConfigError(
                    f"dqn: '{name}' must be <= 'buffer_size' ({self.buffer_size}), "
                    f"got {getattr(self, name)}; training would never start")
        self.check_positive("lr_end", off=True)
        if (self.lr_end is None) != (self.lr_decay_steps == 0):
            raise ConfigError("dqn: 'lr_end' and 'lr_decay_steps' are given together (the "
                              "rate falls from 'lr' to 'lr_end' over 'lr_decay_steps' "
                              f"transitions), got lr_end={self.lr_end}, "
                              f"lr_decay_steps={self.lr_decay_steps}")
        if self.ema == 1:  # the acting weights would never move
            raise ConfigError("dqn: 'ema' must be below 1 (0: act with the online weights), "
                              "got 1")


def check_sizes(config: DQNConfig, obs_dim: int, num_actions: int) -> list[int]:
    """The Q-network's layer sizes, once its size and a full buffer's are within the limits
    (else :class:`ConfigError`)."""
    sizes = dense_sizes("dqn", obs_dim, config.width, config.depth, num_actions, ConfigError)
    per_transition = transition_bytes(obs_dim)
    if config.buffer_size * per_transition > MAX_BUFFER_BYTES:
        raise ConfigError(
            f"dqn: a full replay buffer of {config.buffer_size:,} transitions of {obs_dim:,} "
            f"numbers would take {config.buffer_size * per_transition / 2**30:.1f} GiB, more "
            f"than the limit of {MAX_BUFFER_BYTES // 2**30} GiB; use a buffer_size of at most "
            f"{MAX_BUFFER_BYTES // per_transition:,}")
    return sizes


class DQNLearner(MLPLearner):
    """(Double) deep Q-learning with a numpy MLP, Adam, a target network and replay;
    :meth:`act` uses the weights of the last ``train_step`` (or :meth:`load_policy_arrays`)."""

    action_spaces = (gymnasium.spaces.Discrete,)
    options_class = DQNConfig
    rebuild = "the obs_dim, num_actions, width and depth it was saved with"

    def __init__(self, obs_dim: int, num_actions: int, config: DQNConfig | None = None) -> None:
        for name, value in (("obs_dim", obs_dim), ("num_actions", num_actions)):
            if not is_int(value) or value < 1:
                raise ConfigError(f"dqn: '{name}' must be an integer >= 1, got {value!r}")
        self.settings = config = config if config is not None else DQNConfig()
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self._sizes = check_sizes(config, obs_dim, num_actions)
        self._init_training(init_params(self._sizes, config.seed, config.init))
        self._ema = self._params.copy() if config.ema else None
        """The averaged weights that act (``None``: the online ones act)."""
        self._target = self._params.copy()
        self._target_mark = 0  # environment steps // target_update_interval at the last copy
        self._actor = views(self._params, self._sizes)
        self._target_layers = views(self._target, self._sizes)
        self._grad_layers = views(self._grad, self._sizes)
        self._publish()
        self._gamma = np.float32(config.gamma)
        self.rng = np.random.default_rng(derive_seed(config.seed, _EXPLORE_STREAM))
        """The exploration generator."""
        self.buffer = ReplayBuffer(config.buffer_size, obs_dim,
                                   derive_seed(config.seed, _REPLAY_STREAM))

    @classmethod
    def from_spaces(cls, observation_space: gymnasium.spaces.Space[Any],
                    action_space: gymnasium.spaces.Space[Any], options: Mapping[str, Any],
                    seed: int) -> DQNLearner:
        """Build for a flat Box observation and Discrete actions (the trainer's way)."""
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
        return self._decayed(config.eps_start, config.eps_end, config.eps_decay_steps)

    @property
    def learning_rate(self) -> float:
        """Adam's step size now: ``lr``, or linear from it to ``lr_end``."""
        config = self.settings
        if config.lr_end is None:
            return float(config.lr)
        return self._decayed(config.lr, config.lr_end, config.lr_decay_steps)

    def _decayed(self, start: float, end: float, steps: int) -> float:
        """Linear from ``start`` to ``end`` over ``steps`` observed transitions."""
        if steps == 0:
            return float(end)
        done = min(1.0, self.num_observed / steps)
        return float(start + done * (end - start))

    def act(self, obs_batch: np.ndarray, explore: bool = True,
            legal: np.ndarray | None = None) -> np.ndarray:
        """One int64 action per row of ``obs_batch``: greedy, as ``MLPPolicy`` computes it
        bit for bit; with ``explore`` each is uniform with probability :attr:`epsilon` (the
        generator moves on by the same amount whatever the outcome). ``legal`` (bool, a row
        per observation: a turn-based game's action mask) keeps both choices to the legal
        actions, as ``MLPPolicy`` does where the observation carries the mask."""
        x = np.asarray(obs_batch, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ValueError(
                f"dqn: obs_batch must have shape (batch, {self.obs_dim}), got {x.shape}")
        if explore:  # the batch unpadded: a run replays bit for bit, at 1/8 of the CPU a row
            with single_threaded_blas():
                q = forward_blas(self._acting, x)[-1]
        else:
            q = forward_acting(self._acting, x)
        if legal is not None:
            q = np.where(legal, q, -np.inf)
        actions = q.argmax(axis=1).astype(np.int64)
        if explore:
            if legal is None:
                uniform = self.rng.integers(self.num_actions, size=len(x), dtype=np.int64)
            else:  # the k-th legal action, k uniform below the row's count of them
                counts = legal.sum(axis=1)
                k = (self.rng.random(len(x)) * counts).astype(np.int64)
                uniform = (np.cumsum(legal, axis=1) > k[:, None]).argmax(axis=1)
            explored = self.rng.random(len(x)) < self.epsilon
            actions = np.where(explored, uniform, actions)
        return actions

    def observe(self, batch: Transitions) -> None:
        """Add transitions to the replay buffer (ValueError for an action out of range)."""
        actions = np.asarray(batch.actions, dtype=np.int64)
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise ValueError(
                f"dqn: actions must be in 0 .. {self.num_actions - 1}, "
                f"got {actions.min()} .. {actions.max()}")
        self.buffer.add_batch(batch._replace(actions=actions))
        self.num_observed += len(actions)

    def train_step(self) -> dict[str, float]:
        """One gradient update on a batch sampled from the buffer (:meth:`train_many`)."""
        return self.train_many(1)

    def train_many(self, updates: int) -> dict[str, float]:
        """``updates`` gradient updates: ``{}`` until the buffer holds ``max(learning_starts,
        batch_size)`` transitions, then the means of ``loss``, ``q_mean`` and ``grad_norm``
        (before clipping), ``epsilon`` and ``num_updates``; one BLAS setting and one
        publish of the acting network for all of them."""
        config = self.settings
        if len(self.buffer) < max(config.learning_starts, config.batch_size) or updates < 1:
            return {}
        totals = np.zeros(3)
        with single_threaded_blas():
            for _ in range(updates):
                totals += self._update(self.buffer.sample(config.batch_size))
        self._publish()
        loss, q_mean, grad_norm = (float(total) / updates for total in totals)
        return {"loss": loss, "q_mean": q_mean, "grad_norm": grad_norm, "epsilon": self.epsilon,
                "num_updates": float(self.num_updates)}

    def load_policy_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Act and learn on from weights in :meth:`policy_arrays` layout (the target network
        too); :class:`CheckpointError` if they do not fit."""
        new = self._read_layers(arrays, self._actor)
        assign_layers(self._actor, new)
        assign_layers(self._target_layers, new)
        if self._ema is not None:
            np.copyto(self._ema, self._params)
        self._publish()

    def state_dict(self) -> dict[str, np.ndarray]:
        """Online, target and averaged weights (``online.w0``, ``target.b1``, ``ema.w0``, ...),
        Adam, the counters, the exploration generator and the replay buffer (``buffer.*``)."""
        arrays: dict[str, np.ndarray] = {}
        for name, flat in self._networks():
            for i, (w, b) in enumerate(views(flat.copy(), self._sizes)):
                arrays[f"{name}.w{i}"], arrays[f"{name}.b{i}"] = w, b
        arrays |= self._training_state()
        return arrays | {f"buffer.{k}": v for k, v in self.buffer.state_dict().items()}

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned; nothing changes if it raises
        (:class:`CheckpointError`: a key missing or a shape that does not fit)."""
        networks = [(views(flat, self._sizes), self._read_layers(arrays, self._actor, f"{name}."))
                    for name, flat in self._networks()]
        training = self._read_training_state(arrays)
        self.buffer.load_state_dict(arrays, prefix="buffer.")
        for layers, values in networks:
            assign_layers(layers, values)
        self._load_training_state(training)
        # the mark is not saved: every round copies, if due, before its updates
        self._target_mark = self.num_observed // self.settings.target_update_interval
        self._publish()

    def _networks(self) -> list[tuple[str, np.ndarray]]:
        """The flat weight vectors a state holds, by name."""
        return [("online", self._params), ("target", self._target),
                *([("ema", self._ema)] if self._ema is not None else [])]

    def _publish(self) -> None:
        if self._ema is None:
            super()._publish()
        else:  # acting, checkpoints and the greedy evaluation use the averaged weights
            self._acting = [(w.copy(), b.copy()) for w, b in views(self._ema, self._sizes)]

    def _update(self, batch: dict[str, np.ndarray]) -> tuple[float, float, float]:
        config = self.settings
        mark = self.num_observed // config.target_update_interval
        if mark > self._target_mark:
            np.copyto(self._target, self._params)
            self._target_mark = mark
        size = config.batch_size
        rows = np.arange(size)
        # one online pass over obs and next_obs together: double DQN needs both
        x = np.concatenate((batch["obs"], batch["next_obs"])) if config.double else batch["obs"]
        activations = forward_blas(self._actor, x)
        q_online = activations.pop()
        q_next = forward_blas(self._target_layers, batch["next_obs"])[-1]
        next_value = self._next_value(q_next, q_online[size:] if config.double else None,
                                      batch["next_obs"])
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
        backward(self._actor, self._grad_layers, [a[:size] for a in activations], grad_q)
        norm = clip_grad(self._grad, config.grad_clip)
        self._adam()
        if self._ema is not None:
            self._ema += np.float32(1.0 - config.ema) * (self._params - self._ema)
        self.num_updates += 1
        return float(loss), float(q_taken.mean()), norm

    def _next_value(self, q_next: np.ndarray, q_online_next: np.ndarray | None,
                    next_obs: np.ndarray) -> np.ndarray:
        """What each next observation is worth: the target network's value of the online
        network's choice (double DQN, ``q_online_next``) or of its own (self-play's negamax
        learner overrides it)."""
        if q_online_next is None:
            return q_next.max(axis=1)
        return q_next[np.arange(len(q_next)), q_online_next.argmax(axis=1)]
