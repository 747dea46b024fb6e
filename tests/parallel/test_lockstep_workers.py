"""Episode workers playing in lockstep: a crash fails only its episode, the plan says K
and why, and ``--lockstep`` is checked like every flag."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parcat.cli.main import main
from parcat.core.seeding import episode_seed
from parcat.envs.missions import Mission
from parcat.episode.results import EpisodeStatus
from parcat.episode.rollout import EpisodeTask
from parcat.parallel.executors import InlineExecutor
from parcat.parallel.planner import LOCKSTEP_AUTO, ExecutorKind, PolicyStrategy, Workload, make_plan
from parcat.parallel.process_executor import ProcessExecutor
from parcat.policies.specs import parse_policy_spec
from parcat.stepping.config import StepperConfig


def doomed_tasks(doomed: int, count: int) -> list[EpisodeTask]:
    """Episode ``doomed`` segfaults its process on step 3, every time it is played."""
    mission = Mission(name="doomed", env="tests.fakes:DoomedEnv", max_steps=20,
                      params={"agents": 2, "max_steps": 20, "how": "segfault"})
    seed = episode_seed(0, mission.key, doomed)
    mission = replace(mission, params={**mission.params, "doomed_seed": seed})
    policies = (parse_policy_spec("mlp,width=16"), parse_policy_spec("tests.fakes:StatefulPolicy"))
    return [EpisodeTask(mission, policies, 0, index) for index in range(count)]


@pytest.mark.usefixtures("clean_machine")
def test_a_segfault_in_one_episode_of_a_lockstep_worker_fails_only_that_episode() -> None:
    """Episodes 0-3 play together when 2 crashes the worker: each runs again alone and
    only 2 is charged; the others equal episodes played one at a time."""
    tasks = doomed_tasks(doomed=2, count=6)
    with ProcessExecutor(1, StepperConfig(lockstep=4), retries=1,
                         episodes_per_worker=4) as executor:
        results = executor.run(tasks)
    assert [r.status for r in results] == [EpisodeStatus.OK] * 2 + [EpisodeStatus.FAILED] + \
        [EpisodeStatus.OK] * 3
    error = results[2].error
    assert error is not None and error.type == "WorkerError" and "SIGSEGV" in error.message
    with InlineExecutor(StepperConfig(lockstep=1)) as inline:
        expected = inline.run([t for t in tasks if t.episode_index != 2])
    assert [(r.episode_index, r.agents) for r in results if r.ok] == [
        (r.episode_index, r.agents) for r in expected]


def plan(*flags: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    args = ["plan", "-m", "harvest", "-n", "40", "--set", "max_steps=5", "-f", "json", *flags]
    assert main(args) == 0
    found: dict[str, object] = json.loads(capsys.readouterr().out)
    return found


def test_the_plan_says_how_many_episodes_play_in_lockstep_and_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    shown = plan("-p", "mlp", "--jobs", "1", capsys=capsys)
    assert shown["lockstep"] == 40
    assert any("40 episodes in lockstep per lane" in r for r in shown["reasons"])  # type: ignore[attr-defined]
    stateful = plan("-p", "tests.fakes:StatefulPolicy", "--jobs", "1", "--executor", "inline",
                    capsys=capsys)
    assert stateful["lockstep"] == 1
    assert any("no policy has a shared batch form" in r for r in stateful["reasons"])  # type: ignore[attr-defined]
    asked = plan("-p", "mlp", "--jobs", "1", "--lockstep", "7", capsys=capsys)
    assert asked["lockstep"] == 7


def test_a_lockstep_the_plan_cannot_keep_is_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    shown = plan("-p", "mlp", "--lockstep", "8", "--episode-timeout", "30", capsys=capsys)
    assert shown["lockstep"] == 1
    assert shown["notes"] == [
        "--lockstep 8 replaced by 1: --episode-timeout stops one episode at a time"]


@pytest.mark.parametrize("value", ["0", "1025"])
def test_a_bad_lockstep_is_one_line(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", "harvest", "--lockstep", value]) == 2
    assert capsys.readouterr().err == (
        f"parcat: error: --lockstep must be an integer between 1 and 1,024, got {value}\n")


@given(jobs=st.integers(1, 64), cpus=st.integers(1, 64), tasks=st.integers(0, 5_000),
       batchable=st.booleans(), isolate=st.booleans(), parallel=st.booleans(),
       asked=st.one_of(st.none(), st.integers(1, 1024)),
       executor=st.sampled_from(list(ExecutorKind)))
def test_a_plan_plays_in_lockstep_only_where_it_can(
        jobs: int, cpus: int, tasks: int, batchable: bool, isolate: bool, parallel: bool,
        asked: int | None, executor: ExecutorKind) -> None:
    workload = Workload(tasks=tasks, agents=4, batchable=batchable, isolate=isolate,
                        parallel_policy=parallel, step_s=1e-3, lockstep=asked,
                        executor=executor)
    plan = make_plan(jobs, cpus, 0, workload)
    assert plan.lockstep >= 1 and plan.episodes_per_worker == plan.lockstep
    one_at_a_time = isolate or plan.executor in (ExecutorKind.THREAD, ExecutorKind.RAY) or \
        plan.strategy in (PolicyStrategy.THREAD, PolicyStrategy.PROCESS)
    if one_at_a_time:
        assert plan.lockstep == 1
        assert (asked is not None and asked > 1) == any("--lockstep" in n for n in plan.notes)
    elif asked is not None:
        assert plan.lockstep == asked
    else:
        lane_share = -(-max(tasks, 1) // plan.episode_workers)
        assert plan.lockstep == (min(LOCKSTEP_AUTO, lane_share) if batchable else 1)
