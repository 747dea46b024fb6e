"""Hyperparameters of :class:`~parcat.train.ppo.PPOLearner`, validated on construction.

Defaults follow CleanRL's ``ppo.py`` (classic control) where parcat's loop allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from parcat.core.errors import ConfigError, brief
from parcat.core.limits import MAX_BATCH_SIZE, MAX_COUNT, MAX_NET_DEPTH, MAX_NET_WIDTH
from parcat.train.mlp_learner import check_int_ranges, from_mapping, is_number


@dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of :class:`~parcat.train.ppo.PPOLearner`.

    Raises:
        ConfigError: a field is out of range; the message names it.
    """

    width: int = 64
    """Units per hidden layer of the actor and the critic (the ``mlp`` policy's ``width``)."""
    depth: int = 2
    """Number of hidden layers of each (the ``mlp`` policy's ``depth``)."""
    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor, in [0, 1]."""
    gae_lambda: float = 0.95
    """GAE's lambda, in [0, 1]: 0 is one-step TD, 1 Monte Carlo."""
    clip_coef: float = 0.2
    """The surrogate's clip range: probability ratios beyond ``1 ± clip_coef`` give no gradient."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float | None = 0.5
    """Largest global gradient norm; ``None`` disables clipping."""
    update_epochs: int = 4
    """Passes over each rollout."""
    minibatch_size: int = 64
    """Transitions per gradient update."""
    norm_adv: bool = True
    """Normalise advantages per minibatch (zero mean, unit deviation)."""
    init_log_std: float = 0.0
    """Box actions: the initial log standard deviation of the pre-tanh Gaussian."""
    seed: int = 0
    """Seed of the initial weights (the actor's as ``MLPPolicy``'s ``init_seed``),
    exploration and minibatches."""

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PPOConfig:
        """Build a config from a mapping (a YAML file, CLI options), naming unknown keys.

        Raises:
            ConfigError: an unknown key or a value out of range.
        """
        return from_mapping(cls, values, "ppo")


_INT_RANGES: dict[str, tuple[int, int | None]] = {
    "width": (1, MAX_NET_WIDTH), "depth": (1, MAX_NET_DEPTH), "update_epochs": (1, MAX_COUNT),
    "minibatch_size": (1, MAX_BATCH_SIZE), "seed": (0, None),
}
_UNIT = ("gamma", "gae_lambda")
_NON_NEGATIVE = ("clip_coef", "ent_coef", "vf_coef")


def _validate(config: PPOConfig) -> None:
    check_int_ranges(config, _INT_RANGES, "ppo")
    if not is_number(config.lr) or config.lr <= 0:
        raise ConfigError(f"ppo: 'lr' must be a number > 0, got {brief(config.lr)}")
    for name in _UNIT:
        value = getattr(config, name)
        if not is_number(value) or not 0 <= value <= 1:
            raise ConfigError(f"ppo: '{name}' must be a number in [0, 1], got {brief(value)}")
    for name in _NON_NEGATIVE:
        value = getattr(config, name)
        if not is_number(value) or value < 0:
            raise ConfigError(f"ppo: '{name}' must be a number >= 0, got {brief(value)}")
    if not is_number(config.init_log_std) or abs(config.init_log_std) > 20:
        raise ConfigError(f"ppo: 'init_log_std' must be a number in [-20, 20], "
                          f"got {brief(config.init_log_std)}")
    if not isinstance(config.norm_adv, bool):
        raise ConfigError(f"ppo: 'norm_adv' must be true or false, got {brief(config.norm_adv)}")
    norm = config.max_grad_norm
    if norm is not None and (not is_number(norm) or norm <= 0):
        raise ConfigError(
            f"ppo: 'max_grad_norm' must be a number > 0 or None (off), got {brief(norm)}")
