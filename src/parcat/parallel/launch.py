"""From user options to a plan and an executor: measuring, planning, building.

The planner itself is pure (:mod:`parcat.parallel.planner`); this module gathers its
inputs (CPUs, GPUs, agents per episode, the measured cost of a policy step) and turns the
plan into an executor.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parcat.core.errors import ConfigError
from parcat.core.raycluster import Backend
from parcat.core.resources import available_cpus, free_cpus, pids_headroom, visible_gpus
from parcat.envs.missions import Mission, is_foreign
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.ipc.process import (
    TASKS_PER_WORKER,
    Handlers,
    StartMethod,
    WorkerLostError,
    WorkerRaisedError,
    start_worker,
)
from parcat.parallel.executors import Executor, InlineExecutor, ThreadExecutor
from parcat.parallel.planner import ExecutorKind, Plan, PolicyStrategy, Workload, make_plan
from parcat.parallel.process_executor import ProcessExecutor
from parcat.policies.specs import PolicySpec, foreign_code
from parcat.stepping.base import InlineStepper
from parcat.stepping.config import StepperConfig

# Backend and StartMethod are the words of RunOptions; they are defined where they are used
__all__ = ["Backend", "RunOptions", "StartMethod", "first_foreign_code", "make_executor",
           "measure_policy_step", "plan_run", "process_limit"]

HANDOFF_S = 20e-6
"""Cost of handing a step to a spinning policy worker and back, with margin: the
benchmark measures 2–10 µs per agent-step (BENCHMARKS.md)."""
CALIBRATION_STEPS = 20
FDS_PER_WORKER = 8
"""Open files a worker costs its parent (pipe, sentinel, shared memory), with margin."""
FDS_RESERVED = 64
"""Open files kept for everything else (imports, the results file, the terminal)."""
CALIBRATION_BUDGET_S = 0.25
CALIBRATION_TIMEOUT_S = 60.0
"""Longest wait for a calibration worker to start (imports included)."""
CALIBRATION_WAIT_S = 2.0
"""Longest wait for its measurement: a policy that takes longer is that slow."""


@dataclass(frozen=True)
class RunOptions:
    """Where and how to run, independent of what is run (never changes the results)."""

    jobs: int | None = None
    """Worker budget; ``None`` means the CPUs this process may use."""
    executor: ExecutorKind = ExecutorKind.AUTO
    """Where episodes run."""
    parallel_policy: bool = False
    """Agent-level parallelism within episodes."""
    policy_strategy: PolicyStrategy = PolicyStrategy.AUTO
    """How agents are stepped when ``parallel_policy``."""
    action_timeout_ms: float | None = None
    """Late actions are replaced by the mission's default action."""
    gpus: int | None = None
    """GPUs to use; ``None`` detects them."""
    start_method: StartMethod | None = None
    """How worker processes start; ``None``: ``forkserver`` where the platform has it."""
    trace: bool = False
    """Record a timeline."""
    retries: int = 1
    """Times an episode whose worker died is run again in a fresh worker."""
    episode_timeout_s: float | None = None
    """Episodes running longer are stopped and recorded as timeouts (needs worker processes)."""
    fail_fast: bool = False
    """Stop the run at the first failed episode."""
    address: str | None = None
    """Ray cluster address with the Ray executor (``None``: start a local cluster)."""

    def __post_init__(self) -> None:
        # accept the CLI's words from Python too: RunOptions(policy_strategy="process")
        for name, kind in (("executor", ExecutorKind), ("policy_strategy", PolicyStrategy),
                           ("start_method", StartMethod)):
            value = getattr(self, name)
            if value is None and name == "start_method":
                continue
            try:
                object.__setattr__(self, name, kind(value))
            except ValueError:
                valid = ", ".join(k.value for k in kind)
                flag = name.replace("_", "-")
                raise ConfigError(f"--{flag} must be one of {valid}, got {value!r}") from None
        if self.address is not None and self.executor is not ExecutorKind.RAY:
            raise ConfigError("--address needs --backend ray")
        if self.episode_timeout_s is not None and self.executor is ExecutorKind.THREAD:
            raise ConfigError(
                "--episode-timeout cannot stop an episode on a thread; use --executor "
                "inline, process, ray or auto"
            )
        if self.retries < 0:
            raise ConfigError(f"--retries must be >= 0, got {self.retries}")
        if self.episode_timeout_s is not None and not self.episode_timeout_s > 0:
            raise ConfigError(f"--episode-timeout must be > 0, got {self.episode_timeout_s}")
        if self.jobs is not None and (not isinstance(self.jobs, int) or self.jobs < 1):
            raise ConfigError(f"--jobs must be an integer >= 1, got {self.jobs!r}")
        if self.gpus is not None and self.gpus < 0:
            raise ConfigError(f"--gpus must be >= 0, got {self.gpus}")
        if self.action_timeout_ms is not None and not self.action_timeout_ms > 0:
            raise ConfigError(f"--action-timeout-ms must be > 0, got {self.action_timeout_ms}")
        if self.action_timeout_ms is not None and not self.parallel_policy:
            raise ConfigError(
                "--action-timeout-ms needs --parallel-policy: only a policy worker's late "
                "action can be replaced (inline steps cannot be interrupted)"
            )

    @property
    def start_method_name(self) -> str | None:
        """``start_method`` as multiprocessing names it (``None``: the default)."""
        return None if self.start_method is None else self.start_method.value

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the ``execution`` section of a results document)."""
        return {
            "jobs": self.jobs,
            "executor": self.executor.value,
            "parallel_policy": self.parallel_policy,
            "policy_strategy": self.policy_strategy.value,
            "action_timeout_ms": self.action_timeout_ms,
            "gpus": self.gpus,
            "start_method": self.start_method_name,
            "retries": self.retries,
            "episode_timeout_s": self.episode_timeout_s,
            "fail_fast": self.fail_fast,
            "address": self.address,
        }


def plan_run(
    missions: tuple[Mission, ...], policies: tuple[PolicySpec, ...], tasks: int,
    options: RunOptions, measure: bool = True,
) -> Plan:
    """Gather the planner's inputs for this run and ask it for a plan."""
    cpus = available_cpus()
    jobs = options.jobs or cpus
    gpus = visible_gpus() if options.gpus is None else options.gpus
    agents = max(len(m.agents()) for m in missions)
    step_s = None
    wants_auto = options.parallel_policy and options.policy_strategy is PolicyStrategy.AUTO
    foreign = first_foreign_code(missions, policies)
    if wants_auto and measure:
        # code from outside parcat is timed in a worker, where an exit cannot end the run
        step_s = (measure_policy_step(missions[0], policies) if foreign is None
                  else measure_in_a_worker(missions[0], policies, options.start_method_name))
    workload = Workload(
        tasks=tasks,
        agents=agents,
        parallel_policy=options.parallel_policy,
        strategy=options.policy_strategy,
        executor=options.executor,
        policy_step_s=step_s,
        handoff_s=HANDOFF_S,
        batchable=any(p.target in ("mlp", "noop") for p in policies),
        isolate=options.episode_timeout_s is not None,
        foreign_code=foreign,
        action_deadline=options.action_timeout_ms is not None,
        max_processes=process_limit(),
        steps=max(m.max_steps for m in missions),
        # what other processes leave free now: only an auto plan follows it
        free_cpus=free_cpus(cpus) if options.executor is ExecutorKind.AUTO else None,
    )
    return make_plan(jobs, cpus, gpus, workload)


