"""The episode path: pure, seeded, and failures confined to their episode."""

from __future__ import annotations

from parcat.episode.results import EpisodeStatus
from parcat.episode.rollout import EpisodeRunner, EpisodeTask, run_episode
from parcat.policies.specs import parse_policy_spec
from tests.fakes import scripted_mission

RANDOM = parse_policy_spec("random")
STATEFUL = parse_policy_spec("tests.fakes:StatefulPolicy")


def test_same_inputs_give_the_same_episode() -> None:
    mission = scripted_mission()
    a = run_episode(mission, [RANDOM, STATEFUL], seed=3, episode_index=5)
    b = run_episode(mission, [RANDOM, STATEFUL], seed=3, episode_index=5)
    assert a.to_dict() | {"duration_s": 0} == b.to_dict() | {"duration_s": 0}
    assert a.ok and a.steps == 10 and len(a.agents) == 3


def test_episode_index_and_seed_change_the_episode() -> None:
    mission = scripted_mission()
    base = run_episode(mission, [RANDOM], seed=3, episode_index=0)
    assert run_episode(mission, [RANDOM], seed=3, episode_index=1).seed != base.seed
    assert run_episode(mission, [RANDOM], seed=4, episode_index=0).seed != base.seed
    other = run_episode(mission, [RANDOM], seed=4, episode_index=0)
    assert [a.reward for a in other.agents] != [a.reward for a in base.agents]


def test_runner_reuse_equals_fresh_episodes() -> None:
    """Cached envs and policies must not leak state between episodes."""
    mission = scripted_mission()
    runner = EpisodeRunner()
    reused = [
        runner.run(EpisodeTask(mission, (RANDOM, STATEFUL), 1, i)).to_dict() for i in range(4)
    ]
    fresh = [run_episode(mission, [RANDOM, STATEFUL], 1, i).to_dict() for i in range(4)]
    strip = [{**d, "duration_s": 0} for d in reused]
    assert strip == [{**d, "duration_s": 0} for d in fresh]


def test_env_failure_is_recorded_with_phase_and_traceback() -> None:
    mission = scripted_mission(fail_at=4)
    result = run_episode(mission, [RANDOM], seed=0)
    assert result.status is EpisodeStatus.FAILED
    assert result.error is not None
    assert result.error.type == "RuntimeError"
    assert result.error.message == "scripted failure at step 4"
    assert result.error.agent is None and result.error.phase == "step"
    assert "scripted failure" in result.error.traceback and "Traceback" in result.error.traceback
    assert result.steps == 4


def test_policy_failure_names_the_agent() -> None:
    mission = scripted_mission(agents=2)
    crash = parse_policy_spec("tests.fakes:CrashingPolicy,at_step=3")
    result = run_episode(mission, [crash], seed=0)
    assert result.status is EpisodeStatus.FAILED
    assert result.error is not None
    assert (result.error.agent, result.error.phase) == ("0", "policy")
    assert result.error.message == "policy crashed on step 4"


def test_runner_recovers_after_a_failed_episode() -> None:
    runner = EpisodeRunner()
    failing = scripted_mission(fail_at=2)
    assert not runner.run(EpisodeTask(failing, (RANDOM,), 0, 0)).ok
    fine = scripted_mission(name="fine")
    assert runner.run(EpisodeTask(fine, (RANDOM,), 0, 0)).ok


def test_step_limit_of_the_mission_applies() -> None:
    mission = scripted_mission(max_steps=1000)
    short = type(mission)(**{**mission.__dict__, "max_steps": 7})
    assert run_episode(short, [RANDOM], seed=0).steps == 7
