"""The resource planner: a pure function from resources × workload to a plan.

Measuring the machine (CPUs, GPUs) lives in :mod:`parcat.core.resources` and measuring the
workload in :mod:`parcat.parallel.launch`; this module only decides. The rules come from
what was measured on the target machines (BENCHMARKS.md):

- whole episodes per worker reach 0.93–1.0 efficiency, so episode-level parallelism takes
  the budget first whenever there are at least as many episodes as workers;
- agent-level parallelism uses what is left: each episode's process steps a share of the
  agents itself and hands the rest to policy workers;
- a handoff through shared memory with a spinning worker costs ~2 µs, but only while no
  more processes spin than there are cores; past that the workers block instead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from parcat.stepping.strategy import PolicyStrategy


class ExecutorKind(str, enum.Enum):
    """Where episodes run (``--executor``)."""

    AUTO = "auto"
    INLINE = "inline"
    THREAD = "thread"
    PROCESS = "process"
    RAY = "ray"


# A policy step must cost this many times the handoff before a policy worker pays off.
PROCESS_PAYOFF = 8.0
POLICY_WORKER_START_S = 0.3
"""What starting policy workers costs a run before they pay: a worker's start and its first
steps' handoffs (0.2 ms policies on 1,000-step episodes lost 7-16% to it: BENCHMARKS.md)."""


@dataclass(frozen=True)
class Workload:
    """What is to be run, and what it costs where that was measured."""

    tasks: int
    """Episodes to run (missions × episodes)."""
    agents: int
    """Agents per episode (the largest over the missions)."""
    parallel_policy: bool = False
    """Whether agent-level parallelism was asked for."""
    strategy: PolicyStrategy = PolicyStrategy.AUTO
    """The requested agent-level strategy."""
    executor: ExecutorKind = ExecutorKind.AUTO
    """The requested episode executor."""
    policy_step_s: float | None = None
    """Measured mean cost of one policy step of one agent, if measured."""
    handoff_s: float = 20e-6
    """Measured (or assumed) cost of handing one step to a policy worker and back."""
    batchable: bool = False
    """Whether some policy is shared by several agents and can act in one batch."""
    isolate: bool = False
    """Episodes must run in worker processes (so a hung one can be stopped)."""
    action_deadline: bool = False
    """An action timeout is set: no agent may step on the episode's own thread."""
    foreign_code: str | None = None
    """Code from outside parcat the episodes run (a policy or env reference), if any: it
    runs in worker processes, where exiting or crashing fails an episode, not the run."""
    max_processes: int | None = None
    """Most worker processes the open-file and pids limits allow (``None``: no limit)."""
    steps: int | None = None
    """Steps per episode (the longest mission's ``max_steps``), if known: with the policy
    step cost it tells whether the run's policy work can pay for starting policy workers."""
    free_cpus: int | None = None
    """CPUs not kept busy by other processes right now (``None``: not measured). An
    ``auto`` plan never has more busy processes than this: on a machine whose other cores
    are taken, a second process only takes turns with the first."""


@dataclass(frozen=True)
class Plan:
    """The decision: how many processes of each kind, and how they wait."""

    jobs: int
    """The budget that was asked for (``--jobs``)."""
    executor: ExecutorKind
    """Where episodes run."""
    episode_workers: int
    """Episodes that run at once."""
    strategy: PolicyStrategy
    """The resolved agent-level strategy (never ``auto``)."""
    policy_workers: int
    """Policy worker processes (or threads) per episode, besides the episode's own process."""
    blas_threads: int
    """BLAS/OpenMP threads each worker may use."""
    spin: bool
    """Whether policy workers spin on shared memory (never more spinners than cores)."""
    gpus: tuple[str, ...] = ()
    """``CUDA_VISIBLE_DEVICES`` value per episode worker, round-robin; empty without GPUs."""
    free_cpus: int | None = None
    """The free CPUs measured when planning (``None``: not measured), for the record."""
    local_lane: bool = False
    """This process is one of the ``episode_workers`` lanes (the process executor then
    starts one worker fewer, in the background): see :mod:`parcat.parallel.hybrid_executor`."""
    reasons: tuple[str, ...] = field(default_factory=tuple)
    """Why, one sentence per decision (``parcat plan`` prints them)."""

    @property
    def busy_processes(self) -> int:
        """Processes that compute at the same time under this plan."""
        per_episode = 1 + (self.policy_workers if self.strategy is PolicyStrategy.PROCESS else 0)
        return self.episode_workers * per_episode


