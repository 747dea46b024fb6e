"""Frozen workers (SIGSTOP: what a deadlock or a stuck native call looks like from outside)
are noticed by their heartbeat, killed, reported, and their work retried — with no timeout
flag given."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import numpy as np
import pytest

from parcat.envs.missions import load_mission
from parcat.episode.results import EpisodeResult, EpisodeStatus
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.ipc import process
from parcat.parallel.process_executor import ProcessExecutor
from parcat.policies.specs import parse_policy_spec
from parcat.stepping.process import ProcessStepper
from parcat.train.vecenv import VecEnv
from tests.fakes import scripted_mission
from tests.reliability.helpers import wait_until

RANDOM = (parse_policy_spec("random"),)


@pytest.fixture(autouse=True)
def quick_liveness(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(process, "LIVENESS_TIMEOUT_S", 1.5)
    yield


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_frozen_episode_worker_is_replaced_and_its_episodes_rerun() -> None:
    mission = scripted_mission(agents=2, max_steps=40, busy_us=2000)
    tasks = [EpisodeTask(mission, RANDOM, 3, i) for i in range(6)]
    executor = ProcessExecutor(2, retries=1)
    stopped: list[int] = []

    def freeze_one(index: int, result: EpisodeResult) -> None:
        if not stopped:
            stopped.append(executor.worker_pids()[0])
            os.kill(stopped[0], signal.SIGSTOP)

    try:
        results = executor.run(tasks, on_result=freeze_one)
    finally:
        executor.close()
    assert [r.status for r in results] == [EpisodeStatus.OK] * 6
    runner = EpisodeRunner()
    try:
        expected = [runner.run(t) for t in tasks]
    finally:
        runner.close()
    assert [r.agents for r in results] == [r.agents for r in expected]
    assert wait_until(lambda: gone(stopped[0]), 10), "the frozen worker outlived the run"


def test_a_frozen_episode_worker_that_always_freezes_is_reported() -> None:
    mission = scripted_mission(agents=2, max_steps=400, busy_us=2000)
    executor = ProcessExecutor(1, retries=0)
    frozen: list[int] = []

    def watch() -> None:
        pids = executor.worker_pids()
        if pids and not frozen:
            frozen.append(pids[0])
            os.kill(pids[0], signal.SIGSTOP)

    runner_task = EpisodeTask(mission, RANDOM, 0, 0)
    import threading

    timer = threading.Timer(0.5, watch)
    timer.start()
    try:
        (result,) = executor.run([runner_task])
    finally:
        timer.cancel()
        executor.close()
    assert result.status is EpisodeStatus.FAILED and result.error is not None
    assert "stopped responding (no heartbeat for 1.5 s)" in result.error.message
    assert wait_until(lambda: gone(frozen[0]), 10)


def test_a_frozen_policy_worker_fails_its_episode_and_is_replaced() -> None:
    mission = scripted_mission(agents=2, max_steps=200, busy_us=500)
    stepper = ProcessStepper(1, spin=False)
    frozen: list[int] = []

    def freeze(task: EpisodeTask, step: int) -> None:
        if step == 5 and not frozen:
            frozen.append(stepper.worker_pids()[0])
            os.kill(frozen[0], signal.SIGSTOP)

    runner = EpisodeRunner(stepper, on_step=freeze)
    try:
        first = runner.run(EpisodeTask(mission, RANDOM, 0, 0))
        assert first.status is EpisodeStatus.FAILED and first.error is not None
        assert "policy worker 0 stopped responding" in first.error.message
        second = runner.run(EpisodeTask(mission, RANDOM, 0, 1))
        assert second.status is EpisodeStatus.OK
        assert frozen[0] not in stepper.worker_pids()
    finally:
        runner.close()
    assert wait_until(lambda: gone(frozen[0]), 10)


def test_a_frozen_environment_worker_is_replaced_and_training_goes_on() -> None:
    events: list[str] = []
    mission = load_mission("goal_tasks", {"agents": 2, "task_kind": "direction",
                                          "max_steps": 7})
    with VecEnv(mission, 2, 2, seed=1, on_event=events.append) as vec:
        vec.reset()
        victim = vec.worker_pids()[0]
        os.kill(victim, signal.SIGSTOP)
        vec.step({a: np.zeros(vec.num_envs, dtype=np.int64) for a in vec.agents})
        assert events == ["worker restarted"] and vec.discarded == 2
        assert victim not in vec.worker_pids()
        vec.step({a: np.zeros(vec.num_envs, dtype=np.int64) for a in vec.agents})
    assert wait_until(lambda: gone(victim), 10)
