"""User code that ends its own process never takes parcat down: at ``--jobs 1``, in the
episode's own share of the agents, and on a policy worker — the episode fails naming the
agent, is retried, and every other result is kept and written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from parcat.episode.results import EpisodeStatus
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.eval.report import strip_timings
from parcat.parallel.planner import ExecutorKind, PolicyStrategy
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from parcat.stepping.process import ProcessStepper
from tests.fakes import scripted_mission

ROOT = Path(__file__).resolve().parents[2]
RANDOM = parse_policy_spec("random")


def exiting(how: str, agent: int = -1, marker: str = "", at_step: int = 3) -> str:
    return f"tests.fakes:ExitingPolicy,how={how},agent={agent},at_step={at_step}" + (
        f",marker={marker}" if marker else "")


@pytest.mark.parametrize("how", ["os_exit", "sys_exit"])
def test_a_policy_that_ends_its_process_at_jobs_1_fails_only_its_episodes(how: str) -> None:
    good = scripted_mission("good", agents=2)
    bad = scripted_mission("bad", agents=2)
    report_good = evaluate(EvalConfig((good,), (RANDOM,), episodes=2), RunOptions(jobs=1))
    config = EvalConfig((good, bad), (parse_policy_spec(exiting(how, agent=1)),), episodes=2)
    report = evaluate(config, RunOptions(jobs=1))
    assert report.plan is not None and report.plan.executor is ExecutorKind.PROCESS
    assert [e.status for e in report.episodes] == [EpisodeStatus.FAILED] * 4
    for episode in report.episodes:
        assert episode.error is not None and episode.error.agent == "1"
    expected = ("episode worker died (exit code 9) while agent '1' was acting (2 attempts)"
                if how == "os_exit" else "called sys.exit(None)")
    assert report.episodes[0].error.message == expected  # type: ignore[union-attr]
    assert report_good.status == "complete"


def test_sys_exit_inline_is_a_failed_episode_not_a_clean_exit() -> None:
    bad = scripted_mission("bad", agents=2)
    config = EvalConfig((bad,), (parse_policy_spec(exiting("sys_exit", agent=0)),), episodes=3)
    report = evaluate(config, RunOptions(jobs=1, executor=ExecutorKind.INLINE))
    assert [e.status for e in report.episodes] == [EpisodeStatus.FAILED] * 3
    error = report.episodes[0].error
    assert error is not None and (error.type, error.agent, error.phase) == (
        "SystemExit", "0", "policy")


def test_a_crash_in_the_episode_s_own_share_of_agents_is_isolated() -> None:
    mission = scripted_mission("shared", agents=4, max_steps=20)
    spec = parse_policy_spec(exiting("os_exit", agent=0))  # agent 0 is the episode's own
    options = RunOptions(jobs=2, parallel_policy=True, policy_strategy=PolicyStrategy.PROCESS,
                         retries=0)
    report = evaluate(EvalConfig((mission,), (spec,), episodes=1), options)
    assert report.plan is not None and report.plan.executor is ExecutorKind.PROCESS
    (episode,) = report.episodes
    assert episode.status is EpisodeStatus.FAILED and episode.error is not None
    assert episode.error.message == (
        "episode worker died (exit code 9) while agent '0' was acting (1 attempt)")


def test_a_policy_worker_crash_names_its_agent_and_is_retried(tmp_path: Path) -> None:
    mission = scripted_mission(agents=3, max_steps=30)
    always = parse_policy_spec(exiting("os_exit", agent=2))
    stepper = ProcessStepper(1, spin=False)  # agents 1 and 2 live on the policy worker
    runner = EpisodeRunner(stepper, retries=1)
    try:
        failed = runner.run(EpisodeTask(mission, (always,), 0, 0))
        assert failed.status is EpisodeStatus.FAILED and failed.error is not None
        assert (failed.error.agent, failed.error.phase) == ("2", "worker")
        assert failed.error.message == (
            "policy worker 0 died (exit code 9) while agent '2' was acting (2 attempts)")
        once = parse_policy_spec(exiting("os_exit", agent=2, marker=str(tmp_path / "m")))
        retried = runner.run(EpisodeTask(mission, (once,), 0, 1))
        assert (tmp_path / "m").exists() and retried.status is EpisodeStatus.OK
    finally:
        runner.close()
    clean = EpisodeRunner()
    try:
        reference = clean.run(EpisodeTask(mission, (once,), 0, 1))
    finally:
        clean.close()
    assert retried.agents == reference.agents


def test_resume_after_a_one_off_policy_worker_crash_equals_a_clean_run(tmp_path: Path) -> None:
    mission = scripted_mission(agents=3, max_steps=20)
    once = parse_policy_spec(exiting("os_exit", agent=2, marker=str(tmp_path / "m")))
    options = RunOptions(jobs=2, parallel_policy=True, policy_strategy=PolicyStrategy.PROCESS,
                         executor=ExecutorKind.INLINE, retries=0)
    out = tmp_path / "r.json"
    first = evaluate(EvalConfig((mission,), (once,), episodes=3), options, output=out)
    assert first.status == "failed" and (tmp_path / "m").exists()
    resumed = evaluate(EvalConfig((mission,), (once,), episodes=3), options, output=out,
                       resume=True)
    clean = evaluate(EvalConfig((mission,), (once,), episodes=3), RunOptions(jobs=1))
    assert resumed.status == "complete"
    assert strip_timings(resumed.to_document())["episodes"] == \
        strip_timings(clean.to_document())["episodes"]


def test_the_cli_keeps_every_other_result_when_a_policy_exits(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "--set", "agents=2",
         "--set", "max_steps=20", "-n", "4", "--jobs", "1", "-o", str(out), "-f", "json",
         "-p", exiting("os_exit", agent=1, marker=str(tmp_path / "once"), at_step=5),
         "--retries", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    document = json.loads(out.read_text())
    statuses = [e["status"] for e in document["episodes"]]
    assert statuses == ["failed", "ok", "ok", "ok"]
    assert "Traceback" not in proc.stderr
