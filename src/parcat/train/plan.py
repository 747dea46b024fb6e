"""The layout a ``Trainer`` runs with: its planner inputs gathered, the planner asked.

The decision is :func:`parcat.parallel.planner.make_train_plan`; this module measures the
free CPUs and one environment step. Where environments step never changes what they
compute: their number comes from the config alone and seeds follow their index.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from parcat.core.errors import USER_CODE_ERRORS, ParcatError, clip
from parcat.core.raycluster import Backend
from parcat.core.resources import available_cpus, free_cpus
from parcat.envs.missions import Mission, is_foreign, load_mission
from parcat.ipc.process import SetupFailedError, call_in_worker
from parcat.parallel.planner import TrainPlan, Workload, make_train_plan
from parcat.train.config import LearningMode, TrainConfig
from parcat.train.steptime import StepTime, time_env_step


def plan_training(config: TrainConfig, mission: Mission | None = None,
                  cpus: int | None = None) -> TrainPlan:
    """The layout ``Trainer(config)`` runs with.

    Without ``config.env_workers`` the environment's step is timed (a few dozen
    milliseconds) and the layout chosen on the CPUs free now; otherwise the config's own
    numbers are the layout (spinning still follows the free CPUs).
    """
    cpus = available_cpus() if cpus is None else cpus
    mission = mission or load_mission(config.mission, dict(config.overrides))
    agents = len(mission.agents())
    given = config.env_workers is not None
    step_s, note = (None, "") if given else _measure(mission, config)
    # a rendered run with given workers may step an outside environment in-process
    foreign = is_foreign(mission) and not (given and config.render)
    work = Workload(
        agents=agents, envs_per_worker=config.envs_per_worker,
        asynchronous=config.mode is LearningMode.ASYNC,
        parallel_training=config.parallel_training,
        learners=1 if config.shared_learner else agents, train_threads=config.train_threads,
        step_s=step_s, steps=_vector_steps(config),
        foreign_code=mission.env if foreign else None, env_workers=config.env_workers,
    )
    plan = make_train_plan(work, free_cpus(cpus), config.jobs)
    return replace(plan, reasons=(note, *plan.reasons)) if note else plan


def _vector_steps(config: TrainConfig) -> int:
    """The steps every environment takes in the run (with ``total_steps``, as if the
    configured environments were all: the layout is not chosen yet)."""
    if config.total_steps is None:
        return config.epochs * config.steps_per_epoch
    envs = max(1, config.env_workers or 0) * config.envs_per_worker
    return -(-config.total_steps // envs)


def _measure(mission: Mission, config: TrainConfig) -> tuple[float | None, str]:
    """The environment's step time, or ``None`` and why it was not measured."""
    if config.backend is Backend.RAY:
        return None, "backend ray: the actors' machines are not measured"
    try:
        if not is_foreign(mission):
            return time_env_step(mission, config.seed).step_s, ""
        # code from outside parcat is timed where its crash ends only a worker
        timed = call_in_worker(time_env_step, (mission, config.seed), "parcat-env-timing")
        return cast(StepTime, timed).step_s, ""
    except (SetupFailedError, ParcatError) as exc:
        return None, f"timing the environment failed (it {clip(str(exc), 120)})"
    except USER_CODE_ERRORS as exc:
        return None, f"timing the environment failed ({type(exc).__name__}: {clip(str(exc), 120)})"
