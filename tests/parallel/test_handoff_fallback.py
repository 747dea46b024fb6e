"""The process strategy gives the sequential results whether or not it falls back inline."""

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
from parcat.stepping.fallback import Payoff
from parcat.stepping.process import ProcessStepper

pytestmark = pytest.mark.usefixtures("clean_machine")

MISSION = load_mission("harvest", {"agents": 3, "max_steps": 40})
SPECS = (parse_policy_spec("tests.fakes:StatefulPolicy"), parse_policy_spec("random"),
         parse_policy_spec("mlp,width=16"))
EPISODES = 3
MOVED = "the agents of policy workers step in the episode's process"


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
def test_falling_back_mid_episode_keeps_the_results(
    sequential: list[EpisodeResult], spin: bool
) -> None:
    stepper = ProcessStepper(2, spin=spin, check_steps=8, payoff_ratio=0.0)
    with pytest.warns(RuntimeWarning, match=MOVED + " from now on"):
        assert results(stepper) == sequential
    assert len(stepper.notes) == 1 and "over 8 steps" in stepper.notes[0]
    assert stepper.kept == 0  # the workers were stopped


@pytest.mark.parametrize("spin", [True, False], ids=["spin", "park"])
def test_an_episode_too_long_to_replay_falls_back_at_its_end(
    sequential: list[EpisodeResult], spin: bool
) -> None:
    stepper = ProcessStepper(1, spin=spin, check_steps=8, payoff_ratio=0.0, history_steps=4)
    with pytest.warns(RuntimeWarning, match=MOVED + " from the next episode on"):
        assert results(stepper) == sequential
    assert stepper.kept == 0


@pytest.mark.parametrize("spin", [True, False], ids=["spin", "park"])
def test_handoffs_that_pay_keep_the_workers(sequential: list[EpisodeResult], spin: bool) -> None:
    stepper = ProcessStepper(2, spin=spin, check_steps=8, payoff_ratio=float("inf"))
    assert results(stepper) == sequential
    assert stepper.notes == [] and stepper.kept == 2


def test_a_policy_that_replays_differently_stays_on_its_worker() -> None:
    specs = (parse_policy_spec("tests.fakes:WhereItRunsPolicy,at_step=3"),)
    stepper = ProcessStepper(1, check_steps=8, payoff_ratio=0.0)
    with pytest.warns(RuntimeWarning, match="they stay on the workers"):
        results(stepper, specs)
    assert len(stepper.notes) == 1
    assert "did not replay the episode identically here" in stepper.notes[0]
    assert stepper.kept == 1


def test_a_deadline_keeps_the_workers() -> None:
    stepper = ProcessStepper(1, action_timeout_s=30.0, check_steps=8, payoff_ratio=0.0)
    results(stepper)
    assert stepper.notes == [] and stepper.kept == 1


BUSY_S = 120.0
"""The foreign busy process ends by itself after this long, whatever happens to the test."""


@pytest.mark.filterwarnings(f"ignore:.*{MOVED}:RuntimeWarning")
@pytest.mark.parametrize("spin", [True, False], ids=["spin", "park"])
def test_a_foreign_busy_process_changes_no_result(
    sequential: list[EpisodeResult], spin: bool
) -> None:
    busy = subprocess.Popen([sys.executable, "-c",
                             f"import time\nend = time.monotonic() + {BUSY_S}\n"
                             "while time.monotonic() < end: pass"])
    try:
        # both outcomes are right here: the workers kept, or the agents moved inline
        assert results(ProcessStepper(2, spin=spin, check_steps=16)) == sequential
    finally:
        busy.kill()
        busy.wait()


def test_a_window_is_lost_only_when_its_steps_cost_more_than_inline_would() -> None:
    payoff = Payoff(check_steps=4)
    # one agent here (1 ms of CPU in 1 ms), one on a worker (1 ms of CPU): 1.2 ms a step
    assert not any(payoff.add(1.2e-3, 1e-3, 1e-3, 1e-3) for _ in range(4))
    # the same steps taking 2.5 ms: inline would have taken 2 ms
    assert [payoff.add(2.5e-3, 1e-3, 1e-3, 1e-3) for _ in range(4)] == [False] * 3 + [True]
    assert payoff.verdict == ("2.500 ms a step with policy workers vs 2.000 ms estimated "
                              "inline over 4 steps")
    # on a loaded machine this process gets half a core: inline would take 4 ms, not 3
    assert not any(payoff.add(3.5e-3, 2e-3, 1e-3, 1e-3) for _ in range(4))