def first_foreign_code(missions: tuple[Mission, ...],
                       policies: tuple[PolicySpec, ...]) -> str | None:
    """The first environment or policy reference from outside parcat, if any."""
    for mission in missions:
        if is_foreign(mission):
            return mission.env
        for spec in policies:
            reference = foreign_code(spec, mission)
            if reference is not None:
                return reference
    return None


def process_limit() -> int | None:
    """Worker processes the limits leave room for: open files (pipes, sentinels, blocks)
    and the pids cgroup (processes and threads)."""
    limits = []
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY:
            limits.append(max(1, (soft - FDS_RESERVED) // FDS_PER_WORKER))
    except (ImportError, OSError, ValueError):
        pass
    headroom = pids_headroom()
    if headroom is not None:
        # the fork server and the resource tracker come first
        limits.append(max(1, (headroom - 2) // TASKS_PER_WORKER))
    return min(limits) if limits else None


def make_executor(plan: Plan, options: RunOptions) -> Executor:
    """The executor the plan calls for."""
    timeout = None if options.action_timeout_ms is None else options.action_timeout_ms / 1000
    stepper = StepperConfig(
        strategy=plan.strategy,
        workers=plan.policy_workers,
        spin=plan.spin,
        action_timeout_s=timeout,
        start_method=options.start_method_name,
        blas_threads=plan.blas_threads,
        retries=options.retries,
    )
    if plan.executor is ExecutorKind.PROCESS and plan.local_lane:
        from parcat.parallel.hybrid_executor import HybridExecutor

        return HybridExecutor(
            plan.episode_workers - 1, stepper, options.start_method_name, plan.blas_threads,
            plan.gpus, options.trace, options.retries,
        )
    if plan.executor is ExecutorKind.PROCESS:
        return ProcessExecutor(
            plan.episode_workers, stepper, options.start_method_name, plan.blas_threads, plan.gpus,
            options.trace, options.retries, options.episode_timeout_s,
        )
    if plan.executor is ExecutorKind.THREAD:
        return ThreadExecutor(plan.episode_workers, stepper, options.trace)
    if plan.executor is ExecutorKind.RAY:
        from parcat.parallel.ray_executor import RayExecutor

        return RayExecutor(
            plan.episode_workers, stepper, options.address,
            cpus_per_task=max(1, plan.busy_processes // plan.episode_workers),
            gpus_per_task=1.0 if plan.gpus else 0.0, retries=options.retries,
            episode_timeout_s=options.episode_timeout_s, trace=options.trace,
        )
    return InlineExecutor(stepper, options.trace, options.episode_timeout_s)


def measure_policy_step(mission: Mission, policies: tuple[PolicySpec, ...]) -> float:
    """Median seconds of one agent's policy step over the first steps of a throwaway
    episode (:data:`CALIBRATION_STEPS`, or fewer once they took :data:`CALIBRATION_BUDGET_S`)."""
    stepper = _TimedStepper()

    def enough(task: EpisodeTask, steps: int) -> bool:
        timings = stepper.timings
        return len(timings) >= CALIBRATION_STEPS or sum(timings) > CALIBRATION_BUDGET_S

    runner = EpisodeRunner(stepper, on_step=enough)
    try:
        runner.run(EpisodeTask(mission, policies, seed=0, episode_index=0))
    finally:
        runner.close()
    if not stepper.timings:
        return 0.0
    return sorted(stepper.timings)[len(stepper.timings) // 2]


class _TimedStepper(InlineStepper):
    """Steps inline and keeps each step's time per agent."""

    def __init__(self) -> None:
        super().__init__()
        self.timings: list[float] = []

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        begin = time.perf_counter()
        actions = super().act(obs, live)
        self.timings.append((time.perf_counter() - begin) / max(1, len(actions)))
        return actions


def measure_in_a_worker(mission: Mission, policies: tuple[PolicySpec, ...],
                        start_method: str | None = None) -> float | None:
    """:func:`measure_policy_step` in a worker process; ``None`` if it failed there."""
    worker = start_worker(_calibration_worker, (), "parcat-calibration",
                          start_method=start_method)
    try:
        worker.wait_ready(CALIBRATION_TIMEOUT_S)
        try:
            return float(worker.call("measure", mission, policies, timeout=CALIBRATION_WAIT_S))
        except WorkerLostError:
            if worker.alive:  # still in its first steps: a policy step is that slow
                return CALIBRATION_WAIT_S
            raise
    except (WorkerLostError, WorkerRaisedError):
        return None
    finally:
        worker.stop(grace_s=0.5, terminate=True)


def _calibration_worker() -> Handlers:
    return Handlers({"measure": measure_policy_step})
