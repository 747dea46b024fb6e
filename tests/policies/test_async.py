"""Async policies: calls in flight together, per-call deadlines, retries of transient errors.

Everything talks to a real aiohttp server on loopback (:mod:`tests.policies.model_server`)
through the policy of ``examples/http_policy.py``, the one the README shows.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import gymnasium
import httpx
import numpy as np
import pytest
from examples.http_policy import AsyncHttpPolicy

from parcat import TransientError
from parcat.episode.lockstep import run_many
from parcat.episode.results import EpisodeStatus
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.eval.report import strip_timings
from parcat.policies.base import AgentSpec
from parcat.policies.specs import parse_policy_spec
from parcat.sim import run_sim
from parcat.stepping.base import InlineStepper
from parcat.stepping.calls import RETRY_AFTER_CAP_S, AsyncCalls, Call, retry_delay
from parcat.stepping.config import StepperConfig
from parcat.stepping.strategy import PolicyStrategy
from parcat.testing import check_policy
from tests.fakes import AsyncStatefulPolicy, AsyncStatelessPolicy, scripted_mission
from tests.policies.model_server import ModelServer
from tests.reliability.helpers import kill_group, session_processes, wait_until
from tests.sim.helpers import make_config
from tests.sim.test_sequential import same

ROOT = Path(__file__).resolve().parents[2]
HARVEST = ["-m", "harvest", "--set", "agents=4", "--set", "max_steps=30", "-n", "4"]


def parcat(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # examples/ importable in every worker
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def evaluate(server: ModelServer, policy: str, out: Path, *flags: str) -> dict[str, Any]:
    done = parcat("eval", *HARVEST, "-p", f"examples.http_policy:{policy},url={server.url}",
                  "-o", str(out), *flags)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def numbers(document: dict[str, Any]) -> list[Any]:
    return [(e["seed"], e["steps"], [a["reward"] for a in e["agents"]])
            for e in document["episodes"]]


def spec(n: int = 5) -> AgentSpec:
    return AgentSpec("test", "agent_0", 0, gymnasium.spaces.Box(-1, 1, (3,)),
                     gymnasium.spaces.Discrete(n))


@pytest.fixture
def server() -> Any:
    with ModelServer(delay_s=0.005) as running:
        yield running


def test_the_async_policy_from_the_docs_equals_its_sync_twin(server: ModelServer,
                                                             tmp_path: Path) -> None:
    asynchronous = evaluate(server, "AsyncHttpPolicy", tmp_path / "async.json")
    synchronous = evaluate(server, "HttpPolicy", tmp_path / "sync.json")
    assert numbers(asynchronous) == numbers(synchronous)
    assert any(r for _, _, rewards in numbers(asynchronous) for r in rewards)  # they played
    assert server.requests >= 2 * 4 * 4 * 30  # and the plan's timing of the first steps


def test_the_docs_batch_form_is_one_request_a_step_for_every_episode_in_lockstep(
        server: ModelServer, tmp_path: Path) -> None:
    flags = ("--executor", "inline", "--jobs", "1", "--lockstep", "4")
    one_by_one = evaluate(server, "AsyncHttpPolicy", tmp_path / "one.json", *flags)
    server.requests = 0
    batched = evaluate(server, "AsyncHttpBatchPolicy", tmp_path / "batch.json", *flags)
    assert numbers(batched) == numbers(one_by_one)
    # harvest's 30 steps, each one request for the 4 episodes' 16 agents (and the check's)
    assert server.requests <= 30 + 2


def test_503_to_every_10th_request_gives_the_clean_run_s_numbers_and_counts_retries(
        server: ModelServer, tmp_path: Path) -> None:
    # an explicit executor: no timing of the first steps, whose 503s no result would count
    flags = ("--executor", "thread", "--jobs", "4")
    clean = evaluate(server, "AsyncHttpPolicy", tmp_path / "clean.json", *flags)
    server.fail_every = 10
    dropped = evaluate(server, "AsyncHttpPolicy", tmp_path / "dropped.json", *flags)
    assert server.failures > 0
    assert strip_timings(dropped) == strip_timings(clean)  # retries are not results
    retries = [a["retries"] for e in dropped["episodes"] for a in e["agents"]]
    assert sum(retries) == server.failures
    assert [s["retries"] for s in dropped["summary"]] == [server.failures] * 2
    assert all(a["retries"] == 0 for e in clean["episodes"] for a in e["agents"])


@pytest.mark.parametrize("policy", ["HttpPolicy", "AsyncHttpPolicy"])
@pytest.mark.parametrize("flags", [
    ("--executor", "inline", "--jobs", "3", "--parallel-policy", "--policy-strategy", "process"),
    ("--executor", "process", "--jobs", "1", "--parallel-policy", "--policy-strategy", "thread"),
], ids=["policy-workers", "policy-threads"])
def test_503s_in_policy_workers_and_threads_give_the_clean_numbers_and_count_retries(
        server: ModelServer, tmp_path: Path, policy: str, flags: tuple[str, ...]) -> None:
    """Agents stepped in policy worker processes or on policy threads retry a dropped
    request like those stepped in the episode's own thread, and their retries are counted."""
    clean = evaluate(server, policy, tmp_path / "clean.json", *flags)
    server.fail_every = 10
    dropped = evaluate(server, policy, tmp_path / "dropped.json", *flags)
    assert server.failures > 0
    assert strip_timings(dropped) == strip_timings(clean)
    assert sum(a["retries"] for e in dropped["episodes"] for a in e["agents"]) == server.failures


