"""Calibration: timing a policy step before the plan, here or in a worker process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from parcat.envs.missions import Mission
from parcat.parallel import calibration
from parcat.parallel.calibration import measure_in_a_worker, measure_steps, queued_s
from parcat.policies.specs import parse_policy_spec
from tests.fakes import scripted_mission

RANDOM = (parse_policy_spec("random"),)


@pytest.fixture
def steps_seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps of the calibration episode, as its runner's ``on_step`` saw them."""
    seen: list[int] = []
    original = calibration.EpisodeRunner

    def runner(*args: object, **kwargs: object) -> object:
        made = original(*args, **kwargs)  # type: ignore[arg-type]
        enough = made.on_step
        assert enough is not None

        def counted(task: object, steps: int) -> bool | None:
            seen.append(steps)
            return enough(task, steps)  # type: ignore[arg-type]

        made.on_step = counted
        return made

    monkeypatch.setattr(calibration, "EpisodeRunner", runner)
    return seen


def test_calibration_times_only_the_first_steps_of_its_episode(steps_seen: list[int]) -> None:
    step = measure_steps(scripted_mission(max_steps=500), RANDOM)
    assert step.wall_s > 0.0 and step.cpu_s > 0.0 and not step.waits
    assert steps_seen == list(range(1, calibration.CALIBRATION_STEPS + 1))  # then it stopped


def test_the_budget_ends_calibration_of_a_slow_policy_early(
        steps_seen: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibration, "CALIBRATION_BUDGET_S", 0.005)
    slow = (parse_policy_spec("tests.fakes:HangingPolicy,at_step=0,seconds=0.01"),)
    assert measure_steps(scripted_mission(max_steps=500, agents=1), slow).wall_s >= 0.01
    assert steps_seen == [1]


@pytest.mark.usefixtures("clean_machine")
def test_calibration_in_a_worker_returns_the_step_time_or_none_when_it_failed() -> None:
    step = measure_in_a_worker(scripted_mission(), RANDOM)
    assert step is not None and step.wall_s > 0.0
    crashing = (parse_policy_spec("tests.fakes:ExitingPolicy"),)
    assert measure_in_a_worker(scripted_mission(), crashing) is None


def test_a_policy_that_waits_is_timed_as_waiting_in_a_few_steps(steps_seen: list[int]) -> None:
    waiting = (parse_policy_spec("tests.fakes:WaitingPolicy,ms=2"),)
    step = measure_steps(scripted_mission(max_steps=500), waiting)
    assert step.waits and step.wall_s >= 0.002 and step.cpu_s < step.wall_s / 2
    assert steps_seen == list(range(1, calibration.WAITING_STEPS + 1))


def test_an_environment_that_waits_is_timed_as_waiting_in_a_few_steps(
        steps_seen: list[int]) -> None:
    server = Mission(name="server", env="tests.parallel.server_env:GameServerEnv",
                     params={"agents": 2, "ms": 5, "max_steps": 500}, max_steps=500)
    step = measure_steps(server, RANDOM)
    assert step.env_waits and not step.waits
    assert step.env_wall_s >= 0.005 and step.env_cpu_s < step.env_wall_s / 2
    assert steps_seen == list(range(1, calibration.WAITING_STEPS + 1))


def test_the_cpu_time_of_an_environment_step_is_its_own(steps_seen: list[int]) -> None:
    """2 ms of busy loop a step (on a loaded machine it gets less than all of it)."""
    step = measure_steps(scripted_mission(max_steps=500, busy_us=2000), RANDOM)
    assert step.env_wall_s >= 0.002 and step.env_cpu_s >= 0.0005
    assert step.cpu_s < 0.0005 <= step.env_cpu_s  # the policy's is not counted in it


@pytest.mark.parametrize("kept", ["schedstat", "context-switches"])
def test_a_loaded_machine_never_makes_computing_look_like_waiting(
        kept: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight busy processes beside it: its steps (20 ms of busy loop for the environment,
    microseconds for the policy) get a CPU a fraction of the time, and wait for one, not
    on a server (without leaving that wait out, both looked waiting). Either of the
    kernel's two accounts tells it alone: the time the thread waited for a CPU (schedstat,
    which some kernels do not keep: it reads 0), or that a step never blocked."""
    if kept == "schedstat":
        if queued_s() == 0.0:
            pytest.skip("this kernel keeps no schedstat (the context-switches case runs)")
        monkeypatch.setattr(calibration, "times_blocked", lambda: -1)
    else:
        monkeypatch.setattr(calibration, "queued_s", lambda: 0.0)
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(8)]
    try:
        step = measure_steps(scripted_mission(max_steps=500, busy_us=20_000), RANDOM)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    assert not step.env_waits and not step.waits
    assert step.env_cpu_s >= step.env_wall_s / 2
