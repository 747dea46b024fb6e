"""Choosing and building learners: ``learner: {class: ..., ...}`` and ``--learner``.

A learner is a built-in short name (:data:`BUILTIN_LEARNERS`) or a ``module:Class``; the
rest of the ``learner`` mapping is its options. The trainer, the async learner process and
the greedy evaluation in a worker all build a learner from its :class:`LearnerRecipe`.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np

from parcat.core.errors import ConfigError, brief, clip
from parcat.core.imports import import_reference, is_reference
from parcat.ipc.process import SetupFailedError, call_in_worker, in_worker, mark_acting
from parcat.train.learner import Learner

if TYPE_CHECKING:  # config imports this module
    from parcat.envs.missions import Mission
    from parcat.train.config import TrainConfig

BUILTIN_LEARNERS = {"dqn": "parcat.train.dqn:DQNLearner", "ppo": "parcat.train.ppo:PPOLearner"}
"""Short names of parcat's learners, as ``--learner`` and ``learner: {class: ...}`` take them."""
DEFAULT_LEARNER = "dqn"
SHARED = "shared"
"""The recipe key of the one learner all agents share (``--shared-learner``)."""


def learner_name(options: Mapping[str, Any]) -> str:
    """The ``class`` of a ``learner`` mapping (``dqn`` when it names none)."""
    name = options.get("class", DEFAULT_LEARNER)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"learner: 'class' must be a learner name or 'module:Class', "
                          f"got {brief(name)}; built-ins: {', '.join(BUILTIN_LEARNERS)}")
    return name


def learner_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A ``learner`` mapping without its ``class``: the learner's own options."""
    return {key: value for key, value in options.items() if key != "class"}


def learner_class(options: Mapping[str, Any]) -> type:
    """The class a ``learner`` mapping names; :class:`ConfigError` listing the built-ins if
    none has that name or the reference does not import."""
    name = learner_name(options)
    reference = BUILTIN_LEARNERS.get(name.lower(), name)
    builtins = ", ".join(BUILTIN_LEARNERS)
    if not is_reference(reference):
        raise ConfigError(f"learner '{clip(name)}' is not a built-in ({builtins}) nor a "
                          "'module:Class' reference; give one with --learner or learner.class")
    try:
        cls = import_reference(reference)
    except (ImportError, AttributeError, ValueError) as exc:
        why = clip(f"{type(exc).__name__}: {exc}".splitlines()[0], 200)
        raise ConfigError(f"learner '{clip(name)}' cannot be imported ({why}); "
                          f"built-ins: {builtins}") from None
    if not isinstance(cls, type):
        raise ConfigError(f"learner '{clip(name)}' is a {type(cls).__name__}, not a class; "
                          f"built-ins: {builtins}")
    return cls


def check_learner_options(options: Any) -> None:
    """Resolve the learner class and let it check its options (its ``check_config``);
    :class:`ConfigError` for a bad class, an unknown option or a value out of range."""
    if not isinstance(options, Mapping):
        raise ConfigError(f"learner must be a mapping of keys to values, got {brief(options)}")
    check = getattr(learner_class(options), "check_config", None)
    if callable(check):
        check(learner_options(options))


def supported_actions(cls: type) -> tuple[type, ...]:
    """The action space classes a learner class declares (``action_spaces``)."""
    return tuple(getattr(cls, "action_spaces", (gymnasium.spaces.Discrete, gymnasium.spaces.Box)))


@dataclass(frozen=True)
class LearnerRecipe:
    """Everything one learner is built from, picklable (the class by reference); a shared
    learner's observation space includes the one-hot agent id."""

    cls: type
    observation_space: gymnasium.spaces.Box
    action_space: gymnasium.spaces.Space[Any]
    options: Mapping[str, Any]
    """The ``learner`` mapping without ``class``."""
    seed: int

    def build(self) -> Learner:
        """A fresh learner: ``cls.from_spaces(...)`` if it has one, else ``cls(...)``."""
        factory = getattr(self.cls, "from_spaces", self.cls)
        learner: Learner = factory(self.observation_space, self.action_space,
                                   dict(self.options), self.seed)
        return learner


