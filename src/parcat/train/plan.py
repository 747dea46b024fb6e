"""The layout of a training run: environment workers and training threads, and why.

:class:`~parcat.train.trainer.Trainer` asks :func:`plan_training` for its layout, so a
``Trainer(config)`` built in Python is laid out as ``parcat train`` lays it out. The
decision itself is the pure :func:`make_train_plan`; :func:`plan_training` gathers its
inputs: the CPUs other processes leave free, the mission's agents and the time one step of
its environment takes (:mod:`parcat.train.steptime`).

Where the environments step never changes what they compute: the number of environments
comes from the config alone (``envs_per_worker`` times the workers ``jobs`` allows, at
least one), and seeds follow the environment's index, so a measured layout trains exactly
as ``--env-workers 0`` does with the same seed (sync mode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import cast

from parcat.core.errors import USER_CODE_ERRORS, ParcatError, clip
from parcat.core.raycluster import Backend
from parcat.core.resources import available_cpus, free_cpus
from parcat.envs.missions import Mission, is_foreign, load_mission
from parcat.ipc.process import SetupFailedError, call_in_worker
from parcat.train.config import LearningMode, TrainConfig
from parcat.train.steptime import StepTime, time_env_step

HANDOFF_S = 150e-6
"""What a vector step costs more per environment worker than stepping in-process: the
request/done handoff with the worker parked on its pipe (two process wake-ups) and the
lanes' arrays gathered. ``benchmarks/train_layout.py`` section 1 measured 100-170 us on the
2-vCPU development machine (BENCHMARKS.md, "Training layout"). Spinning costs less, but a
plan cannot count on it: a process that starts later takes the spinner's core."""
FIRST_WORKER_S = 0.3
"""Starting the first environment worker of a run (the fork server and its imports);
measured with :data:`HANDOFF_S`."""
NEXT_WORKER_S = 0.03
"""Starting each further environment worker; measured with :data:`HANDOFF_S`."""
MIN_GAIN = 0.2
"""Workers must cut the vector step's estimated time by at least this share: a layout that
is barely better on paper is not worth a timing error or a neighbour's start."""


@dataclass(frozen=True)
class TrainWorkload:
    """What the planner knows about a training run."""

    agents: int
    """Agents of the mission."""
    envs_per_worker: int = 1
    """The config's ``envs_per_worker``."""
    asynchronous: bool = False
    """``mode: async``: a learner process trains beside collection."""
    parallel_training: bool = False
    """Agents trained at the same time (threads)."""
    learners: int = 0
    """Learners to train (0: one per agent)."""
    train_threads: int = 0
    """The config's ``train_threads`` (0: one per learner)."""
    env_step_s: float | None = None
    """Measured seconds of one environment step; ``None``: not measured (the layout is
    ``jobs``' split, as without measuring)."""
    vector_steps: int = 0
    """Vector steps the run collects (``epochs`` times ``steps_per_epoch``)."""
    foreign: bool = False
    """The environment is code from outside parcat: it may crash the process it steps
    in, so it never steps in the trainer's (at least one environment worker)."""


@dataclass(frozen=True)
class TrainPlan:
    """How ``parcat train`` lays out collection and learning."""

    env_workers: int
    """Environment worker processes (0: environments step in the trainer's process)."""
    train_workers: int
    """Agents trained at the same time (threads; 1 means one after the other)."""
    spin: bool
    """Whether environment workers spin: only when they, the trainer and an async learner
    process fit the CPUs other processes leave free."""
    num_envs: int
    """Environments stepped together (wherever they step)."""
    reasons: tuple[str, ...] = ()
    """Why, one sentence per decision."""
    env_step_s: float | None = None
    """The measured seconds of one environment step the layout was chosen by, if any."""


