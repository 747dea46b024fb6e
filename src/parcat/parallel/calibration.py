"""Timing one policy step before an ``auto`` plan, here or in a worker process.

A step is timed twice: its wall time and its CPU time (the stepping thread's), so the
planner can tell a policy that computes from one that waits (on a server, an API, a
device) and budget CPUs only for the part that computes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parcat.envs.missions import Mission
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.ipc.process import Handlers, WorkerLostError, WorkerRaisedError, start_worker
from parcat.parallel.waiting import step_waits
from parcat.policies.specs import PolicySpec
from parcat.stepping.base import InlineStepper

CALIBRATION_STEPS = 20
CALIBRATION_BUDGET_S = 0.25
WAITING_STEPS = 3
"""Steps enough to time a policy that waits: its wall time is far above its CPU time
from the first step, and every further one delays the run by a whole wait."""
CALIBRATION_TIMEOUT_S = 60.0  # longest wait for a calibration worker to start (imports included)
CALIBRATION_WAIT_S = 2.0
"""Longest wait for its measurement: a policy that takes longer is that slow."""


@dataclass(frozen=True)
class PolicyStepTime:
    """One agent's policy step, as the calibration measured it (medians)."""

    wall_s: float
    """Seconds of wall time."""
    cpu_s: float
    """Seconds of CPU time of the thread that stepped it (the policy's own threads, if it
    starts any, are not counted)."""

    @property
    def waits(self) -> bool:
        """Whether the step mostly waits (:func:`~parcat.parallel.waiting.step_waits`)."""
        return step_waits(self.wall_s, self.cpu_s)


def measure_policy_step(mission: Mission, policies: tuple[PolicySpec, ...]) -> PolicyStepTime:
    """Median wall and CPU time of one agent's policy step over the first steps of a
    throwaway episode (:data:`CALIBRATION_STEPS`, or fewer once they took
    :data:`CALIBRATION_BUDGET_S`, or :data:`WAITING_STEPS` of a policy that waits)."""
    stepper = _TimedStepper()

    def enough(task: EpisodeTask, steps: int) -> bool:
        timings = stepper.timings
        return (len(timings) >= CALIBRATION_STEPS or sum(timings) > CALIBRATION_BUDGET_S
                or (len(timings) >= WAITING_STEPS and _median_time(stepper).waits))

    runner = EpisodeRunner(stepper, on_step=enough)
    try:
        runner.run(EpisodeTask(mission, policies, seed=0, episode_index=0))
    finally:
        runner.close()
    return _median_time(stepper)


def _median_time(stepper: _TimedStepper) -> PolicyStepTime:
    return PolicyStepTime(_median(stepper.timings), _median(stepper.cpu_timings))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


class _TimedStepper(InlineStepper):
    """Steps inline and keeps each step's wall and CPU time per agent."""

    def __init__(self) -> None:
        super().__init__()
        self.timings: list[float] = []
        self.cpu_timings: list[float] = []

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        begin, begin_cpu = time.perf_counter(), time.thread_time()
        actions = super().act(obs, live)
        agents = max(1, len(actions))
        self.cpu_timings.append((time.thread_time() - begin_cpu) / agents)
        self.timings.append((time.perf_counter() - begin) / agents)
        return actions


def measure_in_a_worker(mission: Mission, policies: tuple[PolicySpec, ...],
                        start_method: str | None = None) -> PolicyStepTime | None:
    """:func:`measure_policy_step` in a worker process; ``None`` if it failed there."""
    worker = start_worker(_calibration_worker, (), "parcat-calibration",
                          start_method=start_method)
    try:
        worker.wait_ready(CALIBRATION_TIMEOUT_S)
        try:
            step: PolicyStepTime = worker.call("measure", mission, policies,
                                         timeout=CALIBRATION_WAIT_S)
            return step
        except WorkerLostError:
            if worker.alive:  # still in its first steps: a policy step is that slow
                return PolicyStepTime(CALIBRATION_WAIT_S, CALIBRATION_WAIT_S)
            raise
    except (WorkerLostError, WorkerRaisedError):
        return None
    finally:
        worker.stop(grace_s=0.5, terminate=True)


def _calibration_worker() -> Handlers:
    return Handlers({"measure": measure_policy_step})
