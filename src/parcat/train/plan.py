"""The layout of a training run: environment workers and training threads, and why.

:class:`~parcat.train.trainer.Trainer` asks :func:`plan_training` for its layout, so a
``Trainer(config)`` built in Python is laid out as ``parcat train`` lays it out. The
decision itself is the pure :func:`make_train_plan`; :func:`plan_training` gathers its
inputs (the CPUs, the mission's agents).
"""

from __future__ import annotations

from dataclasses import dataclass

from parcat.missions import Mission, load_mission
from parcat.resources import available_cpus
from parcat.train.config import LearningMode, TrainConfig


@dataclass(frozen=True)
class TrainPlan:
    """How ``parcat train`` splits ``--jobs`` between collection and learning."""

    env_workers: int
    """Environment worker processes (0: environments step in the trainer's process)."""
    train_workers: int
    """Agents trained at the same time (threads; 1 means one after the other)."""
    spin: bool
    """Whether environment workers spin: only when they, the trainer and an async learner
    process fit the cores."""
    reasons: tuple[str, ...] = ()
    """Why, one sentence per decision."""


def make_train_plan(
    jobs: int, cpus: int, agents: int, asynchronous: bool, parallel_training: bool
) -> TrainPlan:
    """Split ``jobs`` between environment workers and training.

    The trainer's own process computes actions and (in sync mode) trains between
    collections, so it counts as one job; an async learner process needs a job of its own,
    as does every agent trained concurrently beyond the first.
    """
    if jobs < 1 or cpus < 1 or agents < 1:
        raise ValueError("jobs, cpus and agents must be >= 1")
    reasons = ["the trainer's process acts for every agent: 1 job"]
    left = jobs - 1
    train_workers = 1
    if asynchronous and left > 0:
        left -= 1
        reasons.append("async: the learner process trains while collection goes on: 1 job")
    if parallel_training:
        train_workers = max(1, min(agents, left + 1))
        left -= train_workers - 1
        reasons.append(f"--parallel-training: {train_workers} agent(s) trained at once")
    env_workers = max(0, left)
    if env_workers == 0:
        reasons.append("no job left for environment workers: environments step in-process")
    else:
        reasons.append(f"{env_workers} environment worker(s) with the remaining jobs")
    spin = _spin(env_workers, cpus, asynchronous)
    return TrainPlan(env_workers, train_workers, spin, tuple(reasons))


def _spin(env_workers: int, cpus: int, asynchronous: bool) -> bool:
    """Spin only while the workers, the trainer and (async) the learner fit the cores."""
    return env_workers + 1 + (1 if asynchronous else 0) <= cpus


def plan_training(
    config: TrainConfig, mission: Mission | None = None, cpus: int | None = None
) -> TrainPlan:
    """The layout ``Trainer(config)`` runs with.

    With ``config.jobs`` and no ``config.env_workers`` the planner splits the jobs between
    environment workers and training; otherwise the config's own numbers are the layout.

    Args:
        config: The training configuration.
        mission: Its mission, when already loaded (the plan needs the number of agents).
        cpus: CPUs this process may use (default: measured).
    """
    cpus = available_cpus() if cpus is None else cpus
    mission = mission or load_mission(config.mission, dict(config.overrides))
    agents = len(mission.agents())
    if config.jobs is not None and config.env_workers is None:
        return make_train_plan(config.jobs, cpus, agents, config.mode is LearningMode.ASYNC,
                               config.parallel_training)
    env_workers = config.env_workers or 0
    learners = 1 if config.shared_learner else agents
    train_workers = (config.train_threads or learners) if config.parallel_training else 1
    if config.jobs is not None:
        why = f"env_workers is given ({env_workers}): jobs ({config.jobs}) is not split"
    else:
        why = f"{env_workers} environment worker(s) as configured (jobs would plan them)"
    spin = _spin(env_workers, cpus, config.mode is LearningMode.ASYNC)
    return TrainPlan(env_workers, train_workers, spin, reasons=(why,))
