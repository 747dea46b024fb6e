"""``RunOptions`` (where and how to run, never what) and the plan they make for a run.

:func:`plan_run` gathers the planner's inputs (CPUs, GPUs, agents, limits, the measured
cost of a policy step) and returns a :class:`~parcat.parallel.planner.Plan` that carries
everything the executor and its workers need (:func:`~parcat.parallel.executors.make_executor`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields, replace
from typing import Any

from parcat.core.errors import ConfigError
from parcat.core.limits import MAX_LOCKSTEP, MAX_WORKERS, require_int
from parcat.core.raycluster import Backend
from parcat.core.resources import available_cpus, free_cpus, pids_headroom, visible_gpus
from parcat.envs.missions import Mission, is_foreign
from parcat.ipc.process import StartMethod
from parcat.ipc.start import TASKS_PER_WORKER
from parcat.parallel.calibration import (
    CALIBRATION_STEPS,
    WAITING_STEPS,
    StepTimes,
    measure_batch,
    measure_in_a_worker,
    measure_steps,
)
from parcat.parallel.planner import ExecutorKind, Plan, PolicyStrategy, Workload, make_plan
from parcat.policies.remote import is_url, served_stateless
from parcat.policies.specs import PolicySpec, foreign_code, has_batch_form

# Backend and StartMethod are the words of RunOptions; they are defined where they are used
__all__ = ["Backend", "RunOptions", "StartMethod", "first_foreign_code", "plan_run",
           "process_limit"]

FDS_PER_WORKER = 8
"""Open files a worker costs its parent (pipe, sentinel, shared memory), with margin."""
FDS_RESERVED = 64  # open files kept for everything else (imports, the results file, the terminal)


@dataclass(frozen=True)
class RunOptions:
    """Where and how to run, independent of what is run (never changes the results)."""

    jobs: int | None = None
    """Worker budget; ``None`` means the CPUs this process may use."""
    executor: ExecutorKind = ExecutorKind.AUTO
    parallel_policy: bool = False
    """Agent-level parallelism within episodes."""
    policy_strategy: PolicyStrategy = PolicyStrategy.AUTO
    action_timeout_ms: float | None = None
    """Late actions are replaced by the mission's default action."""
    gpus: int | None = None
    """GPUs to use; ``None`` detects them."""
    start_method: StartMethod | None = None
    """``None``: ``forkserver`` where the platform has it."""
    trace: bool = False
    retries: int = 1
    """Times an episode whose worker died is run again in a fresh worker."""
    episode_timeout_s: float | None = None
    """Episodes running longer are stopped and recorded as timeouts."""
    fail_fast: bool = False
    address: str | None = None
    """Ray cluster address with the Ray executor (``None``: start a local cluster)."""
    concurrency: int | None = None
    """Agent calls in flight at most when the policy step waits (``None``: auto, every
    agent of every episode up to :data:`~parcat.parallel.waiting.MAX_CONCURRENCY`)."""
    lockstep: int | None = None
    """Episodes each lane plays side by side, one policy call per step for all of them
    (``None``: the planner's choice)."""

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
        for flag, value, most in (("--jobs", self.jobs, None),
                                  ("--concurrency", self.concurrency, MAX_WORKERS),
                                  ("--lockstep", self.lockstep, MAX_LOCKSTEP)):
            if value is not None:
                require_int(flag, value, 1, most)
        if self.gpus is not None and self.gpus < 0:
            raise ConfigError(f"--gpus must be >= 0, got {self.gpus}")
        if self.action_timeout_ms is not None and not self.action_timeout_ms > 0:
            raise ConfigError(f"--action-timeout-ms must be > 0, got {self.action_timeout_ms}")

    @property
    def start_method_name(self) -> str | None:
        """``start_method`` as multiprocessing names it (``None``: the default)."""
        return None if self.start_method is None else self.start_method.value

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the ``execution`` section of a results document)."""
        return {f.name: v.value if isinstance(v := getattr(self, f.name), enum.Enum) else v
                for f in fields(self) if f.name != "trace"}


def plan_run(missions: tuple[Mission, ...], policies: tuple[PolicySpec, ...], tasks: int,
             options: RunOptions, measure: bool = True) -> Plan:
    """The plan for this run: its inputs gathered, the planner asked, the options carried."""
    cpus = available_cpus()
    foreign = first_foreign_code(missions, policies)
    step = _measured_step(missions, policies, options, foreign) if measure else None
    own_batch = next((p for p in policies if has_batch_form(p) and not is_url(p.target)), None)
    batch = step.batch if step is not None else None
    if batch is None and own_batch is not None and measure and _may_lockstep(options, tasks):
        batch = measure_batch(missions[0], own_batch)
    workload = Workload(
        tasks=tasks,
        agents=max(len(m.agents()) for m in missions),
        parallel_policy=options.parallel_policy,
        strategy=options.policy_strategy,
        executor=options.executor,
        step_s=None if step is None else step.wall_s,
        step_cpu_s=None if step is None else step.cpu_s,
        env_step_s=None if step is None else step.env_wall_s,
        env_step_cpu_s=None if step is None else step.env_cpu_s,
        async_calls=step is not None and step.async_calls,
        concurrency=options.concurrency,
        lockstep=options.lockstep,
        jobs_given=options.jobs is not None,
        batchable=any(has_batch_form(p) for p in policies) or batch is not None,
        batch=batch,
        isolate=options.episode_timeout_s is not None,
        served=all(is_url(p.target) and served_stateless(p.target) for p in policies),
        foreign_code=foreign,
        action_deadline=options.action_timeout_ms is not None,
        max_processes=process_limit(),
        steps=max(m.max_steps for m in missions),
        # what other processes leave free now: only an auto plan follows it
        free_cpus=free_cpus(cpus) if options.executor is ExecutorKind.AUTO else None,
    )
    gpus = visible_gpus() if options.gpus is None else options.gpus
    timeout_ms = options.action_timeout_ms
    return replace(
        make_plan(options.jobs or cpus, cpus, gpus, workload),
        start_method=options.start_method_name, trace=options.trace, retries=options.retries,
        episode_timeout_s=options.episode_timeout_s, address=options.address,
        action_timeout_s=None if timeout_ms is None else timeout_ms / 1000,
    )


def _may_lockstep(options: RunOptions, tasks: int) -> bool:
    """Whether the planner may choose how many episodes play in lockstep (only then is a
    batch cost worth timing)."""
    agents_apart = options.parallel_policy and options.policy_strategy in (
        PolicyStrategy.THREAD, PolicyStrategy.PROCESS)
    return tasks > 1 and options.lockstep is None and options.episode_timeout_s is None \
        and options.executor not in (ExecutorKind.THREAD, ExecutorKind.RAY) and not agents_apart


def _measured_step(missions: tuple[Mission, ...], policies: tuple[PolicySpec, ...],
                   options: RunOptions, foreign: str | None) -> StepTimes | None:
    """The policy and environment steps' wall and CPU times, where the plan depends on
    them: for an auto agent-level strategy, and for an auto plan of code from outside
    parcat (a policy or an environment that may wait, which parcat's own never do);
    ``None`` where it does not."""
    auto_agents = options.parallel_policy and options.policy_strategy is PolicyStrategy.AUTO
    sequential = options.jobs == 1 and options.concurrency is None  # --jobs 1: one at a time
    may_wait = options.executor is ExecutorKind.AUTO and not sequential and any(
        is_foreign(mission) or any(foreign_code(spec, mission) is not None for spec in policies)
        for mission in missions)
    if not (auto_agents or may_wait):
        return None
    # only an auto agent strategy needs more than whether the work waits
    steps = CALIBRATION_STEPS if auto_agents else WAITING_STEPS
    # code from outside parcat is timed in a worker, where an exit cannot end the run
    return (measure_steps(missions[0], policies, steps) if foreign is None
            else measure_in_a_worker(missions[0], policies, options.start_method_name, steps))


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