def make_plan(jobs: int, cpus: int, gpus: int, workload: Workload) -> Plan:
    """Decide episode workers × policy workers so busy processes never exceed ``jobs``.

    Args:
        jobs: The worker budget (``--jobs``), at least 1.
        cpus: CPUs this process may use.
        gpus: GPUs visible (``--gpus`` or detected).
        workload: The work and its measured costs.
    """
    if jobs < 1 or cpus < 1 or gpus < 0 or workload.tasks < 0 or workload.agents < 1:
        raise ValueError("jobs and cpus must be >= 1, gpus and tasks >= 0, agents >= 1")
    reasons: list[str] = []
    tasks = max(workload.tasks, 1)
    jobs = _trimmed(jobs, cpus, workload, reasons)
    episode_workers = min(jobs, tasks)
    if episode_workers < jobs:
        reasons.append(
            f"--jobs {jobs} is more than the {workload.tasks} episodes: "
            f"{episode_workers} episode worker(s), {jobs - episode_workers} job(s) left"
        )
    else:
        reasons.append(f"{episode_workers} episode worker(s): one episode per job at a time")
    executor = _executor(workload, episode_workers, reasons)
    if executor is ExecutorKind.INLINE:
        episode_workers = 1
    local_lane = (executor is ExecutorKind.PROCESS and workload.executor is ExecutorKind.AUTO
                  and not workload.isolate and not workload.foreign_code and not gpus)
    if local_lane:
        reasons.append(
            f"this process runs episodes too, as one of the {episode_workers} lanes: the first "
            f"episode starts at once and {episode_workers - 1} worker(s) join as they start"
        )
    strategy, policy_workers = _agent_level(jobs, episode_workers, workload, reasons)
    busy = episode_workers * (1 + (policy_workers if strategy is PolicyStrategy.PROCESS else 0))
    spin = busy <= cpus
    if strategy is PolicyStrategy.PROCESS:
        reasons.append(
            f"{busy} busy process(es) on {cpus} CPU(s): policy workers "
            + ("spin on shared memory" if spin else "block (a spinner per core at most)")
        )
    threads_per_episode = 1 + (policy_workers if strategy is PolicyStrategy.THREAD else 0)
    blas_threads = max(1, jobs // max(busy, episode_workers * threads_per_episode))
    reasons.append(f"BLAS/OpenMP threads per worker: {blas_threads}")
    gpu_ids = tuple(str(i % gpus) for i in range(episode_workers)) if gpus else ()
    if gpus:
        reasons.append(f"{gpus} GPU(s) assigned round-robin to {episode_workers} worker(s)")
    return Plan(
        jobs=jobs,
        executor=executor,
        episode_workers=episode_workers,
        strategy=strategy,
        policy_workers=policy_workers,
        blas_threads=blas_threads,
        spin=spin,
        gpus=gpu_ids,
        reasons=tuple(reasons),
        free_cpus=workload.free_cpus,
        local_lane=local_lane,
    )


def _agent_level(jobs: int, episode_workers: int, workload: Workload,
                 reasons: list[str]) -> tuple[PolicyStrategy, int]:
    """The agent-level strategy and policy workers; a deadline needs a policy thread."""
    strategy, policy_workers = _strategy(jobs, episode_workers, workload, reasons)
    if workload.action_deadline and strategy in (PolicyStrategy.INLINE, PolicyStrategy.BATCH):
        reasons.append("--action-timeout-ms: agents step on a policy thread, so a late "
                       "action can be replaced (no extra process)")
        return PolicyStrategy.THREAD, max(1, policy_workers)
    return strategy, policy_workers


def _trimmed(jobs: int, cpus: int, workload: Workload, reasons: list[str]) -> int:
    """``jobs`` within the process limits and, for an auto plan, the CPUs left free."""
    cap = workload.max_processes
    if cap is not None and cap < jobs:
        reasons.append(f"the open-file and process limits allow {max(cap, 1)} worker "
                       f"process(es): --jobs {jobs} trimmed to {max(cap, 1)}")
        jobs = max(cap, 1)
    free = workload.free_cpus
    if free is not None and free < min(jobs, cpus) and workload.executor is ExecutorKind.AUTO:
        reasons.append(f"{cpus - free} of the {cpus} CPU(s) are busy with other processes: "
                       f"--jobs {jobs} trimmed to {max(free, 1)}")
        jobs = max(free, 1)
    return jobs


def _executor(workload: Workload, episode_workers: int, reasons: list[str]) -> ExecutorKind:
    requested, foreign = workload.executor, workload.foreign_code
    if requested is not ExecutorKind.AUTO:
        unsafe = requested in (ExecutorKind.INLINE, ExecutorKind.THREAD) and foreign
        reasons.append(f"executor {requested.value} (as requested)" + (
            f": '{foreign}' runs in this process, so its exit or crash ends the run"
            if unsafe else ""))
        return requested
    if workload.isolate:
        reasons.append("executor process: only a worker process can be stopped mid-episode")
        return ExecutorKind.PROCESS
    if foreign:
        reasons.append(f"executor process: '{foreign}' is code from outside parcat; in a "
                       "worker process its exit or crash fails an episode, not the run")
        return ExecutorKind.PROCESS
    if episode_workers == 1:
        reasons.append("executor inline: one episode at a time runs in this process")
        return ExecutorKind.INLINE
    reasons.append("executor process: Python episode loops need processes, not threads")
    return ExecutorKind.PROCESS


def _strategy(
    jobs: int, episode_workers: int, workload: Workload, reasons: list[str]
) -> tuple[PolicyStrategy, int]:
    requested = workload.strategy
    if not workload.parallel_policy:
        reasons.append("agents stepped inline (no --parallel-policy)")
        return PolicyStrategy.INLINE, 0
    if workload.agents < 2 and requested is not PolicyStrategy.BATCH:
        reasons.append("one agent per episode: agent-level parallelism has nothing to split")
        return PolicyStrategy.INLINE, 0
    spare = jobs // episode_workers - 1
    if requested is PolicyStrategy.AUTO:
        requested = _auto_strategy(workload, spare, reasons)
        if requested is not PolicyStrategy.PROCESS:
            return requested, 0
    if requested in (PolicyStrategy.INLINE, PolicyStrategy.BATCH):
        reasons.append(f"agents stepped {requested.value}")
        return requested, 0
    if spare < 1:
        reasons.append(
            f"no job left for policy workers ({episode_workers} episode worker(s) use all "
            f"{jobs}): agents stepped inline"
        )
        return PolicyStrategy.INLINE, 0
    # the episode's own process steps one share of the agents itself
    workers = min(spare, workload.agents - 1)
    reasons.append(
        f"{workers} {requested.value} policy worker(s) per episode; the episode's process "
        f"steps a share of the {workload.agents} agents itself"
    )
    return requested, workers


def _auto_strategy(workload: Workload, spare: int, reasons: list[str]) -> PolicyStrategy:
    cost = workload.policy_step_s
    if cost is None:
        reasons.append("auto: policy step cost unknown, agents stepped inline")
        return PolicyStrategy.INLINE
    if spare >= 1 and cost >= PROCESS_PAYOFF * workload.handoff_s and \
            not _too_short_for_workers(workload, cost, spare, reasons):
        reasons.append(
            f"auto: a policy step costs {cost * 1e6:.0f} us, >= {PROCESS_PAYOFF:g}x the "
            f"{workload.handoff_s * 1e6:.0f} us handoff: process"
        )
        return PolicyStrategy.PROCESS
    if workload.batchable:
        reasons.append("auto: agents share a stateless policy: batch")
        return PolicyStrategy.BATCH
    why = "no job left" if spare < 1 else f"a policy step costs only {cost * 1e6:.1f} us"
    reasons.append(f"auto: {why}: inline")
    return PolicyStrategy.INLINE


def _too_short_for_workers(workload: Workload, cost: float, spare: int,
                           reasons: list[str]) -> bool:
    """Whether the whole run's policy work is too little to pay for starting policy
    workers (then the caller steps agents inline and says why)."""
    if workload.steps is None:
        return False
    moved = workload.agents * min(spare, workload.agents - 1) / (1 + min(spare,
                                                                          workload.agents - 1))
    saved = cost * workload.steps * max(1, workload.tasks) * moved
    if saved >= 2 * POLICY_WORKER_START_S:
        return False
    reasons.append(f"auto: the run's policy steps would save at most ~{saved:.2f} s on policy "
                   f"workers, less than twice the ~{POLICY_WORKER_START_S:g} s of starting them")
    return True
