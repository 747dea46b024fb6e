"""Timeouts that bound every agent: a hanging policy under every agent-level strategy."""

from __future__ import annotations

import pytest

from parcat.episode.results import EpisodeStatus
from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.parallel.planner import PolicyStrategy
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from tests.fakes import dying_mission, scripted_mission

HANGING = parse_policy_spec("tests.fakes:HangingPolicy,at_step=2")
RANDOM = parse_policy_spec("random")


@pytest.mark.parametrize(("jobs", "strategy"), [
    (1, PolicyStrategy.AUTO),      # no job to spare: the plan puts agents on a thread
    (1, None),                     # no --parallel-policy: the deadline alone puts them on threads
    (1, PolicyStrategy.INLINE),    # asked for inline: a deadline still moves them off
    (2, PolicyStrategy.THREAD),
    (2, PolicyStrategy.PROCESS),   # every agent on a policy worker, none in the local share
])
def test_a_hanging_policy_is_bounded_by_the_action_timeout(
    jobs: int, strategy: PolicyStrategy | None
) -> None:
    mission = scripted_mission("hangs", agents=2, max_steps=6)
    options = RunOptions(jobs=jobs, parallel_policy=strategy is not None,
                         policy_strategy=strategy or PolicyStrategy.AUTO, action_timeout_ms=50)
    report = evaluate(EvalConfig((mission,), (HANGING,), episodes=2), options)
    assert report.plan is not None
    assert report.plan.strategy in (PolicyStrategy.THREAD, PolicyStrategy.PROCESS)
    assert [e.status for e in report.episodes] == [EpisodeStatus.OK] * 2
    for episode in report.episodes:
        assert episode.steps == 6
        # every agent hangs from its third step on: the rest of the episode is late
        assert all(a.late_actions >= 4 for a in episode.agents), episode.agents


def test_a_timed_out_episode_keeps_its_agents_and_what_they_had_earned() -> None:
    hung = dying_mission("hung", how="hang", at_step=4, agents=3)
    report = evaluate(EvalConfig((hung,), (RANDOM,), episodes=1),
                      RunOptions(jobs=1, episode_timeout_s=1.0))
    (episode,) = report.episodes
    assert episode.status is EpisodeStatus.TIMEOUT and episode.error is not None
    assert episode.error.message == (
        "episode exceeded --episode-timeout 1 s; worker stopped at step 4")
    assert [a.agent_id for a in episode.agents] == ["0", "1", "2"]
    assert episode.steps == 4
    healthy = dying_mission("hung", how="hang", at_step=10**6, agents=3, max_steps=4)
    reference = evaluate(EvalConfig((healthy,), (RANDOM,), episodes=1), RunOptions(jobs=1))
    assert [a.reward for a in episode.agents] == \
        [a.reward for a in reference.episodes[0].agents]


@pytest.mark.parametrize("policy_strategy", [PolicyStrategy.INLINE, PolicyStrategy.PROCESS])
def test_the_inline_executor_bounds_an_episode_with_its_timeout(
    policy_strategy: PolicyStrategy,
) -> None:
    hung = dying_mission("hung", how="hang", at_step=4, agents=3, max_steps=6)
    options = RunOptions(jobs=2, executor="inline", episode_timeout_s=1.0,
                         parallel_policy=policy_strategy is PolicyStrategy.PROCESS,
                         policy_strategy=policy_strategy)
    report = evaluate(EvalConfig((hung,), (RANDOM,), episodes=3), options)
    assert report.plan is not None and report.plan.executor.value == "inline"
    for episode in report.episodes:
        assert episode.status is EpisodeStatus.TIMEOUT and episode.error is not None
        assert episode.error.message == (
            "episode exceeded --episode-timeout 1 s; stopped at step 4")
        assert [a.agent_id for a in episode.agents] == ["0", "1", "2"]
    healthy = dying_mission("hung", how="hang", at_step=10**6, agents=3, max_steps=4)
    reference = evaluate(EvalConfig((healthy,), (RANDOM,), episodes=3), RunOptions(jobs=1))
    assert [[a.reward for a in e.agents] for e in report.episodes] == \
        [[a.reward for a in e.agents] for e in reference.episodes]
