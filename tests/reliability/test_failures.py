"""Scenarios 1–3 and 6: raising, dying and hanging episodes; unpicklable input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parcat.core.errors import ConfigError
from parcat.envs.missions import Mission
from parcat.episode.results import EpisodeStatus
from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.eval.report import strip_timings
from parcat.parallel.planner import ExecutorKind
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from tests.fakes import dying_mission, scripted_mission

RANDOM = (parse_policy_spec("random"),)
PROCESS = RunOptions(jobs=2, executor=ExecutorKind.PROCESS)


def episodes_of(report) -> list[dict]:  # type: ignore[no-untyped-def]
    return strip_timings(report.to_document())["episodes"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("options", [RunOptions(jobs=1), PROCESS])
def test_raising_env_fails_its_episode_only(options: RunOptions) -> None:
    good = scripted_mission("good")
    bad = scripted_mission("bad", fail_at=2)
    report = evaluate(EvalConfig((good, bad), RANDOM, episodes=3), options)
    statuses = [(e.mission, e.status) for e in report.episodes]
    assert statuses == [("good", EpisodeStatus.OK)] * 3 + [("bad", EpisodeStatus.FAILED)] * 3
    assert report.status == "failed"
    error = report.episodes[3].error
    assert error is not None and error.message == "scripted failure at step 2"
    assert "Traceback" in error.traceback and error.phase == "step"


@pytest.mark.parametrize("options", [RunOptions(jobs=1, fail_fast=True),
                                     RunOptions(jobs=2, executor=ExecutorKind.PROCESS,
                                                fail_fast=True)])
def test_fail_fast_stops_at_the_first_failure(options: RunOptions, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    bad = scripted_mission("bad", fail_at=1)
    report = evaluate(EvalConfig((bad,), RANDOM, episodes=20), options, output=out)
    assert report.status == "failed" and len(report.episodes) < 20
    assert out.exists()


@pytest.mark.parametrize("how", ["sigkill", "exit", "segfault"])
def test_dead_worker_is_retried_and_reproduces_the_result(how: str, tmp_path: Path) -> None:
    marker = tmp_path / "died-once"
    dying = dying_mission(how=how, marker=str(marker))
    healthy = Mission(**{**dying.__dict__, "params": {**dying.params, "at_step": 10**6}})
    options = RunOptions(jobs=2, executor=ExecutorKind.PROCESS, retries=1)
    report = evaluate(EvalConfig((dying,), RANDOM, episodes=4), options)
    assert marker.exists(), "the env never died"
    assert report.status == "complete", [e.error for e in report.failed]
    reference = evaluate(EvalConfig((healthy,), RANDOM, episodes=4), RunOptions(jobs=1))
    assert episodes_of(report) == episodes_of(reference)


def test_worker_that_always_dies_is_recorded_once_naming_the_signal() -> None:
    dying = dying_mission(how="sigkill", at_step=2)
    report = evaluate(EvalConfig((dying,), RANDOM, episodes=3),
                      RunOptions(jobs=2, executor=ExecutorKind.PROCESS, retries=1))
    assert [e.episode_index for e in report.episodes] == [0, 1, 2]
    for episode in report.episodes:
        assert episode.status is EpisodeStatus.FAILED and episode.error is not None
        assert "died (signal SIGKILL)" in episode.error.message
        assert "(2 attempts)" in episode.error.message


def test_hung_episode_times_out_and_the_run_goes_on() -> None:
    hung = dying_mission("hung", how="hang", at_step=2)
    good = scripted_mission("fine")
    options = RunOptions(jobs=2, episode_timeout_s=1.0)
    report = evaluate(EvalConfig((hung, good), RANDOM, episodes=2), options)
    assert report.plan is not None and report.plan.executor is ExecutorKind.PROCESS
    # the hang is an hour long: finishing at all (under pytest's timeout) shows the stop
    assert [e.status for e in report.episodes] == [EpisodeStatus.TIMEOUT] * 2 + \
        [EpisodeStatus.OK] * 2


def test_unpicklable_mission_runs_inline_and_executors_refuse_it_before_workers_start(
) -> None:
    mission = scripted_mission()
    weird = Mission(**{**mission.__dict__, "params": {**mission.params, "busy_us": 0},
                       "description": "x"})
    object.__setattr__(weird, "params", {**weird.params, "tag": lambda: None})
    message = "mission 'scripted' cannot be sent to worker processes"
    # evaluate() falls back to this process (tests/test_unpicklable.py has the details)
    with pytest.warns(RuntimeWarning, match=re.escape(message)):
        report = evaluate(EvalConfig((weird,), RANDOM, episodes=2), PROCESS)
    assert report.status == "complete"
    # an executor handed such tasks directly refuses them before any worker starts
    from parcat.eval.evaluate import make_tasks
    from parcat.parallel.process_executor import ProcessExecutor

    executor = ProcessExecutor(2)
    try:
        with pytest.raises(ConfigError, match=re.escape(message)):
            executor.run(make_tasks(EvalConfig((weird,), RANDOM, episodes=2)))
        assert not executor._workers
    finally:
        executor.close()
