"""Policies that wait: plans give them concurrency, not CPUs; results never change; a
worker that dies with several episodes in flight loses none of the others."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parcat.cli.main import main
from parcat.core.seeding import episode_seed
from parcat.envs.missions import Mission
from parcat.episode.results import EpisodeStatus
from parcat.episode.rollout import EpisodeTask
from parcat.eval.evaluate import EvalConfig, EvalReport, evaluate, make_config
from parcat.eval.report import strip_timings
from parcat.parallel.planner import ExecutorKind, PolicyStrategy, Workload, make_plan
from parcat.parallel.process_executor import ProcessExecutor
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from parcat.stepping.config import StepperConfig

# 8 episodes x 4 agents, a step of 5 ms that computes 50 µs of it: issue 22's workload
WAITING = Workload(tasks=8, agents=4, step_s=5e-3, step_cpu_s=50e-6, steps=50,
                   foreign_code="wait_policy:Wait")


@pytest.mark.parametrize("cpus", [2, 64])
@pytest.mark.parametrize("free", [None, 1])
def test_a_waiting_workload_gets_concurrency_whatever_cpus_are_free(
        cpus: int, free: int | None) -> None:
    plan = make_plan(cpus, cpus, 0, replace(WAITING, free_cpus=free))
    assert (plan.executor, plan.episode_workers, plan.episodes_per_worker) == (
        ExecutorKind.PROCESS, 1, 8)
    assert (plan.strategy, plan.policy_workers, plan.concurrency) == (
        PolicyStrategy.THREAD, 3, 32)
    assert "concurrency 32 (auto): every agent of every episode in flight (32)" in plan.reasons
    assert plan.notes == ()


@pytest.mark.parametrize("cpus", [2, 64])
def test_parcats_own_waiting_code_waits_on_threads_in_this_process(cpus: int) -> None:
    plan = make_plan(cpus, cpus, 0, replace(WAITING, foreign_code=None, free_cpus=1))
    assert (plan.executor, plan.episode_workers, plan.episodes_per_worker) == (
        ExecutorKind.THREAD, 8, 1)
    assert plan.policy_workers == 3


def test_only_the_cpu_part_takes_processes_and_busy_cpus_trim_only_those() -> None:
    computing = replace(WAITING, step_cpu_s=1e-3)  # 20%: 32 calls compute ~6.4 CPUs
    wide = make_plan(64, 64, 0, computing)
    assert (wide.episode_workers, wide.episodes_per_worker, wide.concurrency) == (7, 2, 32)
    loaded = make_plan(64, 64, 0, replace(computing, free_cpus=3, jobs_given=True))
    assert (loaded.episode_workers, loaded.episodes_per_worker, loaded.concurrency) == (
        3, 3, 32)
    assert loaded.notes == ("7 worker process(es) (--jobs 64) trimmed to 3: 61 of the 64 "
                            "CPU(s) are busy with other processes (--executor process keeps it)",)


def test_concurrency_is_capped_or_given() -> None:
    many = make_plan(2, 2, 0, replace(WAITING, tasks=100, agents=8))
    # 32 episodes x 8 agents: 256 calls compute ~2.6 CPUs: the 2 CPUs' worth of processes
    assert (many.concurrency, many.episode_workers, many.episodes_per_worker) == (256, 2, 16)
    assert "concurrency 256 (auto): every agent of every episode in flight (800), capped " \
           "at 256" in many.reasons
    given = make_plan(2, 2, 0, replace(WAITING, concurrency=2))
    assert (given.concurrency, given.episodes_per_worker, given.policy_workers) == (2, 1, 1)


def test_an_episode_timeout_keeps_one_episode_per_worker_and_says_so() -> None:
    plan = make_plan(4, 4, 0, replace(WAITING, isolate=True))
    assert (plan.episode_workers, plan.episodes_per_worker) == (4, 1)
    assert "--episode-timeout: one episode in flight per worker (a timeout stops its " \
           "worker): 4 episode worker process(es)" in plan.reasons
    given = make_plan(4, 4, 0, replace(WAITING, isolate=True, concurrency=32))
    assert given.notes == ("--concurrency 32 lowered to 16: with --episode-timeout each of "
                           "the 4 worker(s) runs one episode at a time",)


def test_jobs_1_stays_one_at_a_time() -> None:
    plan = make_plan(1, 2, 0, replace(WAITING, jobs_given=True))
    assert (plan.episode_workers, plan.episodes_per_worker, plan.strategy) == (
        1, 1, PolicyStrategy.INLINE)
    unmeasured = make_plan(1, 2, 0, replace(WAITING, jobs_given=True, step_cpu_s=None))
    assert replace(plan, reasons=plan.reasons[1:]) == unmeasured
    assert plan.reasons[0] == ("the policy step waits, but --jobs 1 runs one episode and one "
                               "agent at a time, as asked (--concurrency N overlaps the waits)")


@pytest.mark.parametrize("cpus", [2, 64])
@pytest.mark.parametrize("parallel_policy", [False, True])
@pytest.mark.parametrize("step_s", [2e-6, 200e-6, 5e-3])
def test_a_computing_policy_is_planned_as_before(
        cpus: int, parallel_policy: bool, step_s: float) -> None:
    for work in (replace(WAITING, step_s=step_s, parallel_policy=parallel_policy),
                 replace(WAITING, step_s=step_s, parallel_policy=parallel_policy,
                         foreign_code=None, free_cpus=1)):
        before = make_plan(cpus, cpus, 0, replace(work, step_cpu_s=None))
        assert make_plan(cpus, cpus, 0, replace(work, step_cpu_s=step_s)) == before
        assert before.episodes_per_worker == 1


def test_notes_say_where_the_plan_overrules_the_flags() -> None:
    cpu = Workload(tasks=8, agents=4, parallel_policy=True, free_cpus=1)
    assert make_plan(4, 2, 0, cpu).notes == ()  # a default --jobs is not the user's word
    assert make_plan(4, 2, 0, replace(cpu, jobs_given=True)).notes == (
        "--jobs 4 trimmed to 1: 1 of the 2 CPU(s) are busy with other processes "
        "(--executor process keeps it)",)
    asked = replace(cpu, strategy=PolicyStrategy.PROCESS, free_cpus=None)
    assert make_plan(2, 2, 0, asked).notes == (
        "--policy-strategy process replaced by inline: no job left for policy workers "
        "(2 episode worker(s) use all 2): agents stepped inline",)


def test_a_concurrency_for_a_policy_that_computes_is_said_to_be_unused() -> None:
    plan = make_plan(2, 2, 0, replace(WAITING, step_cpu_s=5e-3, concurrency=8))
    assert plan.notes == ("--concurrency 8 unused: it limits a policy step that waits, and "
                          "this one was not measured waiting (a policy from outside parcat is "
                          "timed in an auto plan)",)


def test_eval_prints_a_note_when_the_strategy_asked_for_is_replaced(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["eval", "-m", "harvest", "-n", "1", "--set", "max_steps=2", "-f", "json"]
    assert main([*base, "--policy-strategy", "thread"]) == 0
    assert capsys.readouterr().err == (
        "parcat: note: --policy-strategy thread replaced by inline: it needs "
        "--parallel-policy\n")
    assert main(base) == 0
    assert "note" not in capsys.readouterr().err


def _run(options: RunOptions) -> EvalReport:
    config = make_config(["harvest"], ["tests.fakes:WaitingPolicy,ms=1"], episodes=6, seed=3,
                         overrides={"agents": 3, "max_steps": 12})
    return evaluate(config, options)


@pytest.mark.usefixtures("clean_machine")
def test_a_waiting_policy_gives_the_sequential_results_on_every_plan() -> None:
    sequential = _run(RunOptions(jobs=1))
    assert sequential.plan is not None and sequential.plan.episodes_per_worker == 1
    for options in (RunOptions(), RunOptions(jobs=32, parallel_policy=True)):
        report = _run(options)
        plan = report.plan
        assert plan is not None and plan.concurrency == 18  # 6 episodes x 3 agents
        assert plan.strategy is PolicyStrategy.THREAD and plan.policy_workers == 2
        assert plan.episode_workers * plan.episodes_per_worker >= 6
        assert report.status == "complete", [e.error for e in report.failed]
        assert strip_timings(report.to_document()) == strip_timings(sequential.to_document())


def _doomed_tasks(how: str, doomed: int, count: int) -> list[EpisodeTask]:
    mission = Mission(name="doomed", env="tests.fakes:DoomedEnv", max_steps=20,
                      params={"agents": 2, "max_steps": 20, "how": how})
    seed = episode_seed(0, mission.key, doomed)
    mission = replace(mission, params={**mission.params, "doomed_seed": seed})
    policies = (parse_policy_spec("tests.fakes:WaitingPolicy,ms=1"),)
    return [EpisodeTask(mission, policies, 0, index) for index in range(count)]


@pytest.mark.usefixtures("clean_machine")
@pytest.mark.parametrize(("how", "retries"), [("exit", 0), ("segfault", 1)])
def test_a_worker_lost_with_episodes_in_flight_fails_only_the_culprit(
        how: str, retries: int) -> None:
    """Episodes 0-3 are in flight when 2 kills the worker: each runs again alone, and only
    2 is charged (with no retry left, charging all four would fail all four)."""
    tasks = _doomed_tasks(how, doomed=2, count=6)
    stepper = StepperConfig(PolicyStrategy.THREAD, 1)
    with ProcessExecutor(1, stepper, retries=retries, episodes_per_worker=4) as executor:
        results = executor.run(tasks)
    assert [r.episode_index for r in results] == list(range(6))
    assert [r.status for r in results] == [EpisodeStatus.OK] * 2 + [EpisodeStatus.FAILED] + \
        [EpisodeStatus.OK] * 3
    error = results[2].error
    attempts = "(2 attempts)" if retries else "(1 attempt)"
    assert error is not None and error.type == "WorkerError" and attempts in error.message
    with ProcessExecutor(1, stepper) as clean:
        again = clean.run([t for t in tasks if t.episode_index != 2])
    assert [(r.episode_index, r.agents) for r in results if r.ok] == [
        (r.episode_index, r.agents) for r in again]


@pytest.mark.parametrize("value", ["0", "1025"])
def test_a_bad_concurrency_is_one_line(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", "harvest", "--concurrency", value]) == 2
    assert capsys.readouterr().err == (
        f"parcat: error: --concurrency must be an integer between 1 and 1,024, got {value}\n")


def test_plan_shows_the_concurrency_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "-m", "harvest", "-n", "3", "--set", "agents=2", "--set", "max_steps=5",
            "-p", "tests.fakes:WaitingPolicy,ms=2", "--concurrency", "4", "-f", "json"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["concurrency"], plan["episodes_per_worker"], plan["strategy"]) == (
        4, 2, "thread")
    assert "concurrency 4 (--concurrency): agent calls in flight at most" in plan["reasons"]


@given(jobs=st.integers(1, 128), cpus=st.integers(1, 128), tasks=st.integers(0, 5_000),
       agents=st.integers(1, 64), share=st.floats(0.0, 0.49), wall=st.floats(5e-4, 1.0),
       free=st.one_of(st.none(), st.integers(1, 128)),
       given_limit=st.one_of(st.none(), st.integers(1, 1024)),
       foreign=st.booleans(), isolate=st.booleans(), parallel=st.booleans(),
       waits=st.sampled_from(["policy", "environment", "both"]))
def test_a_waiting_plan_stays_within_jobs_and_its_concurrency(
        jobs: int, cpus: int, tasks: int, agents: int, share: float, wall: float,
        free: int | None, given_limit: int | None, foreign: bool, isolate: bool,
        parallel: bool, waits: str) -> None:
    policy = (wall, share * wall) if waits != "environment" else (2e-6, 2e-6)
    env = (wall, share * wall) if waits != "policy" else (None, None)
    work = Workload(tasks, agents, parallel, step_s=policy[0], step_cpu_s=policy[1],
                    env_step_s=env[0], env_step_cpu_s=env[1],
                    free_cpus=free, concurrency=given_limit, isolate=isolate,
                    foreign_code="m:C" if foreign else None, jobs_given=True)
    plan = make_plan(jobs, cpus, 0, work)
    if jobs == 1 and given_limit is None:
        assert plan.episodes_per_worker == 1  # --jobs 1: one at a time
        return
    assert 1 <= plan.concurrency <= (given_limit or 256)
    if waits == "environment":  # a policy that computes steps inline: no thread pays
        assert plan.policy_workers == 0
    agents_at_once = max(1, plan.policy_workers + (0 if plan.policy_workers == 0 else 1))
    in_flight = plan.episode_workers * plan.episodes_per_worker * agents_at_once
    if plan.executor is ExecutorKind.PROCESS:
        assert plan.episode_workers <= jobs
        # whole episodes: at most one episode's agents short of the limit
        # (an episode whose agents step inline is one call in flight at a time)
        assert in_flight > min(plan.concurrency, max(1, tasks) * agents_at_once) \
            - agents_at_once or isolate
    if isolate or foreign:
        assert plan.executor is ExecutorKind.PROCESS
    if isolate:
        assert plan.episodes_per_worker == 1


def test_the_waiting_command_prints_the_sequential_json() -> None:
    """A real ``python -m parcat eval -f json``, default against ``--jobs 1``."""
    root = Path(__file__).resolve().parents[2]
    args = [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "--set", "agents=3",
            "--set", "max_steps=8", "-n", "4", "-p", "tests.fakes:WaitingPolicy,ms=1",
            "-f", "json"]
    documents = []
    for extra in (["--jobs", "1"], []):
        proc = subprocess.run([*args, *extra], cwd=root, capture_output=True, text=True,
                              timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        documents.append(json.loads(proc.stdout))
    sequential, default = documents
    assert default["execution"]["plan"]["episodes_per_worker"] > 1 or \
        default["execution"]["plan"]["episode_workers"] > 1
    assert strip_timings(default) == strip_timings(sequential)


# an environment that waits on a game server (5 ms a step), written as an outsider would
SERVER = Mission(name="server", env="tests.parallel.server_env:GameServerEnv",
                 params={"agents": 2, "ms": 5, "max_steps": 10}, max_steps=10)


@pytest.mark.parametrize("cpus", [2, 64])
def test_an_environment_that_waits_gets_episodes_in_flight_not_cpus(cpus: int) -> None:
    work = Workload(tasks=16, agents=2, step_s=3e-6, step_cpu_s=3e-6, env_step_s=5e-3,
                    env_step_cpu_s=80e-6, steps=10, foreign_code=SERVER.env)
    plan = make_plan(cpus, cpus, 0, replace(work, free_cpus=1))
    assert (plan.executor, plan.episode_workers, plan.episodes_per_worker) == (
        ExecutorKind.PROCESS, 1, 16)
    # the policy computes: its agents step inline, one episode thread each
    assert (plan.strategy, plan.policy_workers, plan.concurrency) == (
        PolicyStrategy.INLINE, 0, 16)
    assert plan.reasons[:2] == (
        "an environment step waits: 5.0 ms of wall time, 80 µs of CPU (2%): CPUs are "
        "budgeted for the CPU part only, and the wait gets concurrency (threads), not "
        "processes", "concurrency 16 (auto): every episode in flight (16)")
    both = make_plan(cpus, cpus, 0, replace(work, step_s=5e-3, step_cpu_s=50e-6))
    assert (both.policy_workers, both.concurrency) == (1, 32)  # and agents in flight too


@pytest.mark.usefixtures("clean_machine")
def test_an_environment_that_waits_gives_the_sequential_results_with_episodes_in_flight(
        ) -> None:
    config = EvalConfig((SERVER,), (parse_policy_spec("random"),), episodes=8, seed=5)
    sequential = evaluate(config, RunOptions(jobs=1))
    report = evaluate(config, RunOptions())
    plan = report.plan
    assert plan is not None and report.status == "complete"
    assert plan.episode_workers * plan.episodes_per_worker == 8
    assert plan.reasons[0].startswith("an environment step waits: ")
    assert strip_timings(report.to_document()) == strip_timings(sequential.to_document())


def test_plan_says_the_environment_waits(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    mission = tmp_path / "server.yaml"
    mission.write_text(f"name: server\nenv: {SERVER.env}\nparams: {{agents: 2, ms: 5}}\n"
                       "max_steps: 10\n")
    assert main(["plan", "-m", str(mission), "-p", "random", "-n", "6"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "an environment step waits: " in out
    assert "concurrency 6 (auto): every episode in flight (6)" in out


def _descendants() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


@pytest.mark.usefixtures("clean_machine")
@pytest.mark.parametrize("episodes", [8, 32])
def test_64_and_256_agent_calls_in_flight_take_threads_not_processes(episodes: int) -> None:
    """8 agents a episode: 64 and 256 calls of a policy that waits in flight on 2 cores."""
    config = make_config(["harvest"], ["tests.fakes:WaitingPolicy,ms=2"], episodes=episodes,
                         seed=7, overrides={"agents": 8, "max_steps": 3})
    sequential = evaluate(config, RunOptions(jobs=1))
    processes: list[int] = []
    report = evaluate(config, RunOptions(),
                      on_result=lambda result: processes.append(len(_descendants())))
    plan = report.plan
    assert plan is not None and report.status == "complete"
    assert plan.concurrency == episodes * 8
    assert plan.episode_workers * plan.episodes_per_worker >= episodes
    assert plan.strategy is PolicyStrategy.THREAD and plan.policy_workers == 7
    # the fork server, the resource tracker and the episode workers: a lane is a thread
    assert max(processes) <= 2 + plan.episode_workers and plan.episode_workers <= 2
    assert strip_timings(report.to_document()) == strip_timings(sequential.to_document())


@pytest.mark.parametrize("policy", [["-p", "random"], [
    "-p", "tests.fakes:WaitingPolicy,ms=1", "--parallel-policy", "--policy-strategy", "process"]],
    ids=["computing", "waiting"])
def test_eval_prints_a_note_when_its_jobs_are_trimmed(policy: list[str]) -> None:
    """A real open-file limit that leaves room for 2 workers: --jobs 32 trimmed is said in
    one note line (and the strategy it then cannot keep in another), and the run goes on."""
    import resource

    def two_workers_of_files() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (80, hard))

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "4", "--set",
         "max_steps=2", "--set", "agents=4", *policy, "--jobs", "32", "--executor", "process",
         "-f", "json"], cwd=root, env={**os.environ, "PYTHONPATH": f"{root / 'src'}:{root}"},
        preexec_fn=two_workers_of_files, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "note" in line]
    assert notes[0] == ("parcat: note: --jobs 32 trimmed to 2: the open-file and process "
                        "limits allow 2 worker process(es)")
    assert notes[1:] == ([] if "random" in policy else [
        "parcat: note: --policy-strategy process replaced by inline: no job left for policy "
        "workers (2 episode worker(s) use all 2): agents stepped inline"])