def test_retries_show_in_the_csv_and_the_table_when_there_are_some(
        server: ModelServer, tmp_path: Path) -> None:
    server.fail_every = 10
    done = parcat("eval", *HARVEST, "-p", f"examples.http_policy:AsyncHttpPolicy,url={server.url}",
                  "--parallel-policy", "--policy-strategy", "thread", "--action-timeout-ms",
                  "30000", "-o", str(tmp_path / "out.csv"))
    assert done.returncode == 0, done.stderr
    header, everyone, *_ = (tmp_path / "out.csv").read_text().splitlines()
    assert header.endswith(",retries") and everyone.endswith(f",{server.failures}")
    assert "retries" in done.stdout


def test_429_waits_for_its_retry_after() -> None:
    with ModelServer(fail_every=3, fail_status=429, retry_after="1") as server:
        policies = [AsyncHttpPolicy(spec(), server.url) for _ in range(6)]
        calls = [Call(p.step, np.array([i, 0.5, -i], np.float32)) for i, p in enumerate(policies)]
        outcomes = AsyncCalls(retries=1).run(calls)
    assert [o.error for o in outcomes] == [None] * 6
    assert sum(o.retries for o in outcomes) == server.failures > 0
    assert len(server.retry_gaps_s) == server.failures
    assert min(server.retry_gaps_s) >= 0.9  # a lower bound: a busy machine only adds to it


def test_a_call_that_hangs_past_the_action_timeout_is_late_not_hung() -> None:
    with ModelServer(hang=True) as server:
        mission = scripted_mission(agents=2, max_steps=3)
        policy = parse_policy_spec(f"examples.http_policy:AsyncHttpPolicy,url={server.url}")
        runner = EpisodeRunner(InlineStepper(action_timeout_s=0.3, retries=1))
        try:
            result = runner.run(EpisodeTask(mission, (policy,), 0, 0))
        finally:
            runner.close()
    assert result.status is EpisodeStatus.OK and result.steps == 3
    assert [a.late_actions for a in result.agents] == [3, 3]


@pytest.mark.parametrize("flags", [["--parallel-policy"], []], ids=["threads", "lockstep"])
def test_a_hanging_server_with_the_action_timeout_flag_finishes_the_run(
        tmp_path: Path, flags: list[str]) -> None:
    """Async calls are bounded on the event loop: no policy thread is needed, so the
    episodes stay in lockstep (without --parallel-policy) as without a deadline."""
    def run(server: ModelServer) -> list[str]:
        return ["-m", "harvest", "--set", "agents=2", "--set", "max_steps=3", "-n", "2", "-p",
                f"examples.http_policy:AsyncHttpPolicy,url={server.url}",
                "--action-timeout-ms", "300", *flags]

    with ModelServer(hang=True) as server:
        done = parcat("eval", *run(server), "-o", str(tmp_path / "out.json"))
    with ModelServer() as server:  # answering: the calibration sees async calls that wait
        plan = parcat("plan", *run(server), "-f", "json")
    assert done.returncode == 0, done.stderr
    episodes = json.loads((tmp_path / "out.json").read_text())["episodes"]
    assert [[a["late_actions"] for a in e["agents"]] for e in episodes] == [[3, 3]] * 2
    if not flags:
        assert plan.returncode == 0, plan.stderr
        assert (json.loads(plan.stdout)["lockstep"], json.loads(plan.stdout)["strategy"]) == \
            (2, "inline")


