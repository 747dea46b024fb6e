"""Timing a policy step and an environment step before an ``auto`` plan, here or in a
worker process.

Each is timed twice: its wall time and its CPU time (the stepping thread's), so the
planner can tell work that computes from work that waits (a policy on a server, an API, a
device; an environment that is a game server) and budget CPUs only for the part that
computes.
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from parcat.core.resources import blas_limited
from parcat.envs.missions import Mission
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.ipc.process import (
    Handlers,
    WorkerLostError,
    WorkerRaisedError,
    keep_spare,
    start_worker,
)
from parcat.parallel.planner import BatchCost
from parcat.parallel.waiting import step_waits
from parcat.policies.base import close_policies, is_async
from parcat.policies.specs import PolicySpec, make_policy
from parcat.stepping.base import InlineStepper, space_key

CALIBRATION_STEPS = 20
CALIBRATION_BUDGET_S = 0.25
WAITING_STEPS = 3
"""Steps enough to time work that waits (its wall time is far above its CPU time from the
first step, and every further one delays the run by a whole wait), and to tell whether it
does when that is all the plan needs to know."""
CALIBRATION_TIMEOUT_S = 60.0  # longest wait for a calibration worker to start (imports included)
BATCH_GROWTH = 16
"""The larger batch :func:`time_batch` times, in episodes' worth of rows."""
BATCH_REPEATS = 3
CALIBRATION_WAIT_S = 2.0
"""Longest wait for its measurement: a policy that takes longer is that slow."""


@dataclass(frozen=True)
class StepTimes:
    """One agent's policy step and one environment step, as the calibration measured
    them (medians, in seconds). CPU time is the stepping thread's: threads the policy or
    the environment start themselves are not counted. Wall time is as with a CPU of its
    own: the time the thread waited for one (other processes' turns) is left out."""

    wall_s: float
    """Wall time of one agent's policy step."""
    cpu_s: float
    """CPU time of one agent's policy step."""
    env_wall_s: float = 0.0
    """Wall time of one environment step."""
    env_cpu_s: float = 0.0
    """CPU time of one environment step."""
    async_calls: bool = False
    """Every agent's policy is async (its calls went out on the event loop)."""
    batch: BatchCost | None = None
    """The cost of the largest shared policy's ``step_batch`` (``None``: no policy has
    one, or it is async)."""

    @property
    def waits(self) -> bool:
        """Whether the policy step mostly waits (:func:`~parcat.parallel.waiting.step_waits`)."""
        return step_waits(self.wall_s, self.cpu_s)

    @property
    def env_waits(self) -> bool:
        """Whether the environment step mostly waits (on a game server, say)."""
        return step_waits(self.env_wall_s, self.env_cpu_s)


def measure_steps(mission: Mission, policies: tuple[PolicySpec, ...],
                  steps: int = CALIBRATION_STEPS) -> StepTimes:
    """Median wall and CPU times of one agent's policy step and of one environment step
    over the first ``steps`` steps of a throwaway episode (fewer once they took
    :data:`CALIBRATION_BUDGET_S`, and :data:`WAITING_STEPS` of work that waits)."""
    stepper = _TimedStepper()

    def enough(task: EpisodeTask, played: int) -> bool:
        now = _Instant.now()
        stepper.env_cpu_timings.append(now.cpu - stepper.acted.cpu)
        stepper.env_timings.append(computing_wall(stepper.acted, now))
        timings = stepper.timings
        if len(timings) >= steps or \
                sum(timings) + sum(stepper.env_timings) > CALIBRATION_BUDGET_S:
            return True
        times = _median_times(stepper)
        return len(timings) >= WAITING_STEPS and (times.waits or times.env_waits)

    runner = EpisodeRunner(stepper, on_step=enough)
    try:
        runner.run(EpisodeTask(mission, policies, seed=0, episode_index=0))
        groups = [(fn, [stepper.last_obs[a] for a in members if a in stepper.last_obs])
                  for fn, members in stepper.shared_groups()]
        # work that waits is planned for concurrency, not batch size
        timed = [] if _median_times(stepper).waits else \
            [time_batch(fn, obs) for fn, obs in groups if obs and not is_async(fn)]
        batch = max((c for c in timed if c is not None), key=lambda c: c.rows[0], default=None)
    finally:
        runner.close()
    return replace(_median_times(stepper), async_calls=stepper.all_async(), batch=batch)


def time_batch(step_batch: Callable[[list[Any]], Any], obs: Sequence[Any]) -> BatchCost | None:
    """CPU time of ``step_batch`` on ``obs`` (one episode's agents) and on
    :data:`BATCH_GROWTH` times as many rows (best of :data:`BATCH_REPEATS`, at one BLAS
    thread as lanes run; the process's CPU time, so other processes' turns do not count);
    ``None`` for a policy too slow to time within :data:`CALIBRATION_BUDGET_S` of wall time."""
    sizes = (len(obs), len(obs) * BATCH_GROWTH)
    deadline = time.perf_counter() + CALIBRATION_BUDGET_S  # a call that waits counts too
    seconds: list[float] = []
    with blas_limited(1):  # as lanes run it; more threads' spinning would count as cost
        step_batch(list(obs))  # a warm-up: first calls allocate
        for rows in sizes:
            batch = [obs[i % len(obs)] for i in range(rows)]
            best = math.inf
            for _ in range(BATCH_REPEATS):
                begin = time.process_time()
                step_batch(batch)
                best = min(best, time.process_time() - begin)
                if time.perf_counter() > deadline:
                    break
            if time.perf_counter() > deadline and not seconds:
                return None  # too slow to time: the plan goes without
            seconds.append(best)
    return BatchCost(sizes, (seconds[0], seconds[1]))