def class_reference(cls: type) -> str:
    """``module:Class``, the way ``--learner`` names a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def check_builds(recipes: Mapping[str, LearnerRecipe]) -> None:
    """Build each learner from outside parcat once in a worker process first: a
    constructor that raises is a :class:`ConfigError`, one that exits, crashes or hangs a
    ``WorkerError``, each one line naming the learner class and agent."""
    items = list(recipes.items())
    if in_worker() or all(r.cls.__module__.startswith("parcat.") for _, r in items):
        return
    try:
        call_in_worker(_build_each, ([r for _, r in items],), "parcat-learner-setup")
    except (TypeError, AttributeError, pickle.PicklingError):
        return  # defined where a worker cannot import it: the trainer builds it in-process
    except SetupFailedError as exc:
        name, recipe = items[exc.acting or 0]
        whom = "shared by every agent" if name == SHARED else f"for agent '{clip(name)}'"
        raise exc.as_error(f"learner '{clip(class_reference(recipe.cls), 200)}' {whom}",
                           "while being built", ConfigError) from None


def _build_each(recipes: Sequence[LearnerRecipe]) -> None:
    for index, recipe in enumerate(recipes):
        mark_acting(index)
        recipe.build()
    mark_acting(None)


def learner_inputs(agents: list[Any], shared: bool) -> Callable[[Any, np.ndarray], np.ndarray]:
    """``(agent, observation) -> what the agent's learner observes``: a shared learner also
    sees the agent's one-hot id among ``agents``."""
    if not shared:
        return lambda agent, obs: obs
    index = {agent: i for i, agent in enumerate(agents)}
    return lambda agent, obs: with_agent_id(obs, index[agent], len(index))


def with_agent_id(obs: np.ndarray, index: int, num_agents: int) -> np.ndarray:
    """Flat observations followed by the one-hot id of agent ``index`` (shared learner)."""
    flat = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    one_hot = np.zeros((len(obs), num_agents), dtype=np.float32)
    one_hot[:, index] = 1.0
    return np.concatenate((flat, one_hot), axis=1)


def make_recipes(mission: Mission, config: TrainConfig) -> dict[str, LearnerRecipe]:
    """One recipe per learner by agent id (seeded ``seed * 1000 + agent index``), or one
    ``shared`` (seeded ``seed``, observing the observation plus the agent's one-hot id)."""
    cls, options = learner_class(config.learner), learner_options(config.learner)
    specs = mission.agents()
    if config.shared_learner:
        first = specs[0]
        space = first.observation_space
        low = np.concatenate((np.asarray(space.low, np.float32).reshape(-1),  # type: ignore[attr-defined]
                              np.zeros(len(specs), np.float32)))
        high = np.concatenate((np.asarray(space.high, np.float32).reshape(-1),  # type: ignore[attr-defined]
                               np.ones(len(specs), np.float32)))
        shared = gymnasium.spaces.Box(low, high, dtype=np.float32)
        return {SHARED: LearnerRecipe(cls, shared, first.action_space, options, config.seed)}
    return {
        str(spec.agent_id): LearnerRecipe(cls, spec.observation_space,  # type: ignore[arg-type]
                                          spec.action_space, options,
                                          config.seed * 1000 + index)
        for index, spec in enumerate(specs)}


def check_trainable(mission: Mission, config: TrainConfig) -> None:
    """Every agent observes a Box and acts in a space the chosen learner learns;
    :class:`ConfigError` naming the agent, its space, and the built-in learners that can."""
    if mission.turn_based:
        raise ConfigError(
            f"mission '{mission.name}' is turn-based (PettingZoo AEC): it trains by "
            "self-play (parcat.train.selfplay.SelfPlayTrainer, which parcat train picks)")
    cls = learner_class(config.learner)
    name = learner_name(config.learner)
    specs = mission.agents()
    for agent in specs:
        obs, act = agent.observation_space, agent.action_space
        if not isinstance(obs, gymnasium.spaces.Box):
            raise ConfigError(f"mission '{mission.name}': agent '{agent.agent_id}' observes "
                              f"{obs}; training needs Box observations")
        if not isinstance(act, supported_actions(cls)):
            able = [n for n, ref in BUILTIN_LEARNERS.items()
                    if isinstance(act, supported_actions(import_reference(ref)))]
            hint = f"use --learner {' or '.join(able)}" if able else "no built-in learner can"
            kinds = " and ".join(k.__name__ for k in supported_actions(cls))
            raise ConfigError(
                f"mission '{mission.name}': agent '{agent.agent_id}' has action space {act}; "
                f"the {clip(name)} learner learns {kinds} actions; {hint}")
        if config.shared_learner and (obs, act) != (specs[0].observation_space,
                                                    specs[0].action_space):
            raise ConfigError(
                f"--shared-learner: agent '{agent.agent_id}' has spaces {obs}, {act}, agent "
                f"'{specs[0].agent_id}' has {specs[0].observation_space}, "
                f"{specs[0].action_space}; one learner needs the same spaces (use --independent)")