class AsyncFailingPolicy:
    """Acts with 0, then fails at step 2 of its second episode: by raising or exiting."""

    def __init__(self, spec: AgentSpec, how: str = "raise") -> None:
        self.how = how
        self.episodes = 0
        self.steps = 0

    def reset(self, seed: int) -> None:
        self.episodes += 1
        self.steps = 0

    async def step(self, obs: Any) -> int:
        await asyncio.sleep(0.001)
        self.steps += 1
        if self.episodes == 2 and self.steps == 2:
            if self.how == "exit":
                sys.exit(3)  # a real one: it must fail the episode, not end the tests
            raise ValueError("model said no")
        return 0


@pytest.mark.parametrize(("how", "kind", "message"), [
    ("raise", "ValueError", "model said no"), ("exit", "SystemExit", "called sys.exit(3)")])
def test_an_async_policy_that_fails_fails_its_episode_only(how: str, kind: str,
                                                            message: str) -> None:
    mission = scripted_mission(agents=2, max_steps=4)
    policy = parse_policy_spec(f"tests.policies.test_async:AsyncFailingPolicy,how={how}")
    runner = EpisodeRunner(InlineStepper())
    try:
        results = [runner.run(EpisodeTask(mission, (policy,), 0, i)) for i in range(3)]
    finally:
        runner.close()
    assert [r.status for r in results] == [EpisodeStatus.OK, EpisodeStatus.FAILED,
                                           EpisodeStatus.OK]
    error = results[1].error
    assert error is not None
    assert (error.type, error.message, error.agent, error.phase) == (kind, message, "0", "policy")
    assert results[2].steps == 4


def test_256_calls_are_in_flight_at_once_without_a_thread_each() -> None:
    with ModelServer(hold_until=256) as server:
        policies = [AsyncHttpPolicy(spec(), server.url) for _ in range(256)]
        threads = threading.active_count()
        calls = [Call(p.step, np.array([0.5, i], np.float32)) for i, p in enumerate(policies)]
        outcomes = AsyncCalls(retries=1).run(calls)
        assert threading.active_count() <= threads + 1  # the event loop's, at most
    assert [o.error for o in outcomes] == [None] * 256
    assert server.max_in_flight == 256


class AlwaysTransient:
    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    async def step(self, obs: Any) -> int:
        self.calls += 1
        raise self.error


@pytest.mark.parametrize(("error", "tries"), [
    (TransientError("busy", retry_after=0.01), 3), (ConnectionResetError("reset"), 3),
    (ValueError("a bug"), 1)])
def test_retries_stop_at_the_retries_flag_and_skip_other_errors(error: BaseException,
                                                                tries: int) -> None:
    policy = AlwaysTransient(error)
    [outcome] = AsyncCalls(retries=2).run([Call(policy.step, None)])
    assert outcome.error is error and (policy.calls, outcome.retries) == (tries, tries - 1)


def _status_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/act")
    response = httpx.Response(status, headers=headers, request=request)
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError(f"{status} raised nothing")