def measure_batch(mission: Mission, spec: PolicySpec) -> BatchCost | None:
    """:func:`time_batch` of one of parcat's own stateless policies, built here for the
    mission's first agent, on observations sampled from its space, as many as the agents
    with the same spaces; ``None`` if it has no batch form."""
    agents = mission.agents()
    first = agents[0]
    same = [a for a in agents if space_key(a.observation_space) ==
            space_key(first.observation_space) and space_key(a.action_space) ==
            space_key(first.action_space)]
    policy = make_policy(spec, mission, first)
    try:
        step_batch = getattr(policy, "step_batch", None)
        if not getattr(policy, "stateless", False) or not callable(step_batch) or \
                is_async(step_batch):
            return None
        space = first.observation_space
        space.seed(0)
        return time_batch(step_batch, [space.sample() for _ in same])
    finally:
        close_policies([policy])


def _median_times(stepper: _TimedStepper) -> StepTimes:
    return StepTimes(_median(stepper.timings), _median(stepper.cpu_timings),
                     _median(stepper.env_timings), _median(stepper.env_cpu_timings))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


class _TimedStepper(InlineStepper):
    """Steps inline and keeps each step's wall and CPU time per agent, and when it acted
    (the environment steps from then until the runner's ``on_step``). Wall times leave
    out the time spent waiting for a CPU (:func:`computing_wall`)."""

    def __init__(self) -> None:
        super().__init__()
        self.timings: list[float] = []
        self.cpu_timings: list[float] = []
        self.env_timings: list[float] = []
        self.env_cpu_timings: list[float] = []
        self.acted = _Instant.now()
        self.last_obs: dict[Any, Any] = {}

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        self.last_obs = obs
        begin = _Instant.now()
        actions = super().act(obs, live)
        agents = max(1, len(actions))
        self.acted = _Instant.now()
        self.cpu_timings.append((self.acted.cpu - begin.cpu) / agents)
        self.timings.append(computing_wall(begin, self.acted) / agents)
        return actions


@dataclass(frozen=True)
class _Instant:
    """The stepping thread's clocks at one moment."""

    wall: float
    cpu: float
    queued: float
    """:func:`queued_s`."""
    blocked: int
    """:func:`times_blocked`."""

    @classmethod
    def now(cls) -> _Instant:
        return cls(time.perf_counter(), time.thread_time(), queued_s(), times_blocked())


def computing_wall(begin: _Instant, end: _Instant) -> float:
    """Wall time from ``begin`` to ``end`` as with a CPU of its own: less the time the
    thread was runnable but waiting for a CPU (other processes' turns), so a loaded
    machine never makes a step that computes look like one that waits. A thread that
    never blocked in between waited for nothing but a CPU: its wall time is its CPU time
    (this holds without the kernel's schedstat, which is off in some kernels); one that
    did has its run-queue time taken off, as far as the schedstat says."""
    cpu = end.cpu - begin.cpu
    if end.blocked == begin.blocked >= 0:
        return cpu
    return max(cpu, end.wall - begin.wall - (end.queued - begin.queued))


def times_blocked() -> int:
    """Times this thread has blocked so far (on I/O, a sleep, a lock: its voluntary
    context switches; -1 where the system does not say)."""
    try:
        return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    except (AttributeError, OSError):  # RUSAGE_THREAD is Linux's
        return -1


def queued_s() -> float:
    """Seconds this thread has waited for a CPU so far, runnable but not running (the
    kernel's schedstat; 0 where it does not say)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def measure_in_a_worker(mission: Mission, policies: tuple[PolicySpec, ...],
                        start_method: str | None = None,
                        steps: int = CALIBRATION_STEPS) -> StepTimes | None:
    """:func:`measure_steps` in a worker process (the one that checked the policies,
    kept for the first episodes after it: :func:`~parcat.ipc.process.keep_spare`); ``None``
    if it failed there."""
    worker = start_worker(_calibration_worker, (), "parcat-calibration",
                          start_method=start_method, reuse=True)
    kept = False
    try:
        worker.wait_ready(CALIBRATION_TIMEOUT_S)
        try:
            step: StepTimes = worker.call("measure", mission, policies, steps,
                                               timeout=CALIBRATION_WAIT_S)
            kept = keep_spare(worker)
            return step
        except WorkerLostError:
            if worker.alive:  # still in its first steps: a policy step is that slow
                return StepTimes(CALIBRATION_WAIT_S, CALIBRATION_WAIT_S)
            raise
    except (WorkerLostError, WorkerRaisedError):
        return None
    finally:
        if not kept:
            worker.stop(grace_s=0.5, terminate=True)


def _calibration_worker() -> Handlers:
    return Handlers({"measure": measure_steps})
