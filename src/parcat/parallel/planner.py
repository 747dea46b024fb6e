"""The planner: pure functions from resources × :class:`Workload` to a plan, with reasons.

One workload model serves eval (:func:`make_plan`: episode workers × policy workers) and
train (:func:`make_train_plan`: environment workers and training threads); measuring the
machine and the workload happens elsewhere. The rules follow BENCHMARKS.md: whole episodes
per worker take the budget first, agent-level parallelism uses what is left, and a worker
takes over a step only where the step costs well above the handoff to it. A policy step
that waits (its CPU time well under its wall time) is planned by concurrency instead: its
calls in flight on threads, processes only for its CPU part (:mod:`parcat.parallel.waiting`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from parcat.parallel.waiting import plan_concurrency, step_waits
from parcat.stepping.strategy import PolicyStrategy


class ExecutorKind(str, enum.Enum):
    """Where episodes run (``--executor``)."""

    AUTO = "auto"
    INLINE = "inline"
    THREAD = "thread"
    PROCESS = "process"
    RAY = "ray"


SPIN_HANDOFF_S = 20e-6
"""A step handed to a spinning worker and back, with margin (2–10 µs measured)."""
PARKED_HANDOFF_S = 150e-6
"""A step handed to a worker parked on its pipe (two wake-ups) and the arrays gathered:
what a training plan counts on, since a later process may take a spinner's core."""
PROCESS_PAYOFF = 8.0  # a policy step must cost this many handoffs before a policy worker pays
POLICY_WORKER_START_S = 0.3
"""Starting policy workers: a worker's start and its first steps' handoffs."""
FIRST_WORKER_S = 0.3  # starting a run's first environment worker (the fork server and its imports)
NEXT_WORKER_S = 0.03  # starting each further environment worker
MIN_GAIN = 0.2
"""Environment workers must cut a vector step by this share to be worth a timing error."""
LOCKSTEP_AUTO = 64
"""Most episodes an auto plan plays side by side in a lane: 64 harvest episodes of 24 agents
are batches of 1,536 rows, where the mlp's cost per row has stopped falling (BENCHMARKS.md,
"Episodes in lockstep")."""
LOCKSTEP_ROUND_S = 50e-6
"""parcat's own cost of a lockstep round's call beyond the policy's (gathering the
observations, scattering the actions), which fewer episodes a round pay more often."""
BATCH_OVERHEAD = 0.05
"""With a measured batch cost, lockstep plays the fewest episodes that bring a call's fixed
cost below this share of its rows' cost (more only wait longer for the same arithmetic)."""
FOREIGN_REASON = ("the environment is code from outside parcat: it steps in an environment "
                  "worker instead, never in the trainer's process, so a crash restarts the "
                  "worker")


@dataclass(frozen=True)
class BatchCost:
    """What one call of a shared policy's ``step_batch`` cost (CPU seconds, best of a few)
    at two batch sizes: the agents of one episode, and many episodes' worth."""

    rows: tuple[int, int]
    seconds: tuple[float, float]

    def fit(self) -> tuple[float, float]:
        """The line through both points: seconds a call costs whatever its size, and
        seconds a row (never below zero: timing noise can tilt the line)."""
        (small, large), (t_small, t_large) = self.rows, self.seconds
        per_row = max(0.0, (t_large - t_small) / (large - small))
        return max(0.0, t_small - small * per_row), per_row