def test_retry_delay_knows_transient_errors_and_honours_retry_after() -> None:
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    assert retry_delay(_status_error(503), 0) == 0.05
    assert retry_delay(_status_error(503), 1) == 0.1
    assert retry_delay(_status_error(429, {"Retry-After": "2"}), 0) == 2.0
    assert retry_delay(_status_error(429, {"Retry-After": later}), 0) == RETRY_AFTER_CAP_S
    assert retry_delay(_status_error(404), 0) is None
    assert retry_delay(httpx.ConnectError("refused"), 0) == 0.05
    assert retry_delay(TimeoutError(), 0) == 0.05
    assert retry_delay(TransientError("x", retry_after=99), 0) == RETRY_AFTER_CAP_S
    assert retry_delay(KeyError("x"), 0) is None
    # aiohttp's errors too (raise_for_status(), a dropped connection)
    busy = aiohttp.ClientResponseError(None, (), status=503, headers={"Retry-After": "3"})
    assert retry_delay(busy, 0) == 3.0
    assert retry_delay(aiohttp.ClientResponseError(None, (), status=400), 0) is None
    assert retry_delay(aiohttp.ServerDisconnectedError(), 0) == 0.05


@pytest.mark.parametrize(("strategy", "policy"), [
    ("inline", "AsyncStatefulPolicy"), ("thread", "AsyncStatefulPolicy"),
    ("process", "AsyncStatefulPolicy"), ("batch", "AsyncStatelessPolicy")])
def test_every_strategy_plays_an_async_policy_like_its_sync_twin(strategy: str,
                                                                 policy: str) -> None:
    """A policy worker and a shared ``step_batch`` make one call at a time (``blocking``)."""
    mission = scripted_mission(agents=3, max_steps=6)
    twin = "StatefulPolicy" if policy == "AsyncStatefulPolicy" else policy
    played = []
    for stepper, name in ((StepperConfig(PolicyStrategy(strategy), workers=2), policy),
                          (StepperConfig(), twin)):
        runner = EpisodeRunner(stepper.make_stepper())
        try:
            played.append([runner.run(EpisodeTask(mission, (parse_policy_spec(
                f"tests.fakes:{name}"),), 5, i)) for i in range(2)])
        finally:
            runner.close()
    assert all(r.ok for r in played[0])
    assert [[a.reward for a in r.agents] for r in played[0]] == \
        [[a.reward for a in r.agents] for r in played[1]]


def test_check_policy_accepts_an_async_policy() -> None:
    check_policy(AsyncStatelessPolicy(spec()), spec())
    check_policy(AsyncStatefulPolicy(spec()), spec())


