"""The learner contract: what a user implements to train agents in ``parcat train``.

parcat ships ``dqn`` (:class:`~parcat.train.dqn.DQNLearner`, Discrete actions) and ``ppo``
(:class:`~parcat.train.ppo.PPOLearner`, Discrete and Box); any other implements
:class:`Learner` and is named ``module:Class`` in ``learner: {class: ...}`` or
``--learner`` (:func:`parcat.testing.check_learner` checks one). It is built as
``Class.from_spaces(observation_space, action_space, options, seed)`` (or ``Class(...)``),
one per agent (seed ``seed * 1000 + agent index``) or one shared (seed ``seed``, the
agent's one-hot id appended to each observation and ``agent_ids`` to its policy's kwargs);
``options`` is the ``learner`` mapping without ``class``, checked first by an optional
``check_config(options)`` classmethod.

Every step the trainer calls :meth:`Learner.act` with one row per environment, then
:meth:`Learner.observe` with the agents that acted, each environment's rows in step order;
after each epoch (sync) or round (async) :meth:`Learner.train_step` ``gradient_steps`` times
(or an optional ``train_many(gradient_steps)`` once: parcat's DQN sets up BLAS once for all).
Async mode rebuilds a copy in a learner process (the class pickled by reference) loaded
with :meth:`Learner.state_dict`; the acting copy takes its weights through
:meth:`Learner.load_policy_arrays` and, before a checkpoint, its full state. A checkpoint
keeps :meth:`Learner.policy_arrays` for ``policy(spec, **policy_kwargs)`` (what ``eval -p
RUN`` loads) and :meth:`Learner.state_dict` for ``--resume`` (only ``buffer.*`` arrays may
be non-finite). Optional: ``reset_states(mask)``, called where an episode began, and an
``exploration`` float for the epoch log.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol, runtime_checkable

import gymnasium
import numpy as np

from parcat.core.errors import CheckpointError
from parcat.core.jsontext import finite

_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


class Transitions(NamedTuple):
    """A batch of transitions, every array with the batch as its first dimension."""

    obs: np.ndarray
    """Observations the actions were taken on, float32 ``(batch, obs_dim)``."""
    actions: np.ndarray
    """The actions taken: int64 ``(batch,)`` (Discrete) or float ``(batch, *shape)`` (Box)."""
    rewards: np.ndarray
    """The rewards they earned, float32 ``(batch,)``."""
    next_obs: np.ndarray
    """The observations that followed (the final one where an episode ended)."""
    terminated: np.ndarray
    """Whether the episode ended in ``next_obs`` (its value is not bootstrapped), bool."""
    truncated: np.ndarray | None = None
    """Whether the episode was cut short (a time limit) in ``next_obs``, whose value is
    bootstrapped; the next row of the same ``env`` starts a new episode (``None``: never)."""
    env: np.ndarray | None = None
    """Each row's sequence, int64: ``agent index * environments + environment index``
    (``None``: rows are not sequences)."""


@runtime_checkable
class Learner(Protocol):
    """What ``parcat train`` needs of a learner (the module docstring says when each member
    is called)."""

    action_spaces: tuple[type[gymnasium.spaces.Space[Any]], ...]
    """The action space classes it learns; a mission whose agents act otherwise is refused."""
    policy: str
    """``module:Class`` of the evaluation policy :meth:`policy_arrays` load into."""
    num_observed: int
    """Environment transitions observed so far (the trainer moves it on in async mode)."""

    @property
    def policy_kwargs(self) -> Mapping[str, Any]:
        """Keyword arguments of :attr:`policy` besides the agent spec (JSON-able)."""

    @property
    def config(self) -> Mapping[str, Any]:
        """The learner's options, JSON-able, for the run's manifest."""

    def act(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        """One action per row (int64 for Discrete, in the bounds for Box); ``explore=False``
        acts as :attr:`policy` loaded with :meth:`policy_arrays` does."""

    def observe(self, batch: Transitions) -> None:
        """Record a batch of transitions (moves :attr:`num_observed` on)."""

    def train_step(self) -> dict[str, float]:
        """Train; return metrics (``loss`` at least), or ``{}`` if there was nothing to do."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to continue bit-identically, as named arrays."""

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned (:class:`CheckpointError` if it can't)."""

    def policy_arrays(self) -> dict[str, np.ndarray]:
        """The acting weights as :attr:`policy`'s ``load_state_dict`` takes them."""

    def load_policy_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Act (and go on learning) with weights in :meth:`policy_arrays` layout."""


def encode_rng(rng: np.random.Generator) -> np.ndarray:
    """A generator's full state as a uint8 array (UTF-8 JSON), for a ``state_dict``."""
    text = json.dumps(finite(rng.bit_generator.state), sort_keys=True)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def decode_rng(array: np.ndarray, key: str = "rng") -> np.random.Generator:
    """A new generator in the state :func:`encode_rng` saved (``key`` names the array in
    errors); :class:`CheckpointError` if it is not one."""
    try:
        state = json.loads(np.asarray(array, dtype=np.uint8).tobytes().decode("utf-8"))
        name = state["bit_generator"]
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointError(f"array '{key}' is not an encoded generator state: {exc}") from exc
    if name not in _BIT_GENERATORS:
        raise CheckpointError(
            f"array '{key}': bit generator {name!r} is not one of {', '.join(_BIT_GENERATORS)}")
    bit_generator = getattr(np.random, name)()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _trains_many(cls: type) -> bool:
    """Whether ``cls``'s ``train_many`` is at least as recent as its ``train_step``: a
    subclass that overrides ``train_step`` alone (of parcat's DQN, say) must see each of its
    updates, which the parent's ``train_many`` would make around it."""
    owner = {name: next(k for k in cls.__mro__ if name in vars(k))
             for name in ("train_step", "train_many")}
    return issubclass(owner["train_many"], owner["train_step"])


def train_each(
    learners: Mapping[str, Learner], gradient_steps: int,
    pool: ThreadPoolExecutor | None = None,
    prepare: Callable[[str, Learner], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Train every learner ``gradient_steps`` times (on ``pool``'s threads at once, if given),
    after ``prepare(name, learner)``; return each one's metrics as last reported (a learner
    with nothing to do returns ``{}``; ``loss`` NaN if none was reported)."""

    def one(name: str) -> dict[str, float]:
        if prepare is not None:
            prepare(name, learners[name])
        metrics: dict[str, float] = {"loss": math.nan}
        many = getattr(learners[name], "train_many", None)
        if callable(many) and _trains_many(type(learners[name])):
            return metrics | {k: float(v) for k, v in many(gradient_steps).items()}
        for _ in range(gradient_steps):
            metrics.update({k: float(v) for k, v in learners[name].train_step().items()})
        return metrics

    names = list(learners)
    return dict(zip(names, pool.map(one, names) if pool is not None else map(one, names),
                    strict=True))
