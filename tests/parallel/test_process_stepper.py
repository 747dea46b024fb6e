"""The process strategy gives the sequential results: spinning or parked, quiet or beside a
busy process, with a stateful policy, a random one and a network on policy workers."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from parcat.envs.missions import load_mission
from parcat.episode.results import EpisodeResult
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.policies.specs import PolicySpec, parse_policy_spec
from parcat.stepping.base import InlineStepper, Stepper
from parcat.stepping.process import ProcessStepper

pytestmark = pytest.mark.usefixtures("clean_machine")

MISSION = load_mission("harvest", {"agents": 3, "max_steps": 40})
SPECS = (parse_policy_spec("tests.fakes:StatefulPolicy"), parse_policy_spec("random"),
         parse_policy_spec("mlp,width=16"))
EPISODES = 3


def results(stepper: Stepper, specs: tuple[PolicySpec, ...] = SPECS) -> list[EpisodeResult]:
    """The episodes' results (durations zeroed); ``stepper.kept`` tells how many policy
    workers were still running at the end."""
    runner = EpisodeRunner(stepper)
    try:
        out = [runner.run(EpisodeTask(MISSION, specs, 5, i)) for i in range(EPISODES)]
        if isinstance(stepper, ProcessStepper):
            stepper.kept = len(stepper.worker_pids())  # type: ignore[attr-defined]
    finally:
        runner.close()
    assert all(r.ok for r in out), [r.error for r in out]
    return [dataclasses.replace(r, duration_s=0.0) for r in out]


@pytest.fixture(scope="module")
def sequential() -> list[EpisodeResult]:
    return results(InlineStepper())


@pytest.mark.parametrize("spin", [True, False], ids=["spin", "park"])
def test_policy_workers_give_the_sequential_results(sequential: list[EpisodeResult],
                                                   spin: bool) -> None:
    stepper = ProcessStepper(2, spin=spin)
    assert results(stepper) == sequential
    assert stepper.kept == 2  # the workers stepped every episode


BUSY_S = 120.0
"""The foreign busy process ends by itself after this long, whatever happens to the test."""


@pytest.mark.parametrize("spin", [True, False], ids=["spin", "park"])
def test_a_foreign_busy_process_changes_no_result(
    sequential: list[EpisodeResult], spin: bool
) -> None:
    busy = subprocess.Popen([sys.executable, "-c",
                             f"import time\nend = time.monotonic() + {BUSY_S}\n"
                             "while time.monotonic() < end: pass"])
    try:
        assert results(ProcessStepper(2, spin=spin)) == sequential
    finally:
        busy.kill()
        busy.wait()
