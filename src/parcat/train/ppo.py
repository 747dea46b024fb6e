"""PPO with GAE in numpy: parcat's actor-critic learner (``--learner ppo``), IPPO by default.

The actor is the ``mlp`` policy's network (:class:`~parcat.policies.builtin.MLPPolicy`:
same layers, same He initialisation from the seed, its last layer then scaled by 0.01 so
the first policy is near uniform, as CleanRL's orthogonal ``std=0.01`` head is), so
:meth:`PPOLearner.policy_arrays` load into ``MLPPolicy`` and evaluation acts greedily:
the argmax for Discrete actions, ``tanh(mean)`` squashed into the bounds for Box ones.
Box actions are Gaussian in the pre-tanh space with a learned, state-independent
log-std; an action is squashed exactly as ``MLPPolicy`` squashes its output.

Actor and critic are separate networks (no shared trunk): the actor then *is* the
evaluation policy, array for array, and the value loss's scale cannot pull the policy's
features around (CleanRL's choice for classic control and continuous actions).

Log-probabilities and values are computed in :meth:`PPOLearner.observe` from (obs,
action) with the current weights; a Box action is mapped back through the squash
(clipped ``1e-6`` inside the bounds, as SB3 does for squashed Gaussians). The tanh
Jacobian is left out of the log-probability: it does not depend on the weights, so it
cancels in the probability ratio. In sync mode these are the weights that acted. In async
mode the learner process computes them with *its* weights, which may be one round newer
than the acting copy's: the ratio is then taken against a slightly different policy
than the one that acted (the clipped surrogate bounds the effect).

All arithmetic is float32 and every random draw comes from the seed, so two learners fed
the same transitions stay bit-identical, and :meth:`PPOLearner.state_dict` (including a
rollout not yet trained on) resumes bit for bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

from parcat.core.errors import ConfigError
from parcat.core.limits import dense_sizes
from parcat.core.seeding import derive_seed
from parcat.train import mlp
from parcat.train.distributions import categorical, gaussian, softmax
from parcat.train.learner import Transitions, decode_rng, encode_rng
from parcat.train.mlp_learner import MLPLearner
from parcat.train.onpolicy import Rollout, gae
from parcat.train.ppo_config import PPOConfig

__all__ = ["PPOConfig", "PPOLearner"]

_ACT_STREAM, _SHUFFLE_STREAM, _CRITIC_STREAM = 1, 2, 3
_SQUASH_EPS = 1e-6


class PPOLearner(MLPLearner):
    """Proximal policy optimisation (clipped surrogate) with GAE, Adam and a numpy MLP.

    Implements :class:`~parcat.train.learner.Learner`. Observed transitions are kept as a
    rollout; the first :meth:`train_step` after some were observed runs ``update_epochs``
    passes of minibatch updates over them and clears it (the others return ``{}``): in
    sync mode, one update per epoch on that epoch's ``steps_per_epoch × environments``
    transitions.

    Args:
        observation_space: A Box; observations are flattened.
        action_space: Discrete (starting at 0) or Box with finite bounds.
        config: Hyperparameters; the defaults if omitted.

    Raises:
        ConfigError: another kind of space, or a network beyond parcat's limits.
    """

    action_spaces = (gymnasium.spaces.Discrete, gymnasium.spaces.Box)
    options_class = PPOConfig

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
        first_views = mlp.views(first, actor)
        first_views[-1][0][...] *= np.float32(0.01)
        log_std = np.full(0 if self.discrete else n_out, config.init_log_std, np.float32)
        self._params = np.concatenate(
            (first, mlp.init_params(critic, derive_seed(config.seed, _CRITIC_STREAM)), log_std))
        self._grad = np.zeros_like(self._params)
        self._adam_m, self._adam_v = np.zeros_like(self._params), np.zeros_like(self._params)
        self._adam_step = 0
        self._layers = _split(self._params, actor, critic)
        self._grads = _split(self._grad, actor, critic)
        self._acting: mlp.Layers = []
        self._acting_log_std = log_std
        self._publish()
        if not self.discrete:
            box: Any = action_space
            self._low = np.asarray(box.low).reshape(-1)
            self._high = np.asarray(box.high).reshape(-1)
        self.rollout = Rollout(self.obs_dim, self.action_dim)
        """Transitions observed since the last update."""
        self.num_observed = 0
        """Environment transitions observed so far."""
        self.num_updates = 0
        """Minibatch gradient updates done so far."""
        self.rng = np.random.default_rng(derive_seed(config.seed, _ACT_STREAM))
        """Draws exploratory actions."""
        self.shuffle_rng = np.random.default_rng(derive_seed(config.seed, _SHUFFLE_STREAM))
        """Draws minibatches."""

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
        out = mlp.forward_einsum(self._acting, x)
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
        none = np.zeros(n, dtype=np.bool_)
        self.rollout.add({
            "obs": obs, "actions": actions, "logp": logp, "values": values[:n],
            "next_values": values[n:], "rewards": batch.rewards,
            "terminated": batch.terminated,
            "truncated": none if batch.truncated is None else batch.truncated,
            "env": np.arange(n) if batch.env is None else batch.env,
        })
        self.num_observed += n

    def train_step(self) -> dict[str, float]:
        """Update on the rollout (then cleared); ``{}`` when it is empty.

        Returns:
            Means over the minibatch updates of ``loss``, ``policy_loss``, ``value_loss``,
            ``entropy`` and ``approx_kl``, and ``num_updates``.
        """
        if not len(self.rollout):
            return {}
        config = self.settings
        data = self.rollout.arrays()
        data["advantages"], data["returns"] = gae(data, config.gamma, config.gae_lambda)
        n, size = len(data["rewards"]), config.minibatch_size
        totals = np.zeros(5)
        count = 0
        with mlp.single_threaded_blas():
            for _ in range(config.update_epochs):
                order = self.shuffle_rng.permutation(n)
                for start in range(0, n, size):
                    rows = order[start : start + size]
                    totals += self._update({k: v[rows] for k, v in data.items()})
                    count += 1
        self.rollout.clear()
        self._publish()
        means = totals / count
        keys = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl")
        return {**dict(zip(keys, map(float, means), strict=True)),
                "num_updates": float(self.num_updates)}

    def policy_arrays(self) -> dict[str, np.ndarray]:
        """The actor as ``MLPPolicy.state_dict`` names it (``w0, ..., b0, ...``), plus
        ``log_std`` for Box actions (``MLPPolicy`` ignores it; async acting copies use it)."""
        arrays = {f"w{i}": w.copy() for i, (w, _) in enumerate(self._acting)}
        arrays.update({f"b{i}": b.copy() for i, (_, b) in enumerate(self._acting)})
        if not self.discrete:
            arrays["log_std"] = self._acting_log_std.copy()
        return arrays

    def load_policy_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Act (and go on learning) with an actor in :meth:`policy_arrays` layout.

        Raises:
            CheckpointError: a weight is missing or has another shape.
        """
        actor, _, log_std = self._layers
        new = [(_expect(arrays, f"w{i}", w.shape), _expect(arrays, f"b{i}", b.shape))
               for i, (w, b) in enumerate(actor)]
        if "log_std" in arrays:
            log_std[...] = _expect(arrays, "log_std", log_std.shape)
        for (w, b), (new_w, new_b) in zip(actor, new, strict=True):
            w[...], b[...] = new_w, new_b
        self._publish()

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights, Adam's moments and step, counters, generators and the open rollout."""
        return {
            "params": self._params.copy(), "adam.m": self._adam_m.copy(),
            "adam.v": self._adam_v.copy(), "adam.step": np.array(self._adam_step, np.int64),
            "num_observed": np.array(self.num_observed, np.int64),
            "num_updates": np.array(self.num_updates, np.int64),
            "rng": encode_rng(self.rng), "shuffle_rng": encode_rng(self.shuffle_rng),
            **self.rollout.state_dict("buffer."),
        }

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned; nothing changes if it raises.

        Raises:
            CheckpointError: a key is missing or a shape does not match this learner.
        """
        shape = self._params.shape
        params, m, v = (_expect(arrays, key, shape) for key in ("params", "adam.m", "adam.v"))
        counters = [int(_expect(arrays, key, ())) for key in ("adam.step", "num_observed",
                                                              "num_updates")]
        rng = decode_rng(_expect(arrays, "rng", None))
        shuffle_rng = decode_rng(_expect(arrays, "shuffle_rng", None), "shuffle_rng")
        rollout = Rollout(self.obs_dim, self.action_dim)
        rollout.load_state_dict(arrays, "buffer.")
        self._params[...], self._adam_m[...], self._adam_v[...] = params, m, v
        self._adam_step, self.num_observed, self.num_updates = counters
        self.rng, self.shuffle_rng, self.rollout = rng, shuffle_rng, rollout
        self._publish()

    # -- internals ------------------------------------------------------------------------

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
        self._adam_step += 1
        mlp.adam_update(self._params, self._grad, self._adam_m, self._adam_v, self._adam_step,
                    config.lr)
        self.num_updates += 1
        mean_entropy = float(entropy.mean())
        loss = float(policy_loss) - config.ent_coef * mean_entropy + config.vf_coef * float(
            value_loss)
        approx_kl = float(((ratio - 1) - log_ratio).mean())
        return np.array([loss, float(policy_loss), float(value_loss), mean_entropy, approx_kl])

    def _log_probs(self, out: np.ndarray, actions: np.ndarray, grads: bool = False) -> Any:
        """Log-probabilities and entropies of ``actions`` under the outputs ``out``.

        With ``grads``, also a function ``grad(g, c)``: the gradient of
        ``sum(g * logp) + c * sum(entropy)`` as (d/d out, d/d log_std).
        """
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
        low, high = space.low, space.high
        squashed = np.tanh(out).reshape((len(out), *space.shape))
        return (low + (squashed + 1.0) * 0.5 * (high - low)).astype(space.dtype)

    def _publish(self) -> None:
        # fresh arrays, swapped in whole: a concurrent act() sees the old or the new net
        self._acting = [(w.copy(), b.copy()) for w, b in self._layers[0]]
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


def _expect(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...] | None) -> Any:
    return mlp.expect_array(arrays, key, shape, "ppo",
                            "the spaces, width and depth it was saved with")
