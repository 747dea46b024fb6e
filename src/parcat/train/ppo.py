"""PPO with GAE in numpy: parcat's actor-critic learner (``--learner ppo``), IPPO by default.

The actor is the ``mlp`` policy's network (same layers and He initialisation, its last
layer scaled by 0.01 so the first policy is near uniform, as CleanRL's ``std=0.01`` head),
so :meth:`PPOLearner.policy_arrays` load into ``MLPPolicy``, which acts greedily: the argmax
for Discrete actions, ``tanh(mean)`` squashed into the bounds for Box ones (Gaussian in the
pre-tanh space with a learned, state-independent log-std). The critic is a separate
network, so the actor *is* the evaluation policy and the value loss cannot pull its
features around (CleanRL's choice for classic control).

Log-probabilities and values are computed in :meth:`PPOLearner.observe` with the current
weights; a Box action is mapped back through the squash (clipped ``1e-6`` inside the
bounds, as SB3 does). The tanh Jacobian does not depend on the weights, so it cancels in
the ratio and is left out. In async mode the learner process's weights may be a round
newer than those that acted (the clipped surrogate bounds the effect). All arithmetic is
float32 and every draw comes from the seed: :meth:`PPOLearner.state_dict` (with a rollout
not yet trained on) resumes bit for bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium
import numpy as np

from parcat.core.errors import ConfigError, brief
from parcat.core.limits import MAX_BATCH_SIZE, MAX_COUNT, dense_sizes
from parcat.core.seeding import derive_seed
from parcat.train import mlp
from parcat.train.learner import Transitions, decode_rng, encode_rng
from parcat.train.mlp import MLPLearner, MLPOptions, assign_layers, is_number
from parcat.train.onpolicy import Rollout, categorical, gae, gaussian, softmax

__all__ = ["PPOConfig", "PPOLearner"]

_ACT_STREAM, _SHUFFLE_STREAM, _CRITIC_STREAM = 1, 2, 3
_SQUASH_EPS = 1e-6


@dataclass(frozen=True)
class PPOConfig(MLPOptions):
    """Hyperparameters of :class:`PPOLearner` (with :class:`MLPOptions`' own), validated on
    construction; defaults follow CleanRL's ``ppo.py`` (classic control)."""

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
    """Seed of the initial weights (the actor's as ``MLPPolicy``'s), exploration, minibatches."""

    learner: ClassVar[str] = "ppo"
    int_ranges: ClassVar[dict[str, tuple[int, int | None]]] = {
        "update_epochs": (1, MAX_COUNT), "minibatch_size": (1, MAX_BATCH_SIZE), "seed": (0, None),
    }
    unit_fields: ClassVar[tuple[str, ...]] = ("gae_lambda",)
    flags: ClassVar[tuple[str, ...]] = ("norm_adv",)

    def check(self) -> None:
        """The loss weights, ``init_log_std`` and ``max_grad_norm``."""
        for name in ("clip_coef", "ent_coef", "vf_coef"):
            value = getattr(self, name)
            if not is_number(value) or value < 0:
                raise ConfigError(f"ppo: '{name}' must be a number >= 0, got {brief(value)}")
        if not is_number(self.init_log_std) or abs(self.init_log_std) > 20:
            raise ConfigError(f"ppo: 'init_log_std' must be a number in [-20, 20], "
                              f"got {brief(self.init_log_std)}")
        self.check_positive("max_grad_norm", off=True)


class PPOLearner(MLPLearner):
    """Proximal policy optimisation (clipped surrogate) with GAE, Adam and a numpy MLP:
    the first :meth:`train_step` after transitions were observed runs ``update_epochs``
    passes of minibatch updates over them (the others return ``{}``)."""

    action_spaces = (gymnasium.spaces.Discrete, gymnasium.spaces.Box)
    options_class = PPOConfig
    rebuild = "the spaces, width and depth it was saved with"

    def __init__(self, observation_space: gymnasium.spaces.Space[Any],
                 action_space: gymnasium.spaces.Space[Any],
                 config: PPOConfig | None = None) -> None:
        self.settings = config = config if config is not None else PPOConfig()
        self.action_space = action_space
        self.obs_dim = int(np.prod(observation_space.shape or (0,)))
        self.discrete = _check_actions(action_space)
        space: Any = action_space
        n_out = int(space.n) if self.discrete else int(np.prod(space.shape))
        self.action_dim = 1 if self.discrete else n_out
        actor = dense_sizes("ppo", self.obs_dim, config.width, config.depth, n_out, ConfigError)
        critic = dense_sizes("ppo", self.obs_dim, config.width, config.depth, 1, ConfigError)
        first = mlp.init_params(actor, config.seed)
        mlp.views(first, actor)[-1][0][...] *= np.float32(0.01)
        log_std = np.full(0 if self.discrete else n_out, config.init_log_std, np.float32)
        self._init_training(np.concatenate(
            (first, mlp.init_params(critic, derive_seed(config.seed, _CRITIC_STREAM)), log_std)))
        self._layers = _split(self._params, actor, critic)
        self._actor = self._layers[0]
        self._grads = _split(self._grad, actor, critic)
        self._publish()
        if not self.discrete:
            self._low, self._high = (np.asarray(bound).reshape(-1)
                                     for bound in (space.low, space.high))
        self.rollout = Rollout(self.obs_dim, self.action_dim)  # observed since the last update
        self.rng = np.random.default_rng(derive_seed(config.seed, _ACT_STREAM))
        self.shuffle_rng = np.random.default_rng(derive_seed(config.seed, _SHUFFLE_STREAM))

    @classmethod
    def from_spaces(cls, observation_space: gymnasium.spaces.Space[Any],
                    action_space: gymnasium.spaces.Space[Any], options: Mapping[str, Any],
                    seed: int) -> PPOLearner:
        """Build from the ``learner`` options (the trainer's way); ``seed`` wins over theirs."""
        return cls(observation_space, action_space, PPOConfig.from_mapping({**options,
                                                                            "seed": seed}))

    def act(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        """Sample an action per row (``explore``), or act as ``MLPPolicy`` does (greedy)."""
        x = np.asarray(obs_batch, dtype=np.float32).reshape(len(obs_batch), -1)
        if x.shape[1] != self.obs_dim:
            raise ValueError(f"ppo: obs_batch must have shape (batch, {self.obs_dim}), "
                             f"got {np.shape(obs_batch)}")
        out = mlp.forward_acting(self._acting, x)
        if self.discrete:
            if not explore:
                return out.argmax(axis=1).astype(np.int64)
            probs = softmax(out.astype(np.float64))
            draws = self.rng.random(len(x))[:, None]
            chosen = (probs.cumsum(axis=1) < draws).sum(axis=1)
            return np.minimum(chosen, out.shape[1] - 1).astype(np.int64)
        if explore:
            noise = self.rng.standard_normal(out.shape).astype(np.float32)
            out = out + np.exp(self._acting_log_std) * noise
        return self._squash(out)

    def observe(self, batch: Transitions) -> None:
        """Add transitions to the rollout, with their log-probabilities and values now."""
        n = len(batch.rewards)
        if n == 0:
            return
        obs = np.asarray(batch.obs, dtype=np.float32).reshape(n, -1)
        next_obs = np.asarray(batch.next_obs, dtype=np.float32).reshape(n, -1)
        actions = self._raw_actions(batch.actions, n)
        with mlp.single_threaded_blas():
            out = mlp.forward_blas(self._layers[0], obs)[-1]
            values = mlp.forward_blas(self._layers[1], np.concatenate((obs, next_obs)))[-1][:, 0]
        logp = self._log_probs(out, actions)[0]
        self.rollout.add({
            "obs": obs, "actions": actions, "logp": logp, "values": values[:n],
            "next_values": values[n:], "rewards": batch.rewards, "terminated": batch.terminated,
            "truncated": np.zeros(n, np.bool_) if batch.truncated is None else batch.truncated,
            "env": np.arange(n) if batch.env is None else batch.env})
        self.num_observed += n

    def train_step(self) -> dict[str, float]:
        """Update on the rollout (then cleared): the means over the minibatch updates of
        ``loss``, ``policy_loss``, ``value_loss``, ``entropy`` and ``approx_kl``, and
        ``num_updates``; ``{}`` when the rollout is empty."""
        if not len(self.rollout):
            return {}
        config = self.settings
        data = self.rollout.arrays()
        data["advantages"], data["returns"] = gae(data, config.gamma, config.gae_lambda)
        n, size = len(data["rewards"]), config.minibatch_size
        totals, count = np.zeros(5), 0
        with mlp.single_threaded_blas():
            for _ in range(config.update_epochs):
                order = self.shuffle_rng.permutation(n)
                for start in range(0, n, size):
                    rows = order[start : start + size]
                    totals += self._update({k: v[rows] for k, v in data.items()})
                    count += 1
        self.rollout.clear()
        self._publish()
        keys = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl")
        return {**dict(zip(keys, map(float, totals / count), strict=True)),
                "num_updates": float(self.num_updates)}

    def policy_arrays(self) -> dict[str, np.ndarray]:
        """The actor as ``MLPPolicy.state_dict`` names it (``w0, ..., b0, ...``), plus
        ``log_std`` for Box actions (``MLPPolicy`` ignores it; async acting copies use it)."""
        arrays = super().policy_arrays()
        if not self.discrete:
            arrays["log_std"] = self._acting_log_std.copy()
        return arrays

    def load_policy_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Act (and go on learning) with an actor in :meth:`policy_arrays` layout
        (:class:`CheckpointError` if it does not fit)."""
        actor, _, log_std = self._layers
        new = self._read_layers(arrays, actor)
        if "log_std" in arrays:
            log_std[...] = self._expect(arrays, "log_std", log_std.shape)
        assign_layers(actor, new)
        self._publish()

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights, Adam's moments and step, counters, generators and the open rollout."""
        return {"params": self._params.copy(), **self._training_state(),
                "shuffle_rng": encode_rng(self.shuffle_rng), **self.rollout.state_dict("buffer.")}

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned; nothing changes if it raises
        (:class:`CheckpointError`: a key missing or a shape that does not fit)."""
        params = self._expect(arrays, "params", self._params.shape)
        training = self._read_training_state(arrays)
        shuffle_rng = decode_rng(self._expect(arrays, "shuffle_rng", None), "shuffle_rng")
        rollout = Rollout(self.obs_dim, self.action_dim)
        rollout.load_state_dict(arrays, "buffer.")
        self._params[...] = params
        self._load_training_state(training)
        self.shuffle_rng, self.rollout = shuffle_rng, rollout
        self._publish()

    def _update(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """One minibatch step; returns (loss, policy loss, value loss, entropy, approx KL)."""
        config = self.settings
        size = np.float32(len(batch["rewards"]))
        actor, critic, _ = self._layers
        grad_actor, grad_critic, grad_log_std = self._grads
        acts = mlp.forward_blas(actor, batch["obs"])
        crits = mlp.forward_blas(critic, batch["obs"])
        adv = batch["advantages"]
        if config.norm_adv and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + np.float32(1e-8))
        logp, entropy, grad = self._log_probs(acts[-1], batch["actions"], grads=True)
        log_ratio = logp - batch["logp"]
        ratio = np.exp(log_ratio)
        clip = np.float32(config.clip_coef)
        unclipped, clipped = -adv * ratio, -adv * np.clip(ratio, 1 - clip, 1 + clip)
        policy_loss = np.maximum(unclipped, clipped).mean()
        # d loss / d logp: the unclipped term's where it is the larger, else 0
        g = np.where(unclipped >= clipped, unclipped, np.float32(0.0)) / size
        # the loss is policy_loss - ent_coef * mean(entropy)
        d_out, d_log_std = grad(g, -np.float32(config.ent_coef) / size)
        mlp.backward(actor, grad_actor, acts[:-1], d_out.astype(np.float32))
        grad_log_std[...] = d_log_std
        value_error = crits[-1][:, 0] - batch["returns"]
        value_loss = np.float32(0.5) * (value_error * value_error).mean()
        grad_v = (np.float32(config.vf_coef) / size * value_error)[:, None]
        mlp.backward(critic, grad_critic, crits[:-1], grad_v.astype(np.float32))
        mlp.clip_grad(self._grad, config.max_grad_norm)
        self._adam()
        self.num_updates += 1
        mean_entropy = float(entropy.mean())
        loss = float(policy_loss) - config.ent_coef * mean_entropy + config.vf_coef * float(
            value_loss)
        approx_kl = float(((ratio - 1) - log_ratio).mean())
        return np.array([loss, float(policy_loss), float(value_loss), mean_entropy, approx_kl])

    def _log_probs(self, out: np.ndarray, actions: np.ndarray, grads: bool = False) -> Any:
        """Log-probabilities, entropies and with ``grads`` their gradient function
        (:func:`~parcat.train.onpolicy.categorical`) of ``actions`` under the outputs ``out``."""
        if self.discrete:
            return categorical(out, actions[:, 0].astype(np.int64), grads)
        return gaussian(out, actions, self._layers[2], grads)

    def _raw_actions(self, actions: np.ndarray, n: int) -> np.ndarray:
        """Discrete: the index as a float column; Box: the pre-tanh value (squash inverted)."""
        if self.discrete:
            index = np.asarray(actions, dtype=np.int64).reshape(n)
            if index.size and (index.min() < 0 or index.max() >= self._layers[0][-1][1].size):
                raise ValueError(f"ppo: actions must be in 0 .. {self._layers[0][-1][1].size - 1}"
                                 f", got {index.min()} .. {index.max()}")
            return index.astype(np.float32)[:, None]
        a = np.asarray(actions, dtype=np.float32).reshape(n, -1)
        unit = 2.0 * (a - self._low) / (self._high - self._low) - 1.0
        unit = np.clip(unit, -1.0 + _SQUASH_EPS, 1.0 - _SQUASH_EPS)
        return np.arctanh(unit).astype(np.float32)

    def _squash(self, out: np.ndarray) -> np.ndarray:
        """``MLPPolicy``'s squash, op for op: ``low + (tanh(out) + 1) / 2 * (high - low)``."""
        space: Any = self.action_space
        squashed = np.tanh(out).reshape((len(out), *space.shape))
        return (space.low + (squashed + 1.0) * 0.5 * (space.high - space.low)).astype(space.dtype)

    def _publish(self) -> None:
        super()._publish()
        self._acting_log_std = self._layers[2].copy()


def _check_actions(space: gymnasium.spaces.Space[Any]) -> bool:
    """True for Discrete actions, False for a finite Box; :class:`ConfigError` otherwise."""
    if isinstance(space, gymnasium.spaces.Discrete) and space.start == 0:
        return True
    if isinstance(space, gymnasium.spaces.Box) and np.all(np.isfinite(space.low)) and np.all(
            np.isfinite(space.high)):
        return False
    raise ConfigError(f"ppo: needs Discrete actions starting at 0 or a Box with finite "
                      f"bounds, got {space}")


def _split(flat: np.ndarray, actor: list[int], critic: list[int]) -> Any:
    """(actor layers, critic layers, log-std) views into one flat parameter vector."""
    n_actor = sum(i * o + o for i, o in itertools.pairwise(actor))
    n_critic = sum(i * o + o for i, o in itertools.pairwise(critic))
    end = n_actor + n_critic
    return mlp.views(flat[:n_actor], actor), mlp.views(flat[n_actor:end], critic), flat[end:]
