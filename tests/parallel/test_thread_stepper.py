"""The thread strategy's late calls: the next episode's wait for them, a callback that
raises, an error beside a late call. Real threads, real sleeps and hangs."""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any

import pytest

from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.policies.base import AgentSpec
from parcat.policies.specs import parse_policy_spec
from parcat.stepping.base import PolicyStepError, Seat
from parcat.stepping.thread import ThreadStepper
from tests.fakes import scripted_mission

RELEASE = threading.Event()
"""Ends every hang of this module's policies (set when a test ends)."""
RUNNING: list[tuple[str, int]] = []
"""(what was called, agent) for a reset or close that came while that agent's step ran."""


class HangOrLate:
    """Step 1: agent 0 hangs until :data:`RELEASE`, the others sleep ``late`` seconds."""

    def __init__(self, spec: AgentSpec, late: float = 0.3) -> None:
        self.index, self.late, self.steps = spec.agent_index, float(late), 0

    def reset(self, seed: int) -> None:
        self.steps = 0

    def step(self, obs: Any) -> int:
        self.steps += 1
        if self.steps == 1:
            if self.index == 0:
                RELEASE.wait(60)
            else:
                time.sleep(self.late)
        return 0


class RaiseBesideLate:
    """Step 1: agent 0 raises, agent 1 sleeps past the deadline; a reset or close while
    agent 1's step runs is noted in :data:`RUNNING`."""

    def __init__(self, spec: AgentSpec) -> None:
        self.index, self.steps, self.running = spec.agent_index, 0, False

    def reset(self, seed: int) -> None:
        if self.running:
            RUNNING.append(("reset", self.index))
        self.steps = 0

    def step(self, obs: Any) -> int:
        self.steps += 1
        if self.steps == 1 and self.index == 0:
            raise ValueError("boom")
        if self.steps == 1 and self.index == 1:
            self.running = True
            RELEASE.wait(1.0)
            self.running = False
        return 0

    def close(self) -> None:
        if self.running:
            RUNNING.append(("close", self.index))


class FirstLateThenCloseRaises:
    """The first step of the first instance sleeps 1.5 s (past any deadline here); ``close``
    raises (a client already gone)."""

    slept: list[int] = []

    def __init__(self, spec: AgentSpec) -> None:
        pass

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> int:
        if not self.slept:
            self.slept.append(1)
            RELEASE.wait(1.5)
        return 0

    def close(self) -> None:
        raise RuntimeError("client gone")


@pytest.fixture(autouse=True)
def released() -> Any:
    RELEASE.clear()
    RUNNING.clear()
    FirstLateThenCloseRaises.slept.clear()
    yield
    RELEASE.set()


def seats_of(policy: str, agents: int) -> tuple[Any, list[Seat]]:
    mission = scripted_mission(agents=agents, max_steps=5)
    spec = parse_policy_spec(f"tests.parallel.test_thread_stepper:{policy}")
    return mission, [Seat(agent, spec, 0) for agent in mission.agents()]


def test_the_next_episode_waits_for_all_late_calls_at_most_once() -> None:
    """One hung call and four late ones of the same step: the next episode waits for them
    ``straggler_wait`` (1 s here) in all, not that long for each late call."""
    mission, seats = seats_of("HangOrLate", agents=5)
    stepper = ThreadStepper(5, action_timeout_s=0.1)
    try:
        stepper.start(mission, seats)
        obs = {seat.agent.agent_id: [0.0, 0.0] for seat in seats}
        stepper.act(obs, list(obs))
        assert set(stepper.late_actions().values()) == {1}
        began = time.monotonic()
        stepper.start(mission, seats)
        assert time.monotonic() - began < 3.0  # 5 s when each late call had its own wait
    finally:
        RELEASE.set()
        stepper.close()


def test_a_late_call_beside_an_error_is_not_reset_or_closed_while_it_runs() -> None:
    """The step fails on agent 0 while agent 1's call is late: that call is still waited
    for (or its policy replaced) before the next episode resets, and close never closes
    it mid-step."""
    mission, seats = seats_of("RaiseBesideLate", agents=2)
    stepper = ThreadStepper(2, action_timeout_s=0.05)
    try:
        stepper.start(mission, seats)
        obs = {seat.agent.agent_id: [0.0, 0.0] for seat in seats}
        with pytest.raises(PolicyStepError) as failed:
            stepper.act(obs, list(obs))
        assert failed.value.agent == seats[0].agent.agent_id
        stepper.start(mission, seats)
    finally:
        stepper.close()
    time.sleep(1.2)  # the late step ends; a close held for it runs then
    assert RUNNING == []


def test_a_raising_close_of_a_late_policy_leaves_the_pool_threads_working() -> None:
    """A policy still stepping when the next episode starts is replaced, and closed once
    its step returns, on the pool's thread: that close raising (a warning made an error)
    must not end the thread, or every later call of the run would be late."""
    mission = scripted_mission(agents=1, max_steps=6)
    spec = parse_policy_spec("tests.parallel.test_thread_stepper:FirstLateThenCloseRaises")
    stepper = ThreadStepper(1, action_timeout_s=0.05)
    runner = EpisodeRunner(stepper)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # close_policies' warning raises in the callback
            assert runner.run(EpisodeTask(mission, (spec,), 0, 0)).ok
            stepper.start(mission, [Seat(mission.agents()[0], spec, 0)])  # replaced: 0.5 s
            time.sleep(1.5)  # the old step ends; its close raises on the pool thread
        assert all(thread.is_alive() for thread in stepper._pool._threads)
        result = runner.run(EpisodeTask(mission, (spec,), 0, 1))
        assert result.ok
        assert result.agents[0].late_actions < 6  # 6: no pool thread answers any more
    finally:
        RELEASE.set()
        runner.close()
