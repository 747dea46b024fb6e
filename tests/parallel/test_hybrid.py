"""This process as an episode lane beside workers started in the background."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from parcat.episode.results import EpisodeResult
from parcat.eval.evaluate import evaluate, make_config, make_tasks
from parcat.eval.report import strip_timings
from parcat.parallel.executors import InlineExecutor
from parcat.parallel.hybrid_executor import HybridExecutor
from parcat.parallel.planner import ExecutorKind
from parcat.parallel.run_options import RunOptions
from parcat.stepping.config import StepperConfig
from tests.conftest import worker_children

# parcat's own policies and missions only: the only code a local lane runs
POLICIES = ["greedy", "random@2", "mlp,width=32"]
MISSIONS = ["harvest", "evade"]
OVERRIDES = {"max_steps": 25}


def config(episodes: int):  # type: ignore[no-untyped-def]
    return make_config(MISSIONS, POLICIES, episodes=episodes, seed=5, overrides=OVERRIDES)


def untimed(results: list[EpisodeResult]) -> list[EpisodeResult]:
    return [replace(r, duration_s=0.0) for r in results]


@pytest.mark.parametrize("lockstep", [1, 4])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("episodes", [1, 2, 9])
def test_same_results_as_inline(workers: int, episodes: int, lockstep: int) -> None:
    tasks = make_tasks(config(episodes))
    expected = InlineExecutor(StepperConfig(lockstep=1)).run(tasks)
    # workers start after the first episode whatever the run's length
    with HybridExecutor(workers, StepperConfig(lockstep=lockstep), worth_starting_s=0.0,
                        episodes_per_worker=lockstep) as executor:
        seen: list[int] = []
        results = executor.run(tasks, lambda index, _: seen.append(index))
        again = executor.run(tasks)  # a second run on the same executor
    assert untimed(results) == untimed(expected) and untimed(again) == untimed(expected)
    assert sorted(seen) == list(range(len(tasks)))


def test_the_auto_plan_makes_this_process_a_lane_and_agrees_with_jobs_1() -> None:
    report = evaluate(config(4), RunOptions(jobs=2))
    assert report.plan is not None and report.plan.local_lane
    assert report.plan.executor is ExecutorKind.PROCESS and report.plan.episode_workers == 2
    reference = evaluate(config(4), RunOptions(jobs=1))
    assert strip_timings(report.to_document()["episodes"]) == \
        strip_timings(reference.to_document()["episodes"])


def test_code_from_outside_parcat_never_runs_in_a_local_lane() -> None:
    outside = make_config(["harvest"], ["tests.fakes:StatefulPolicy"], episodes=4)
    report = evaluate(outside, RunOptions(jobs=2))
    assert report.plan is not None and not report.plan.local_lane
    explicit = evaluate(config(4), RunOptions(jobs=2, executor=ExecutorKind.PROCESS))
    assert explicit.plan is not None and not explicit.plan.local_lane


def test_a_run_that_ends_before_its_workers_start_leaves_no_process() -> None:
    tasks = make_tasks(config(1))[:2]
    executor = HybridExecutor(2, StepperConfig(), worth_starting_s=0.0)
    executor.run(tasks)
    executor.close()  # workers may still be starting: each stops itself when it comes up
    deadline = time.monotonic() + 30
    while worker_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not worker_children()


def test_a_short_run_starts_no_worker() -> None:
    tasks = make_tasks(config(3))
    with HybridExecutor(2, StepperConfig()) as executor:
        executor.run(tasks)
        assert executor._starter is None and not worker_children()


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_that_are_up_share_the_run_and_agree(workers: int) -> None:
    tasks = make_tasks(config(6))
    expected = InlineExecutor().run(tasks)
    with HybridExecutor(workers, StepperConfig()) as executor:
        executor._start_in_background(workers)  # as after a first long episode
        assert executor._starter is not None
        executor._starter.join(60)
        results = executor.run(tasks)
        assert len(executor._workers) == workers  # all of them took part
    assert untimed(results) == untimed(expected)