@pytest.mark.parametrize("executor", ["inline", "auto"])
def test_ctrl_c_while_async_calls_hang_exits_130_in_one_line(executor: str) -> None:
    with ModelServer(hang=True) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "--set", "agents=4",
             "-n", "2", "--executor", executor,
             "-p", f"examples.http_policy:AsyncHttpPolicy,url={server.url}"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert wait_until(lambda: server.in_flight >= 4, 120), "no call ever hung"
            os.killpg(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 130, err
            assert len(err.splitlines()) == 1 and "Traceback" not in err, err
            assert wait_until(lambda: not session_processes(proc.pid), 30)
        finally:
            kill_group(proc)


def test_the_simulator_plays_an_async_policy_like_its_sync_twin(tmp_path: Path) -> None:
    records = []
    for name in ("AsyncStatefulPolicy", "StatefulPolicy"):
        agents = [{"agent": "evader", "policy": f"tests.fakes:{name}", "cycle_time": 0.02}]
        records.append(run_sim(make_config(tmp_path, agents, iters=30), "sequential"))
    assert same(*records)


def test_an_async_step_that_blocks_the_event_loop_is_late_and_the_run_ends(
        tmp_path: Path) -> None:
    done = parcat("eval", "-m", "harvest", "--set", "agents=2", "--set", "max_steps=4",
                  "-n", "2", "-p", "tests.fakes:AsyncBlockingHangingPolicy,at_step=2",
                  "--parallel-policy", "--policy-strategy", "thread", "--executor", "process",
                  "--action-timeout-ms", "200", "-o", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr
    episodes = json.loads((tmp_path / "out.json").read_text())["episodes"]
    assert all(e["status"] == "ok" and e["steps"] == 4 for e in episodes)
    # from the hang (step 3) on, every call of that process is late: its loop is blocked
    assert all(a["late_actions"] >= 2 for e in episodes for a in e["agents"])


def _lockstep(tasks: list[EpisodeTask], slots: int,
              stepper: InlineStepper | None = None) -> list[dict[str, Any]]:
    """The tasks' results in task order, played ``slots`` at a time (1: one at a time)."""
    runner = EpisodeRunner(stepper or InlineStepper())
    try:
        played = sorted(run_many(runner, enumerate(tasks), slots), key=lambda item: item[0])
    finally:
        runner.close()
    assert [index for index, _ in played] == list(range(len(tasks)))
    return [replace(result, duration_s=0.0).to_dict() for _, result in played]


EIGHT = ["-m", "harvest", "--set", "agents=4", "--set", "max_steps=20", "-n", "8"]


def eval_eight(folder: Path, *flags: str, hold: int = 0) -> tuple[dict[str, Any], int]:
    """``eval`` of 8 episodes with an async policy on its own server, which holds its first
    requests until ``hold`` are in flight: the results and the most calls in flight."""
    policy = "examples.http_policy:AsyncHttpPolicy,url={}"
    with ModelServer(hold_until=hold) as server:
        out = folder / f"{hold}.json"
        done = parcat("eval", *EIGHT, "-p", policy.format(server.url), "-o", str(out), *flags)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), server.max_in_flight


@pytest.fixture(scope="module")
def eight_with_jobs_1(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sequential results, run once for every executor's lockstep run."""
    return eval_eight(tmp_path_factory.mktemp("jobs-1"), "--jobs", "1")[0]


@pytest.mark.parametrize("executor", ["inline", "process"])
def test_an_async_policy_in_lockstep_8_has_every_call_in_flight_and_the_results_of_jobs_1(
        executor: str, tmp_path: Path, eight_with_jobs_1: dict[str, Any]) -> None:
    # the server holds its first requests until 8 episodes x 4 agents are in flight
    lockstep, in_flight = eval_eight(tmp_path, "--executor", executor, "--jobs", "1",
                                     "--lockstep", "8", hold=8 * 4)
    assert lockstep["execution"]["plan"]["lockstep"] == 8
    assert in_flight == 8 * 4  # not 4: every slot's calls went out together
    # the policy's name holds its server's port
    assert numbers(lockstep) == numbers(eight_with_jobs_1)


class AsyncFlakyPolicy:
    """Its seed decides its trouble: ``seed % 3`` transient errors on its first step, and
    when ``seed % 4 == 0`` a call at step 2 that hangs (late)."""

    def __init__(self, spec: AgentSpec) -> None:
        self.failures, self.hangs = 0, False
        self.steps = 0

    def reset(self, seed: int) -> None:
        self.failures, self.hangs, self.steps = seed % 3, seed % 4 == 0, 0

    async def step(self, obs: Any) -> int:
        if self.failures:
            self.failures -= 1
            raise TransientError("busy", retry_after=0)
        self.steps += 1
        if self.steps == 2 and self.hangs:
            await asyncio.sleep(3600)  # cancelled at the deadline
        return self.steps % 2


def test_retries_and_late_calls_land_on_their_own_agent_and_episode_in_lockstep() -> None:
    mission = scripted_mission(agents=3, max_steps=4)
    policy = parse_policy_spec("tests.policies.test_async:AsyncFlakyPolicy")
    tasks = [EpisodeTask(mission, (policy,), 7, i) for i in range(8)]
    # a generous deadline: only the hanging calls are late, even beside a busy process
    alone, together = (_lockstep(tasks, k, InlineStepper(action_timeout_s=1.0, retries=2))
                       for k in (1, 8))
    assert together == alone
    counts = [[(a["late_actions"], a["retries"]) for a in r["agents"]] for r in together]
    assert all(r["status"] == "ok" for r in together)
    flat = [c for episode in counts for c in episode]
    # the seeds spread the trouble unevenly: a mix-up of slots or agents would show
    assert {late for late, _ in flat} == {0, 1} and {tries for _, tries in flat} == {0, 1, 2}


class AsyncCountedBatchPolicy(AsyncStatelessPolicy):
    """:class:`~tests.fakes.AsyncStatelessPolicy` that keeps the size of every batch."""

    sizes: list[int] = []

    async def step_batch(self, obs_batch: list[Any]) -> list[int]:
        AsyncCountedBatchPolicy.sizes.append(len(obs_batch))
        return await super().step_batch(obs_batch)


def test_a_shared_async_step_batch_is_one_call_per_round_for_every_slot() -> None:
    mission = scripted_mission(agents=3, max_steps=5)
    shared = parse_policy_spec("tests.policies.test_async:AsyncCountedBatchPolicy")
    own = parse_policy_spec("tests.fakes:AsyncStatefulPolicy")
    tasks = [EpisodeTask(mission, (shared, own), 0, i) for i in range(4)]
    AsyncCountedBatchPolicy.sizes.clear()
    alone = _lockstep(tasks, 1)
    agents = sum(AsyncCountedBatchPolicy.sizes) // 5  # the shared policy's, in 4 episodes
    AsyncCountedBatchPolicy.sizes.clear()
    assert _lockstep(tasks, 4) == alone
    # one call per step for all of them; the other policy's steps went out beside it
    assert AsyncCountedBatchPolicy.sizes == [agents] * 5 and agents > 3


class AsyncPickyBatchPolicy(AsyncStatelessPolicy):
    """Raises on the observation of agent 2 at step 3 (a scripted env's ``[step, agent]``)."""

    async def step_batch(self, obs_batch: list[Any]) -> list[int]:
        if any(obs[0] == 3 and obs[1] == 2 for obs in obs_batch):
            raise ValueError("agent 2 is not served at step 3")
        return await super().step_batch(obs_batch)


def test_a_shared_async_call_that_raises_fails_only_the_episodes_it_fails_on() -> None:
    mission = scripted_mission(agents=3, max_steps=6)
    policies = (parse_policy_spec("random"),
                parse_policy_spec("tests.policies.test_async:AsyncPickyBatchPolicy"))
    tasks = [EpisodeTask(mission, policies, 0, i) for i in range(8)]
    together = _lockstep(tasks, 8)
    failed = [r for r in together if r["status"] != "ok"]
    assert failed and len(failed) < len(together)
    assert all("agent 2 is not served at step 3" in r["error"]["traceback"] for r in failed)
    assert together == _lockstep(tasks, 1)


def test_a_sync_policy_s_transient_errors_are_retried_and_counted() -> None:
    """A sync policy (a served one: urllib3 under the hood) raising TransientError gets
    --retries too: the clean run's actions, the retries in the results."""
    from parcat.episode.rollout import EpisodeRunner, EpisodeTask
    from parcat.stepping.base import InlineStepper
    from tests.fakes import FlakyPolicy, scripted_mission

    mission = scripted_mission(agents=2, max_steps=6)
    tasks = [EpisodeTask(mission, (parse_policy_spec("tests.fakes:FlakyPolicy"),), 0, i)
             for i in range(3)]
    FlakyPolicy.calls = 0
    runner = EpisodeRunner(InlineStepper(retries=1))
    try:
        results = [runner.run(task) for task in tasks]
    finally:
        runner.close()
    assert all(r.ok for r in results), [r.error for r in results]
    retried = sum(a.retries for r in results for a in r.agents)
    assert retried > 0
    strict = EpisodeRunner(InlineStepper(retries=0))
    try:
        FlakyPolicy.calls = 0
        failed = strict.run(tasks[0])
    finally:
        strict.close()
    assert not failed.ok and failed.error is not None and "503" in failed.error.message


def test_an_auto_plan_puts_an_async_policy_s_episodes_in_lockstep(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Calls that wait on the event loop need no policy threads: the waiting plan plays
    the episodes in lockstep, every agent's call of a round in flight at once, and the
    results are --jobs 1's."""
    from parcat.cli.main import main

    run = ["-m", "harvest", "--set", "agents=4", "--set", "max_steps=12", "-n", "6",
           "-p", "tests.fakes:AsyncWaitingPolicy,ms=5", "-f", "json"]
    assert main(["plan", *run]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["lockstep"] > 1 and (plan["strategy"], plan["policy_workers"]) == ("inline", 0)
    assert any("async calls are in flight at once" in reason for reason in plan["reasons"])
    results = []
    for jobs in ([], ["--jobs", "1"]):
        assert main(["eval", *run, *jobs]) == 0
        document = json.loads(capsys.readouterr().out)
        results.append([[a["reward"] for a in e["agents"]] for e in document["episodes"]])
    assert results[0] == results[1]
