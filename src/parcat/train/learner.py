"""The learner contract: what a user implements to train agents in ``parcat train``.

parcat ships two numpy learners, :class:`~parcat.train.dqn.DQNLearner` (``dqn``, Discrete
actions) and :class:`~parcat.train.ppo.PPOLearner` (``ppo``, Discrete and Box actions); a
user may bring any other (torch, jax) by implementing :class:`Learner` and naming its class
in the train YAML (``learner: {class: my_pkg.learners:MyLearner, ...options}``) or with
``--learner my_pkg.learners:MyLearner``. :func:`parcat.testing.check_learner` checks one.

**Building.** The trainer builds one learner per agent (seeded ``seed * 1000 + agent
index``) or, with ``--shared-learner``, one for all agents (seeded ``seed``), as
``Class.from_spaces(observation_space, action_space, options, seed)`` if the class has
that classmethod, else ``Class(observation_space, action_space, options, seed)``.
``options`` is the ``learner`` mapping without ``class``; an unknown key or a bad value
raises :class:`~parcat.core.errors.ConfigError` naming it. A class may also have a
``check_config(options)`` classmethod, which the train config calls before anything
starts. Observations are ``Box`` spaces; with ``--shared-learner`` the trainer appends
a one-hot agent id to every observation (the space it passes is the wider one), so the
shared network knows which agent it acts for, and saves the policy with
``agent_ids=[...]`` added to :attr:`Learner.policy_kwargs` (the policy appends the same
one-hot: ``MLPPolicy`` does).

**Collecting.** Every step the trainer calls :meth:`Learner.act` with one row per
environment (always in the same order), then :meth:`Learner.observe` with the
transitions of the agents that acted; ``Transitions.env`` names each row's environment
(unique per agent and environment), and each environment's rows arrive in step order,
so an on-policy learner can cut them into trajectories. After each epoch (sync) or round
(async) it calls :meth:`Learner.train_step` ``train_steps`` times.

**Async mode** runs a copy of each learner in a learner process: the copy is rebuilt
there from the same class (pickled by reference: it must be importable), spaces, options
and seed, then loaded with :meth:`Learner.state_dict`. The acting copy in the trainer
only acts: it takes the trained weights through :meth:`Learner.load_policy_arrays`
(its :attr:`Learner.num_observed` is moved on by the trainer), and before a checkpoint
the full state through :meth:`Learner.load_state_dict`.

**Checkpoints** store :meth:`Learner.policy_arrays` for ``Class(spec, **policy_kwargs)``
of :attr:`Learner.policy` (what ``parcat eval -p RUN`` builds and loads with
``load_state_dict``), :attr:`Learner.config` in the manifest, and
:meth:`Learner.state_dict` for ``--resume`` (arrays named ``buffer.*`` hold collected
data and may be non-finite; every other array must be finite). ``--init-from`` loads a
run's policy arrays with :meth:`Learner.load_policy_arrays`.

Stateful (memory) learners: if a learner has a ``reset_states(mask: np.ndarray) -> None``
method, the trainer calls it with a boolean mask of the environments whose episode just
began (all of them at each epoch start), so per-environment states are cleared at
episode boundaries. A learner may have an ``exploration`` attribute (a float, e.g.
DQN's epsilon), shown in the per-epoch log.

The helpers :func:`encode_rng` and :func:`decode_rng` turn a numpy generator into an
array and back, so a learner's random state fits in its ``state_dict``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import gymnasium
import numpy as np

from parcat.core.errors import CheckpointError

_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


class Transitions(NamedTuple):
    """A batch of transitions, every array with the batch as its first dimension.

    ``terminated`` True means the episode ended in ``next_obs``, so its value is not
    bootstrapped; ``truncated`` True means it was cut short (a time limit): ``next_obs``
    is its last observation, whose value is bootstrapped, and the next row of the same
    ``env`` starts a new episode.
    """

    obs: np.ndarray
    """Observations the actions were taken on, float32 ``(batch, obs_dim)``."""
    actions: np.ndarray
    """The actions taken: int64 ``(batch,)`` (Discrete) or float ``(batch, *shape)`` (Box)."""
    rewards: np.ndarray
    """The rewards they earned, float32 ``(batch,)``."""
    next_obs: np.ndarray
    """The observations that followed (the final one where an episode ended)."""
    terminated: np.ndarray
    """Whether the episode ended in ``next_obs``, bool ``(batch,)``."""
    truncated: np.ndarray | None = None
    """Whether the episode was cut short in ``next_obs``, bool ``(batch,)`` (``None``:
    never)."""
    env: np.ndarray | None = None
    """Each row's environment, int64 ``(batch,)``: ``agent index * environments +
    environment index``, so every (agent, environment) pair is its own sequence
    (``None``: rows are not sequences)."""


@runtime_checkable
class Learner(Protocol):
    """What ``parcat train`` needs of a learner (see the module docstring for when each
    member is called).

    Class attribute ``action_spaces``: the gymnasium space classes of actions it can
    learn (e.g. ``(gymnasium.spaces.Discrete,)``); the trainer refuses a mission whose
    agents act otherwise before anything starts.
    """

    action_spaces: tuple[type[gymnasium.spaces.Space[Any]], ...]
    policy: str
    """``module:Class`` of the evaluation policy :meth:`policy_arrays` load into."""
    num_observed: int
    """Environment transitions observed so far (the trainer moves it on in async mode)."""

    @property
    def policy_kwargs(self) -> Mapping[str, Any]:
        """Keyword arguments of :attr:`policy` besides the agent spec (JSON-able)."""
        ...

    @property
    def config(self) -> Mapping[str, Any]:
        """The learner's options, JSON-able, for the run's manifest."""
        ...

    def act(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        """One action per row of ``obs_batch`` (float32 ``(batch, obs_dim)``): int64
        ``(batch,)`` for Discrete actions, ``(batch, *shape)`` in the bounds for Box.
        ``explore=False`` acts as :attr:`policy` loaded with :meth:`policy_arrays` does."""
        ...

    def observe(self, batch: Transitions) -> None:
        """Record a batch of transitions (moves :attr:`num_observed` on)."""
        ...

    def train_step(self) -> dict[str, float]:
        """Train; return metrics (``loss`` at least), or ``{}`` if there was nothing to do."""
        ...

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to continue bit-identically, as named arrays."""
        ...

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned (:class:`CheckpointError` if it can't)."""
        ...

    def policy_arrays(self) -> dict[str, np.ndarray]:
        """The acting weights as :attr:`policy`'s ``load_state_dict`` takes them."""
        ...

    def load_policy_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Act (and go on learning) with weights in :meth:`policy_arrays` layout."""
        ...


def encode_rng(rng: np.random.Generator) -> np.ndarray:
    """A generator's full state as a uint8 array (UTF-8 JSON), for a ``state_dict``."""
    text = json.dumps(rng.bit_generator.state, default=_jsonable, sort_keys=True)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def decode_rng(array: np.ndarray, key: str = "rng") -> np.random.Generator:
    """A new generator in the state that :func:`encode_rng` saved.

    Args:
        array: The uint8 array from :func:`encode_rng`.
        key: Name of the array in its ``state_dict``, for error messages.

    Raises:
        CheckpointError: the array is not an encoded generator state.
    """
    try:
        state = json.loads(np.asarray(array, dtype=np.uint8).tobytes().decode("utf-8"))
        name = state["bit_generator"]
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointError(f"array '{key}' is not an encoded generator state: {exc}") from exc
    if name not in _BIT_GENERATORS:
        raise CheckpointError(
            f"array '{key}': bit generator {name!r} is not one of {', '.join(_BIT_GENERATORS)}"
        )
    bit_generator = getattr(np.random, name)()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"cannot encode {type(value).__name__} in a generator state")
