"""Timing one policy step before an ``auto`` plan, here or in a worker process."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from parcat.envs.missions import Mission
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.ipc.process import Handlers, WorkerLostError, WorkerRaisedError, start_worker
from parcat.policies.specs import PolicySpec
from parcat.stepping.base import InlineStepper

CALIBRATION_STEPS = 20
CALIBRATION_BUDGET_S = 0.25
CALIBRATION_TIMEOUT_S = 60.0  # longest wait for a calibration worker to start (imports included)
CALIBRATION_WAIT_S = 2.0
"""Longest wait for its measurement: a policy that takes longer is that slow."""


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
    timings = sorted(stepper.timings)
    return timings[len(timings) // 2] if timings else 0.0


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