@dataclass(frozen=True)
class Workload:
    """What is to be run, and what it costs where that was measured (eval and train)."""

    tasks: int = 0
    """Episodes to run (eval)."""
    agents: int = 1
    """Agents per episode (the largest over the missions)."""
    parallel_policy: bool = False
    strategy: PolicyStrategy = PolicyStrategy.AUTO
    executor: ExecutorKind = ExecutorKind.AUTO
    step_s: float | None = None
    """Measured seconds of the step a worker would take over: one agent's policy step
    (eval), one environment step (train); ``None``: not measured."""
    step_cpu_s: float | None = None
    """CPU seconds of that step (the stepping thread's); far below ``step_s``, the step
    waits (:func:`~parcat.parallel.waiting.step_waits`); ``None``: not measured."""
    env_step_s: float | None = None
    """Measured seconds of one environment step (eval; ``None``: not measured)."""
    env_step_cpu_s: float | None = None
    """CPU seconds of that step: far below ``env_step_s``, the environment waits."""
    batch: BatchCost | None = None
    """A shared policy's measured batch cost (``None``: not measured): lockstep plays as
    many episodes as make its calls' fixed cost small beside their rows'."""
    async_calls: bool = False
    """The policies' calls are async (``async def step``): lockstep puts every episode's
    calls in flight on one event loop, no thread per episode."""
    concurrency: int | None = None
    """``--concurrency``: agent calls of waiting work in flight at most (``None``: auto)."""
    lockstep: int | None = None
    """``--lockstep``: episodes played side by side per lane (``None``: auto)."""
    jobs_given: bool = False
    """The user gave ``--jobs``: trimming it is said in a note."""
    handoff_s: float = SPIN_HANDOFF_S
    batchable: bool = False
    """Some policy is shared by several agents and can act in one batch."""
    isolate: bool = False
    """Episodes must run in worker processes (an episode timeout)."""
    action_deadline: bool = False
    """An action timeout is set: no agent may step on the episode's own thread."""
    served: bool = False
    """Every policy is a stateless one served from elsewhere (``http://``, ``unix:``): a
    call costs a round trip whatever its rows, and the lanes only step environments."""
    foreign_code: str | None = None
    """Code from outside parcat the run executes, if any: it runs in worker processes,
    where exiting or crashing fails an episode (or restarts a worker), not the run."""
    max_processes: int | None = None
    steps: int | None = None
    """Steps the run takes: per episode (eval), vector steps in all (train)."""
    free_cpus: int | None = None
    """CPUs other processes leave free now (``None``: not measured); an auto plan never
    has more busy processes than this."""
    # training: the config's values; learners 0 is one per agent, train_threads 0 one per
    # learner, env_workers None: planned
    envs_per_worker: int = 1
    asynchronous: bool = False
    parallel_training: bool = False
    learners: int = 0
    train_threads: int = 0
    env_workers: int | None = None


@dataclass(frozen=True)
class Plan:
    """How an eval run uses the machine: everything its executor and workers need."""

    jobs: int
    executor: ExecutorKind
    episode_workers: int
    """Episode lanes: worker processes, threads, or this process (each runs
    ``episodes_per_worker`` episodes at once)."""
    strategy: PolicyStrategy
    """The resolved agent-level strategy (never ``auto``)."""
    policy_workers: int
    """Policy worker processes (or threads) per episode, besides the episode's own process."""
    blas_threads: int
    spin: bool
    """Whether policy workers spin on shared memory (never more spinners than cores)."""
    gpus: tuple[str, ...] = ()
    """``CUDA_VISIBLE_DEVICES`` value per episode worker, round-robin."""
    free_cpus: int | None = None
    local_lane: bool = False
    """This process is one of the episode lanes (:mod:`parcat.parallel.hybrid_executor`)."""
    reasons: tuple[str, ...] = field(default_factory=tuple)
    """Why, one sentence per decision (``parcat plan`` prints them)."""
    episodes_per_worker: int = 1
    """Episodes in flight at once in each episode worker process: on threads for work
    that waits, else the ``lockstep`` episodes."""
    lockstep: int = 1
    """Episodes each lane plays side by side, one policy call per step for all of them
    (``--lockstep``)."""
    concurrency: int = 1
    """Agent calls in flight at most: the limit for work that waits; otherwise the
    episodes and policy workers that step at once."""
    notes: tuple[str, ...] = ()
    """Where the plan differs from what the user explicitly asked, and why (``parcat
    eval`` prints each on stderr)."""
    # how the workers run, as RunOptions said (parcat.parallel.run_options)
    start_method: str | None = None
    trace: bool = False
    retries: int = 1
    episode_timeout_s: float | None = None
    action_timeout_s: float | None = None
    address: str | None = None

    @property
    def busy_processes(self) -> int:
        """Processes that compute at the same time under this plan."""
        per_episode = 1 + (self.policy_workers if self.strategy is PolicyStrategy.PROCESS else 0)
        return self.episode_workers * per_episode


