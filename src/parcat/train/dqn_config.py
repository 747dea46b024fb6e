"""Hyperparameters of :class:`~parcat.train.dqn.DQNLearner`, validated on construction,
and the size check of its network and replay buffer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from parcat.core.errors import ConfigError, brief
from parcat.core.limits import MAX_BATCH_SIZE, MAX_BUFFER_BYTES, MAX_COUNT, dense_sizes
from parcat.train.buffer import transition_bytes
from parcat.train.mlp import INIT_SCHEMES
from parcat.train.mlp_learner import MLPOptions, is_number


@dataclass(frozen=True)
class DQNConfig(MLPOptions):
    """Hyperparameters of :class:`DQNLearner` (the network's and ``lr``, ``gamma`` in
    :class:`MLPOptions`), validated on construction.

    Raises:
        ConfigError: a field is out of range; the message names it.
    """

    batch_size: int = 64
    """Transitions sampled per gradient update."""
    buffer_size: int = 50_000
    """Replay buffer capacity, in transitions."""
    learning_starts: int = 500
    """Transitions in the buffer before the first update."""
    train_steps: int = 1
    """Gradient updates per ``train_step`` call."""
    target_update_every: int = 250
    """Gradient updates between copies of the online network into the target network."""
    eps_start: float = 1.0
    """Exploration rate (probability of a uniformly random action) at the start."""
    eps_end: float = 0.05
    """Exploration rate once the decay is over."""
    eps_decay_steps: int = 10_000
    """Environment transitions observed over which epsilon falls linearly to ``eps_end``."""
    double: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    huber: bool = True
    """Huber (smooth L1, delta 1) loss on the TD error instead of half the squared error."""
    grad_clip: float | None = 10.0
    """Largest global gradient norm; ``None`` disables clipping."""
    init: str = "he"
    """Initial weights: ``he`` (He-normal, zero biases: ``MLPPolicy``'s own draw) or
    ``uniform`` (PyTorch's ``nn.Linear`` default, weights and biases in ``±1/sqrt(fan_in)``)."""
    seed: int = 0
    """Seed of the initial weights (as ``MLPPolicy``'s ``init_seed``), exploration and replay."""

    learner: ClassVar[str] = "dqn"
    int_ranges: ClassVar[dict[str, tuple[int, int | None]]] = {
        "batch_size": (1, MAX_BATCH_SIZE), "buffer_size": (1, MAX_COUNT),
        "train_steps": (1, MAX_COUNT), "target_update_every": (1, MAX_COUNT),
        "learning_starts": (0, MAX_COUNT), "eps_decay_steps": (0, MAX_COUNT), "seed": (0, None),
    }
    unit_fields: ClassVar[tuple[str, ...]] = ("eps_start", "eps_end")

    def check(self) -> None:
        """Booleans, ``init``, ``grad_clip``, and a buffer that can start training."""
        for name in ("double", "huber"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"dqn: '{name}' must be true or false, "
                                  f"got {brief(getattr(self, name))}")
        if self.init not in INIT_SCHEMES:
            raise ConfigError(f"dqn: 'init' must be {' or '.join(INIT_SCHEMES)}, "
                              f"got {brief(self.init)}")
        clip = self.grad_clip
        if clip is not None and (not is_number(clip) or clip <= 0):
            raise ConfigError(
                f"dqn: 'grad_clip' must be a number > 0 or None (off), got {brief(clip)}"
            )
        for name in ("learning_starts", "batch_size"):
            if getattr(self, name) > self.buffer_size:
                raise ConfigError(
                    f"dqn: '{name}' must be <= 'buffer_size' ({self.buffer_size}), "
                    f"got {getattr(self, name)}; training would never start"
                )


def check_sizes(config: DQNConfig, obs_dim: int, num_actions: int) -> list[int]:
    """The Q-network's layer sizes, once its size and a full buffer's are within the limits.

    Raises:
        ConfigError: more than :data:`~parcat.core.limits.MAX_NET_PARAMETERS` parameters, or a
            full replay buffer larger than :data:`~parcat.core.limits.MAX_BUFFER_BYTES`.
    """
    sizes = dense_sizes("dqn", obs_dim, config.width, config.depth, num_actions, ConfigError)
    per_transition = transition_bytes(obs_dim)
    if config.buffer_size * per_transition > MAX_BUFFER_BYTES:
        most = MAX_BUFFER_BYTES // per_transition
        raise ConfigError(
            f"dqn: a full replay buffer of {config.buffer_size:,} transitions of {obs_dim:,} "
            f"numbers would take {config.buffer_size * per_transition / 2**30:.1f} GiB, more "
            f"than the limit of {MAX_BUFFER_BYTES // 2**30} GiB; use a buffer_size of at most "
            f"{most:,}"
        )
    return sizes