def make_train_plan(work: TrainWorkload, free: int, jobs: int | None = None) -> TrainPlan:
    """Lay out a run on ``free`` CPUs, within ``jobs`` when given (pure).

    With ``jobs`` the trainer's own process counts as one job (it acts for every agent and,
    in sync mode, trains), an async learner process as another, every agent trained
    concurrently beyond the first as one more; the rest bounds the environment workers and
    sets how many environments there are. Environment workers are then used only where the
    measured step (``work.env_step_s``) makes them pay (:func:`choose_env_workers`), and
    only as many as the free CPUs hold beside the trainer (and the learner process).
    """
    if free < 1 or work.agents < 1 or (jobs is not None and jobs < 1):
        raise ValueError("free, jobs and agents must be >= 1")
    reasons: list[str] = []
    if jobs is None:
        learners = work.learners or work.agents
        train_workers = (work.train_threads or learners) if work.parallel_training else 1
        budget = None
    else:
        budget, train_workers = _split_jobs(jobs, work, reasons)
    num_envs = max(1, budget or 0) * work.envs_per_worker
    if work.env_step_s is None:
        env_workers = budget or 0
        if jobs is None:
            reasons.append("environments step in-process (no step time measured, no --jobs)")
        elif env_workers:
            reasons.append(f"{env_workers} environment worker(s) with the remaining jobs")
        else:
            reasons.append("no job left for environment workers: environments step in-process")
    else:
        env_workers = _measured_workers(work, free, budget, train_workers, num_envs, reasons)
    if work.foreign and env_workers == 0:
        env_workers = 1
        reasons.append(FOREIGN_REASON)
    spin = env_workers > 0 and _spin(env_workers, free, work.asynchronous)
    return TrainPlan(env_workers, train_workers, spin, num_envs, tuple(reasons),
                     work.env_step_s)


FOREIGN_REASON = ("the environment is code from outside parcat: it steps in an environment "
                  "worker instead, never in the trainer's process, so a crash restarts the "
                  "worker")


def _measured_workers(work: TrainWorkload, free: int, budget: int | None, train_workers: int,
                      num_envs: int, reasons: list[str]) -> int:
    """Environment workers for the measured step: within the free CPUs and the budget."""
    step_s = work.env_step_s or 0.0
    reasons.append(f"one environment step measured {_time(step_s)}: {num_envs} environment(s) "
                   f"take {_time(num_envs * step_s)} a vector step in-process")
    if budget == 0:
        reasons.append("no job left for environment workers: environments step in-process")
        return 0
    # an async learner process trains while the environments step: it needs its cores
    learning = train_workers if work.asynchronous else 0
    room = free - 1 - learning
    if room < 1:
        reasons.append(f"{free} free CPU(s), {1 + learning} kept for the trainer"
                       f"{' and the learner process' if learning else ''}: no core left for "
                       "an environment worker: environments step in-process")
        return 0
    most = room if budget is None else min(room, budget)
    workers, why = choose_env_workers(step_s, num_envs, most, work.vector_steps,
                                      local_share=not work.asynchronous)
    reasons.append(why)
    return workers


def _split_jobs(jobs: int, work: TrainWorkload, reasons: list[str]) -> tuple[int, int]:
    """(jobs left for environment workers, agents trained at once)."""
    reasons.append("the trainer's process acts for every agent: 1 job")
    left = jobs - 1
    train_workers = 1
    if work.asynchronous and left > 0:
        left -= 1
        reasons.append("async: the learner process trains while collection goes on: 1 job")
    if work.parallel_training:
        train_workers = max(1, min(work.agents, left + 1))
        left -= train_workers - 1
        reasons.append(f"--parallel-training: {train_workers} agent(s) trained at once")
    left = max(0, left)
    reasons.append(f"{left} job(s) left for environment workers: "
                   f"{max(1, left)} x envs_per_worker {work.envs_per_worker} environments")
    return left, train_workers


