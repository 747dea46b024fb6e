"""The layout of a training run: environment workers and training threads, and why.

:class:`~parcat.train.trainer.Trainer` asks :func:`plan_training` for its layout, so a
``Trainer(config)`` built in Python is laid out as ``parcat train`` lays it out. The
decision itself is the pure :func:`~parcat.parallel.planner.make_train_plan`; this module
gathers its inputs (the CPUs, the mission's agents).
"""

from __future__ import annotations

from parcat.missions import Mission, load_mission
from parcat.parallel.planner import TrainPlan, make_train_plan
from parcat.parallel.resources import available_cpus
from parcat.train.config import LearningMode, TrainConfig


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
    return TrainPlan(env_workers, train_workers, spin=env_workers + 1 <= cpus, reasons=(why,))
