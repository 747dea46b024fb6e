"""Hyperparameters of :class:`~parcat.train.ppo.PPOLearner`, validated on construction.

Defaults follow CleanRL's ``ppo.py`` (classic control) where parcat's loop allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from parcat.core.errors import ConfigError, brief
from parcat.core.limits import MAX_BATCH_SIZE, MAX_COUNT
from parcat.train.mlp_learner import MLPOptions, is_number


@dataclass(frozen=True)
class PPOConfig(MLPOptions):
    """Hyperparameters of :class:`~parcat.train.ppo.PPOLearner` (the actor's and the critic's
    network, ``gamma`` and ``lr`` in :class:`MLPOptions`).

    Raises:
        ConfigError: a field is out of range; the message names it.
    """

    lr: float = 3e-4
    """Adam learning rate."""
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

    learner: ClassVar[str] = "ppo"
    int_ranges: ClassVar[dict[str, tuple[int, int | None]]] = {
        "update_epochs": (1, MAX_COUNT), "minibatch_size": (1, MAX_BATCH_SIZE), "seed": (0, None),
    }
    unit_fields: ClassVar[tuple[str, ...]] = ("gae_lambda",)

    def check(self) -> None:
        """The loss weights, ``init_log_std``, ``norm_adv`` and ``max_grad_norm``."""
        for name in ("clip_coef", "ent_coef", "vf_coef"):
            value = getattr(self, name)
            if not is_number(value) or value < 0:
                raise ConfigError(f"ppo: '{name}' must be a number >= 0, got {brief(value)}")
        if not is_number(self.init_log_std) or abs(self.init_log_std) > 20:
            raise ConfigError(f"ppo: 'init_log_std' must be a number in [-20, 20], "
                              f"got {brief(self.init_log_std)}")
        if not isinstance(self.norm_adv, bool):
            raise ConfigError(f"ppo: 'norm_adv' must be true or false, got {brief(self.norm_adv)}")
        norm = self.max_grad_norm
        if norm is not None and (not is_number(norm) or norm <= 0):
            raise ConfigError(
                f"ppo: 'max_grad_norm' must be a number > 0 or None (off), got {brief(norm)}")