def choose_env_workers(step_s: float, num_envs: int, most: int, vector_steps: int,
                       local_share: bool = True) -> tuple[int, str]:
    """How many environment workers (at most ``most``) pay for themselves, and why (pure).

    A vector step in-process takes ``num_envs * step_s``; with ``W`` workers the slowest
    lane steps ``ceil(num_envs / lanes)`` environments (the trainer's process is a lane too
    in sync mode, ``local_share``) and every worker adds :data:`HANDOFF_S`. Workers are used
    when that saves at least :data:`MIN_GAIN` of the step and, over ``vector_steps``, more
    than starting them costs.
    """
    inline_s = num_envs * step_s
    best, best_s = 0, inline_s
    for workers in range(1, most + 1):
        lanes = min(num_envs, workers + (1 if local_share else 0))
        estimate = math.ceil(num_envs / lanes) * step_s + workers * HANDOFF_S
        if estimate < best_s:
            best, best_s = workers, estimate
    if best == 0:
        return 0, (f"an environment worker would cost more than it saves (handoff "
                   f"~{_time(HANDOFF_S)} a step): environments step in-process")
    start_s = FIRST_WORKER_S + (best - 1) * NEXT_WORKER_S
    saved_s = (inline_s - best_s) * vector_steps - start_s
    layout = (f"{best} environment worker(s) would take ~{_time(best_s)} a step "
              f"(~{_time(HANDOFF_S)} handoff each)")
    if inline_s - best_s < MIN_GAIN * inline_s:
        return 0, f"{layout}, less than {MIN_GAIN:.0%} faster: environments step in-process"
    if saved_s <= 0:
        return 0, (f"{layout}, but over {vector_steps} steps that saves less than starting "
                   f"them (~{start_s:.2f} s): environments step in-process")
    return best, f"{layout}: ~{saved_s:.1f} s saved over {vector_steps} steps"


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.1f} ms"


def _spin(env_workers: int, free: int, asynchronous: bool) -> bool:
    """Spin only while the workers, the trainer and (async) the learner fit the free CPUs."""
    return env_workers + 1 + (1 if asynchronous else 0) <= free


def plan_training(
    config: TrainConfig, mission: Mission | None = None, cpus: int | None = None
) -> TrainPlan:
    """The layout ``Trainer(config)`` runs with.

    Without ``config.env_workers`` the environment's step is timed (a few dozen
    milliseconds) and :func:`make_train_plan` chooses the layout on the CPUs free now;
    otherwise the config's own numbers are the layout (spinning still follows the free CPUs).

    Args:
        config: The training configuration.
        mission: Its mission, when already loaded (the plan needs the number of agents).
        cpus: CPUs this process may use (default: measured); other processes' load is
            subtracted (:func:`parcat.core.resources.free_cpus`).
    """
    cpus = available_cpus() if cpus is None else cpus
    free = free_cpus(cpus)
    mission = mission or load_mission(config.mission, dict(config.overrides))
    agents = len(mission.agents())
    asynchronous = config.mode is LearningMode.ASYNC
    if config.env_workers is None:
        step_s, note = _measure(mission, config)
        work = TrainWorkload(agents, config.envs_per_worker, asynchronous, config.parallel_training,
                        1 if config.shared_learner else agents, config.train_threads, step_s,
                        config.epochs * config.steps_per_epoch, is_foreign(mission))
        plan = make_train_plan(work, free, config.jobs)
        return plan if not note else _with_reason(plan, note)
    env_workers = config.env_workers
    learners = 1 if config.shared_learner else agents
    train_workers = (config.train_threads or learners) if config.parallel_training else 1
    if config.jobs is not None:
        why = f"env_workers is given ({env_workers}): jobs ({config.jobs}) is not split"
    else:
        why = f"{env_workers} environment worker(s) as configured"
    reasons: tuple[str, ...] = (why,)
    num_envs = max(1, env_workers) * config.envs_per_worker
    if env_workers == 0 and is_foreign(mission) and not config.render:  # render opts out
        env_workers, reasons = 1, (why, FOREIGN_REASON)
    spin = env_workers > 0 and _spin(env_workers, free, asynchronous)
    return TrainPlan(env_workers, train_workers, spin, num_envs, reasons=reasons)


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


def _with_reason(plan: TrainPlan, reason: str) -> TrainPlan:
    return replace(plan, reasons=(reason, *plan.reasons))