@dataclass(frozen=True)
class TrainPlan:
    """How ``parcat train`` lays out collection and learning."""

    env_workers: int
    """Environment worker processes (0: environments step in the trainer's process)."""
    train_workers: int
    """Agents trained at the same time (threads; 1 means one after the other)."""
    spin: bool
    """Only when the workers, the trainer and an async learner process fit the free CPUs."""
    num_envs: int
    """Environments stepped together (wherever they step)."""
    reasons: tuple[str, ...] = ()
    env_step_s: float | None = None
    """The measured environment step the layout was chosen by, if any."""


def make_plan(jobs: int, cpus: int, gpus: int, workload: Workload) -> Plan:
    """Decide episode workers × policy workers so busy processes never exceed ``jobs``."""
    if jobs < 1 or cpus < 1 or gpus < 0 or workload.tasks < 0 or workload.agents < 1:
        raise ValueError("jobs and cpus must be >= 1, gpus and tasks >= 0, agents >= 1")
    reasons: list[str] = []
    notes: list[str] = []
    if _plans_waiting(jobs, workload, reasons):
        return _waiting_plan(jobs, cpus, gpus, workload, reasons, notes)
    if workload.concurrency is not None:
        notes.append(f"--concurrency {workload.concurrency} unused: it limits a policy step "
                     "that waits, and this one was not measured waiting (a policy from "
                     "outside parcat is timed in an auto plan)")
    jobs = _trimmed(jobs, cpus, workload, reasons, notes)
    episode_workers = min(jobs, max(workload.tasks, 1))
    served_lanes = _served_lanes(workload, episode_workers, reasons)
    if served_lanes < episode_workers:
        episode_workers = served_lanes
    elif episode_workers < jobs:
        reasons.append(
            f"--jobs {jobs} is more than the {workload.tasks} episodes: "
            f"{episode_workers} episode worker(s), {jobs - episode_workers} job(s) left"
        )
    else:
        reasons.append(f"{episode_workers} episode worker(s): one lane per job")
    executor = _executor(workload, episode_workers, reasons)
    if executor is ExecutorKind.INLINE:
        episode_workers = 1
    strategy, policy_workers = _strategy(jobs, episode_workers, workload, reasons)
    if workload.action_deadline and strategy in (PolicyStrategy.INLINE, PolicyStrategy.BATCH):
        reasons.append("--action-timeout-ms: agents step on a policy thread, so a late "
                       "action can be replaced (no extra process)")
        strategy, policy_workers = PolicyStrategy.THREAD, max(1, policy_workers)
    _note_strategy(workload, strategy, reasons, notes)
    lockstep = _lockstep(workload, executor, strategy, episode_workers, reasons, notes)
    local_lane = _local_lane(workload, executor, gpus, lockstep, episode_workers, reasons)
    busy = episode_workers * (1 + (policy_workers if strategy is PolicyStrategy.PROCESS else 0))
    # a spin on a contested core is paid by the process it waits for (BENCHMARKS.md,
    # "Keep only what pays"): spin only while every busy process has a free CPU
    cores = cpus if workload.free_cpus is None else min(cpus, max(workload.free_cpus, 1))
    spin = busy <= cores
    if strategy is PolicyStrategy.PROCESS:
        reasons.append(
            f"{busy} busy process(es) on {cores} free CPU(s): policy workers "
            + ("spin on shared memory" if spin else "block (a spinner per core at most)")
        )
    threads_per_episode = 1 + (policy_workers if strategy is PolicyStrategy.THREAD else 0)
    blas_threads = max(1, jobs // max(busy, episode_workers * threads_per_episode))
    reasons.append(f"BLAS/OpenMP threads per worker: {blas_threads}")
    gpu_ids = tuple(str(i % gpus) for i in range(episode_workers)) if gpus else ()
    if gpus:
        reasons.append(f"{gpus} GPU(s) assigned round-robin to {episode_workers} worker(s)")
    in_flight = episode_workers * (1 + (policy_workers if strategy in (
        PolicyStrategy.THREAD, PolicyStrategy.PROCESS) else 0))
    return Plan(jobs, executor, episode_workers, strategy, policy_workers, blas_threads, spin,
                gpu_ids, workload.free_cpus, local_lane, tuple(reasons),
                episodes_per_worker=lockstep, lockstep=lockstep, concurrency=in_flight,
                notes=tuple(notes))


def _served_lanes(workload: Workload, lanes: int, reasons: list[str]) -> int:
    """Lanes for an auto plan of served stateless policies: as few as hold every episode
    in lockstep. Each lane's step is one request whatever its rows, so more lanes send
    more, smaller requests, and a lane that joins late plays its episodes after this
    one's (measured: 16 harvest episodes on 2 lanes took 1.3x as long as on one)."""
    if lanes < 2 or not workload.served or workload.executor is not ExecutorKind.AUTO \
            or workload.jobs_given or workload.isolate or workload.lockstep is not None \
            or workload.parallel_policy or workload.action_deadline:
        return lanes
    needed = min(lanes, math.ceil(max(workload.tasks, 1) / LOCKSTEP_AUTO))
    if needed < lanes:
        reasons.append(f"the policies are served and stateless: a lane sends one request a "
                       f"step for all its episodes, so {needed} lane(s) instead of {lanes}, "
                       "which would only split the batches")
    return needed


def _local_lane(workload: Workload, executor: ExecutorKind, gpus: int, lockstep: int,
                lanes: int, reasons: list[str]) -> bool:
    """Whether this process is one of the episode lanes (:mod:`hybrid_executor`)."""
    local_lane = (executor is ExecutorKind.PROCESS and workload.executor is ExecutorKind.AUTO
                  and not workload.isolate and not workload.foreign_code and not gpus)
    if local_lane:
        first = "episodes start" if lockstep > 1 else "episode starts"
        reasons.append(
            f"this process runs episodes too, as one of the {lanes} lanes: the first "
            f"{first} at once and {lanes - 1} worker(s) join as they start"
        )
    return local_lane


def _lockstep(workload: Workload, executor: ExecutorKind, strategy: PolicyStrategy,
              lanes: int, reasons: list[str], notes: list[str]) -> int:
    """Episodes each lane plays side by side (one policy call per step for all of them):
    ``--lockstep`` where it applies, else, where a policy has a shared batch form, as many
    as the lane's share of the tasks, up to :data:`LOCKSTEP_AUTO`."""
    asked = workload.lockstep
    why_not = (
        "--episode-timeout stops one episode at a time" if workload.isolate
        else f"executor {executor.value} runs one episode per task"
        if executor in (ExecutorKind.THREAD, ExecutorKind.RAY)
        else f"agents step on {strategy.value} policy workers"
        if strategy in (PolicyStrategy.THREAD, PolicyStrategy.PROCESS) else None)
    if why_not is not None:
        if asked is not None and asked > 1:
            notes.append(f"--lockstep {asked} replaced by 1: {why_not}")
        return 1
    if asked is not None:
        reasons.append(f"{asked} episode(s) in lockstep per lane (--lockstep)")
        return asked
    if not workload.batchable:
        reasons.append("one episode at a time per lane: no policy has a shared batch form "
                       "(stateless = True and step_batch) for lockstep to call once")
        return 1
    share = min(LOCKSTEP_AUTO, math.ceil(max(workload.tasks, 1) / lanes))
    lockstep, why = share, ""
    if workload.batch is not None:
        fixed, per_row = workload.batch.fit()
        fixed += LOCKSTEP_ROUND_S
        rows = workload.batch.rows[0]  # one episode's agents of the policy
        enough = math.ceil(fixed / (BATCH_OVERHEAD * per_row * rows)) if per_row else share
        lockstep = max(1, min(share, enough))
        why = (f" (its step_batch measured at {fixed * 1e6:.0f} us a call + "
               f"{per_row * 1e6:.2f} us a row: {lockstep * rows} rows a call keep the "
               f"call's cost within {BATCH_OVERHEAD:.0%} of its rows'"
               f"{'' if lockstep < share else ', or all the lane has'})")
    if lockstep > 1:
        reasons.append(f"{lockstep} episodes in lockstep per lane: every step, each shared "
                       f"stateless policy acts for all their agents in one call{why}")
    return lockstep


def _trimmed(jobs: int, cpus: int, workload: Workload, reasons: list[str],
             notes: list[str], what: str = "") -> int:
    """``jobs`` within the process limits and, for an auto plan, the CPUs left free; a
    note when the user gave ``--jobs`` (``what``: the processes jobs stands for, if not
    the whole budget)."""
    asked, whys = jobs, []
    cap = workload.max_processes
    if cap is not None and cap < jobs:
        jobs = max(cap, 1)
        whys.append(f"the open-file and process limits allow {jobs} worker process(es)")
    free, keep = workload.free_cpus, ""
    if free is not None and free < min(jobs, cpus) and workload.executor is ExecutorKind.AUTO:
        jobs = max(free, 1)
        whys.append(f"{cpus - free} of the {cpus} CPU(s) are busy with other processes")
        keep = " (--executor process keeps it)"
    if jobs == asked:
        return jobs
    why, label = "; ".join(whys), what or f"--jobs {asked}"
    reasons.append(f"{why}: {label} trimmed to {jobs}")
    if workload.jobs_given:
        notes.append(f"{label} trimmed to {jobs}: {why}{keep}")
    return jobs


def _note_strategy(workload: Workload, strategy: PolicyStrategy, reasons: list[str],
                   notes: list[str]) -> None:
    """A note when an explicit ``--policy-strategy`` is not what the agents get."""
    asked = workload.strategy
    if asked is PolicyStrategy.AUTO or asked is strategy:
        return
    why = reasons[-1] if workload.parallel_policy else "it needs --parallel-policy"
    notes.append(f"--policy-strategy {asked.value} replaced by {strategy.value}: {why}")


def _plans_waiting(jobs: int, workload: Workload, reasons: list[str]) -> bool:
    """Whether the measured policy or environment step waits and this plan can give it
    concurrency."""
    if step_waits(workload.step_s, workload.step_cpu_s):
        what = "the policy step"
    elif step_waits(workload.env_step_s, workload.env_step_cpu_s):
        what = "the environment step"
    else:
        return False
    if workload.executor is ExecutorKind.RAY:
        reasons.append(f"{what} waits, but Ray runs one episode per task: planned as CPU work")
        return False
    if workload.jobs_given and jobs == 1 and workload.concurrency is None:
        reasons.append(f"{what} waits, but --jobs 1 runs one episode and one agent at a "
                       "time, as asked (--concurrency N overlaps the waits)")
        return False
    if workload.parallel_policy and workload.strategy is PolicyStrategy.PROCESS:
        reasons.append(f"{what} waits, but --policy-strategy process puts agents on policy "
                       "worker processes: planned as CPU work")
        return False
    return True


def _waiting_plan(jobs: int, cpus: int, gpus: int, workload: Workload, reasons: list[str],
                  notes: list[str]) -> Plan:
    """Work that waits: episodes and agents in flight on threads, processes only for the
    CPU part (and for isolation), never fewer calls in flight because CPUs are busy."""
    asked = workload.strategy if workload.parallel_policy else PolicyStrategy.AUTO
    assert workload.step_s is not None and workload.step_cpu_s is not None
    at_once = asked in (PolicyStrategy.AUTO, PolicyStrategy.THREAD) and workload.agents > 1 \
        and step_waits(workload.step_s, workload.step_cpu_s)
    flight = plan_concurrency(workload.tasks, workload.agents, workload.step_s,
                              workload.step_cpu_s, workload.concurrency, at_once,
                              workload.action_deadline, workload.env_step_s or 0.0,
                              workload.env_step_cpu_s or 0.0)
    reasons.extend(flight.reasons)
    # async calls are in flight at once on the event loop (each bounded by an action
    # deadline there), and a shared batch form takes a round's agents in one call (one
    # request to a policy server; a sync call cannot be cut short): no policy threads,
    # lockstep
    on_loop = (workload.async_calls or (workload.batchable and not workload.action_deadline)) \
        and asked is not PolicyStrategy.THREAD and not workload.isolate
    threads = 0 if on_loop else flight.policy_threads
    strategy = PolicyStrategy.THREAD if threads else (
        asked if asked in (PolicyStrategy.INLINE, PolicyStrategy.BATCH) else PolicyStrategy.INLINE)
    reasons.append(f"agents stepped {strategy.value}" + (
        f": {threads} policy thread(s) per episode" if threads else
        ": a round's calls all in flight at once" if on_loop else ""))
    _note_strategy(workload, strategy, reasons, notes)
    executor, workers, per_worker = _waiting_lanes(jobs, cpus, workload, flight.episodes,
                                                   flight.cpus, reasons, notes)
    lockstep = 1
    if on_loop and executor in (ExecutorKind.PROCESS, ExecutorKind.INLINE):
        lockstep = per_worker if executor is ExecutorKind.PROCESS else flight.episodes
        per_worker = lockstep
        reasons.append(f"{lockstep} episode(s) in lockstep per lane: each round, a shared "
                       "batch form acts for all their agents in one call and async calls "
                       "are in flight at once on one event loop")
    gpu_ids = tuple(str(i % gpus) for i in range(workers)) if gpus else ()
    if gpus:
        reasons.append(f"{gpus} GPU(s) assigned round-robin to {workers} worker(s)")
    return Plan(jobs, executor, workers, strategy, threads, 1, workers <= cpus,
                gpu_ids, workload.free_cpus, False, tuple(reasons),
                episodes_per_worker=per_worker, lockstep=lockstep, concurrency=flight.limit,
                notes=tuple(notes))


def _waiting_lanes(jobs: int, cpus: int, workload: Workload, episodes: int, busy_cpus: int,
                   reasons: list[str], notes: list[str]) -> tuple[ExecutorKind, int, int]:
    """(executor, episode workers, episodes in flight per worker) for waiting work."""
    if workload.executor is ExecutorKind.AUTO and not (workload.isolate or
                                                        workload.foreign_code):
        executor = ExecutorKind.THREAD if busy_cpus <= 1 else ExecutorKind.PROCESS
        reasons.append(f"executor {executor.value}: parcat's own code, " + (
            "whose waiting fits the threads of this process" if busy_cpus <= 1
            else f"whose CPU part needs {busy_cpus} CPUs"))
    else:
        executor = _executor(workload, episodes, reasons)
    if executor is ExecutorKind.INLINE:
        return executor, 1, 1
    if executor is ExecutorKind.THREAD:
        reasons.append(f"{episodes} episode thread(s) in this process")
        return executor, episodes, 1
    wanted = min(jobs, episodes) if workload.isolate else min(jobs, busy_cpus, episodes)
    workers = _trimmed(wanted, cpus, workload, reasons, notes,
                       f"{wanted} worker process(es) (--jobs {jobs})")
    if workload.isolate:
        reasons.append(f"--episode-timeout: one episode in flight per worker (a timeout "
                       f"stops its worker): {workers} episode worker process(es)")
        if workload.concurrency is not None and workload.concurrency > workers * \
                workload.agents:
            notes.append(f"--concurrency {workload.concurrency} lowered to "
                         f"{workers * workload.agents}: with --episode-timeout each of the "
                         f"{workers} worker(s) runs one episode at a time")
        return executor, workers, 1
    per_worker = math.ceil(episodes / workers)
    reasons.append(f"{workers} episode worker process(es) for the CPU part, {per_worker} "
                   "episode(s) in flight in each, on threads")
    return executor, workers, per_worker


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
        reasons.append("executor inline: one lane, in this process")
        return ExecutorKind.INLINE
    reasons.append("executor process: Python episode loops need processes, not threads")
    return ExecutorKind.PROCESS


def _strategy(jobs: int, episode_workers: int, workload: Workload,
              reasons: list[str]) -> tuple[PolicyStrategy, int]:
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
    cost = workload.step_s
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
    """Whether the run's policy work is too little to pay for starting policy workers."""
    if workload.steps is None:
        return False
    hosted = min(spare, workload.agents - 1)
    saved = cost * workload.steps * max(1, workload.tasks) * workload.agents * hosted / (1 + hosted)
    if saved >= 2 * POLICY_WORKER_START_S:
        return False
    reasons.append(f"auto: the run's policy steps would save at most ~{saved:.2f} s on policy "
                   f"workers, less than twice the ~{POLICY_WORKER_START_S:g} s of starting them")
    return True


def make_train_plan(work: Workload, free: int, jobs: int | None = None) -> TrainPlan:
    """Lay out a training run on ``free`` CPUs, within ``jobs`` when given.

    With ``jobs`` the trainer's process is one job, an async learner process another, and
    every agent trained concurrently beyond the first one more; the rest bounds the
    environment workers and sets how many environments there are. Workers are then used
    only where the measured step makes them pay (:func:`choose_env_workers`).
    """
    if free < 1 or work.agents < 1 or (jobs is not None and jobs < 1):
        raise ValueError("free, jobs and agents must be >= 1")
    reasons: list[str] = []
    if jobs is None or work.env_workers is not None:
        learners = work.learners or work.agents
        train_workers = (work.train_threads or learners) if work.parallel_training else 1
        budget = work.env_workers
    else:
        budget, train_workers = _split_jobs(jobs, work, reasons)
    num_envs = max(1, budget or 0) * work.envs_per_worker
    if work.env_workers is not None:
        env_workers = work.env_workers
        reasons.append(f"env_workers is given ({env_workers}): jobs ({jobs}) is not split"
                       if jobs is not None
                       else f"{env_workers} environment worker(s) as configured")
    elif work.step_s is None:
        env_workers = budget or 0
        if jobs is None:
            reasons.append("environments step in-process (no step time measured, no --jobs)")
        elif env_workers:
            reasons.append(f"{env_workers} environment worker(s) with the remaining jobs")
        else:
            reasons.append("no job left for environment workers: environments step in-process")
    else:
        env_workers = _measured_workers(work, free, budget, train_workers, num_envs, reasons)
    if work.foreign_code and env_workers == 0:
        env_workers = 1
        reasons.append(FOREIGN_REASON)
    spin = env_workers > 0 and env_workers + 1 + work.asynchronous <= free
    step_s = None if work.env_workers is not None else work.step_s
    return TrainPlan(env_workers, train_workers, spin, num_envs, tuple(reasons), step_s)


def _measured_workers(work: Workload, free: int, budget: int | None, train_workers: int,
                      num_envs: int, reasons: list[str]) -> int:
    """Environment workers for the measured step, within the free CPUs and the budget."""
    step_s = work.step_s or 0.0
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
    workers, why = choose_env_workers(step_s, num_envs, most, work.steps or 0,
                                      local_share=not work.asynchronous)
    reasons.append(why)
    return workers


def _split_jobs(jobs: int, work: Workload, reasons: list[str]) -> tuple[int, int]:
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
    """How many environment workers (at most ``most``) pay for themselves, and why.

    With ``W`` workers the slowest lane steps ``ceil(num_envs / lanes)`` environments (the
    trainer's process is a lane too with ``local_share``) and each worker adds
    :data:`PARKED_HANDOFF_S`; workers must save :data:`MIN_GAIN` of the step and, over
    ``vector_steps``, more than starting them costs.
    """
    inline_s = num_envs * step_s
    best, best_s = 0, inline_s
    for workers in range(1, most + 1):
        lanes = min(num_envs, workers + local_share)
        estimate = math.ceil(num_envs / lanes) * step_s + workers * PARKED_HANDOFF_S
        if estimate < best_s:
            best, best_s = workers, estimate
    handoff = _time(PARKED_HANDOFF_S)
    if best == 0:
        return 0, (f"an environment worker would cost more than it saves (handoff "
                   f"~{handoff} a step): environments step in-process")
    start_s = FIRST_WORKER_S + (best - 1) * NEXT_WORKER_S
    saved_s = (inline_s - best_s) * vector_steps - start_s
    layout = f"{best} environment worker(s) would take ~{_time(best_s)} a step (~{handoff} " \
             "handoff each)"
    if inline_s - best_s < MIN_GAIN * inline_s:
        return 0, f"{layout}, less than {MIN_GAIN:.0%} faster: environments step in-process"
    if saved_s <= 0:
        return 0, (f"{layout}, but over {vector_steps} steps that saves less than starting "
                   f"them (~{start_s:.2f} s): environments step in-process")
    return best, f"{layout}: ~{saved_s:.1f} s saved over {vector_steps} steps"


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.1f} ms"
