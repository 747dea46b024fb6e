"""The process strategy: failures, late actions, fallbacks and clean shutdown."""

from __future__ import annotations

import os
import sys
import types
import warnings

import psutil
import pytest

from parcat.core import seeding
from parcat.envs.missions import Mission
from parcat.episode.results import EpisodeStatus
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.policies.assignment import assign_policies
from parcat.policies.specs import PolicySpec, parse_policy_spec
from parcat.stepping.process import ProcessStepper
from parcat.stepping.thread import ThreadStepper
from tests.fakes import scripted_mission

RANDOM = parse_policy_spec("random")


def episode_with_policy_on_agent(mission: Mission, specs: tuple[PolicySpec, ...], policy: int,
                                 agent: int) -> int:
    """An episode index whose assignment gives ``specs[policy]`` to agent ``agent``."""
    for index in range(100):
        seed = seeding.assignment_seed(0, mission.key, index)
        seats = assign_policies([s.weight for s in specs], mission.params["agents"], seed)
        if seats[agent] == policy and seats.count(policy) == 1:
            return index
    raise AssertionError("no such episode")


def children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


@pytest.mark.usefixtures("clean_machine")
@pytest.mark.parametrize("spin", [True, False])
def test_remote_policy_error_names_agent_and_keeps_traceback(spin: bool) -> None:
    mission = scripted_mission(agents=2)
    crash = parse_policy_spec("tests.fakes:CrashingPolicy,at_step=3")
    runner = EpisodeRunner(ProcessStepper(1, spin=spin))
    try:
        result = runner.run(EpisodeTask(mission, (crash,), 0, 0))
        # agent 0 steps locally and crashes first; a worker-only crash needs agent 1 alone
        assert result.status is EpisodeStatus.FAILED and result.error is not None
        assert result.error.message == "policy crashed on step 4"
        assert "ValueError" in result.error.traceback
        again = runner.run(EpisodeTask(scripted_mission(agents=2), (RANDOM,), 0, 1))
        assert again.ok, "the worker must serve the next episode after a failure"
    finally:
        runner.close()


@pytest.mark.usefixtures("clean_machine")
def test_error_raised_inside_the_worker_is_reported() -> None:
    mission = scripted_mission(agents=2)
    specs = (RANDOM, parse_policy_spec("tests.fakes:CrashingPolicy,at_step=2"))
    index = episode_with_policy_on_agent(mission, specs, policy=1, agent=1)
    runner = EpisodeRunner(ProcessStepper(1))
    try:
        result = runner.run(EpisodeTask(mission, specs, 0, index))
        assert result.error is not None and result.error.agent == "1"
        assert (result.error.type, result.error.phase) == ("ValueError", "policy")
        assert "policy crashed on step 3" in result.error.traceback
        assert "policy_worker.py" in result.error.traceback
    finally:
        runner.close()


@pytest.mark.usefixtures("clean_machine")
@pytest.mark.parametrize("make", [lambda: ProcessStepper(2, action_timeout_s=0.05),
                                  lambda: ThreadStepper(2, action_timeout_s=0.05)])
def test_hung_policy_gets_default_actions_and_counts_them(make) -> None:  # type: ignore[no-untyped-def]
    mission = scripted_mission(agents=2, max_steps=8)
    specs = (RANDOM, parse_policy_spec("tests.fakes:HangingPolicy,at_step=2,seconds=0.6"))
    index = episode_with_policy_on_agent(mission, specs, policy=1, agent=1)
    runner = EpisodeRunner(make())
    try:
        result = runner.run(EpisodeTask(mission, specs, 0, index))
        assert result.ok and result.steps == 8
        late = {a.agent_id: a.late_actions for a in result.agents}
        # every step after the hang began used the default: the episode never waited for it;
        # with a deadline each agent steps on a worker of its own, so agent 0 is never late
        assert late["1"] >= 5 and late["0"] == 0
    finally:
        runner.close()


@pytest.mark.usefixtures("clean_machine")
def test_policy_only_importable_here_falls_back_inline_with_a_warning() -> None:
    module = types.ModuleType("parcat_test_local_policies")
    source = (
        "class Local:\n"
        "    def __init__(self, spec):\n        pass\n"
        "    def reset(self, seed):\n        pass\n"
        "    def step(self, obs):\n        return 1\n"
    )
    exec(source, module.__dict__)
    sys.modules[module.__name__] = module
    try:
        spec = parse_policy_spec("parcat_test_local_policies:Local")
        runner = EpisodeRunner(ProcessStepper(1))
        with pytest.warns(RuntimeWarning, match="cannot run in a policy worker"):
            result = runner.run(EpisodeTask(scripted_mission(agents=2), (spec,), 0, 0))
        assert result.ok
        runner.close()
    finally:
        del sys.modules[module.__name__]


def test_killed_policy_worker_fails_the_episode_then_recovers() -> None:
    mission = scripted_mission(agents=2, max_steps=200, busy_us=500)
    stepper = ProcessStepper(1, spin=False)
    runner = EpisodeRunner(stepper, on_step=lambda task, step: step == 5 and os.kill(
        stepper.worker_pids()[0], 9))
    try:
        result = runner.run(EpisodeTask(mission, (RANDOM,), 0, 0))
        assert result.status is EpisodeStatus.FAILED and result.error is not None
        # killed between steps, acting for no one: the message names whom it hosted
        assert result.error.message == "policy worker 0 died (signal SIGKILL); it hosted " \
            "agent(s) '1'"
        assert result.error.agent == "1"
        runner.on_step = None
        assert runner.run(EpisodeTask(mission, (RANDOM,), 0, 1)).ok
    finally:
        runner.close()
    assert not [p for p in children() if "parcat-policy" in p.name()]


@pytest.mark.usefixtures("clean_machine")
def test_a_worker_killed_after_its_agents_moved_inline_fails_no_episode() -> None:
    module = types.ModuleType("parcat_test_local_policies_2")
    exec("class Local:\n    def __init__(self, spec):\n        pass\n"
         "    def reset(self, seed):\n        pass\n"
         "    def step(self, obs):\n        return 1\n", module.__dict__)
    sys.modules[module.__name__] = module
    stepper = ProcessStepper(1, spin=False)
    runner = EpisodeRunner(stepper)

    def kill_the_worker(*args: object, **kwargs: object) -> None:
        # its agent now steps here (the class cannot be imported there): it hosts no one
        (pid,) = stepper.worker_pids()
        victim = psutil.Process(pid)
        victim.kill()
        victim.wait(30)

    try:
        spec = parse_policy_spec(f"{module.__name__}:Local")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = kill_the_worker  # type: ignore[assignment]
            first = runner.run(EpisodeTask(scripted_mission(agents=2), (spec,), 0, 0))
        assert first.ok, first.error
        assert runner.run(EpisodeTask(scripted_mission(agents=2), (spec,), 0, 1)).ok
    finally:
        runner.close()
        del sys.modules[module.__name__]
