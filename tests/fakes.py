"""Shared fakes for the tests: scripted environments and misbehaving policies.

Referenced as ``tests.fakes:Name`` so that worker processes can import them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from parcat.envs.missions import Mission
from parcat.policies.base import AgentSpec


class ScriptedEnv:
    """A tiny deterministic multi-agent env: the reward is the action plus seeded noise.

    Args:
        agents: Number of agents (ids ``0..agents-1``: ints on purpose).
        max_steps: Episode length.
        fail_at: Raise ``RuntimeError`` on this step (``-1``: never).
        busy_us: Burn this many microseconds of CPU per step.
    """

    metadata: dict[str, Any] = {"name": "scripted"}

    def __init__(self, agents: int = 3, max_steps: int = 10, fail_at: int = -1, busy_us: int = 0,
                 tag: Any = None):
        self.possible_agents = list(range(agents))
        self.agents: list[int] = []
        self.max_steps = max_steps
        self.fail_at = fail_at
        self.busy_us = busy_us
        self._obs_space = gymnasium.spaces.Box(-1e9, 1e9, (2,), np.float32)
        self._act_space = gymnasium.spaces.Discrete(3)
        self._rng = np.random.default_rng(0)
        self.t = 0
        self.total = 0.0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        self.total = 0.0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def _obs(self, agent: int) -> np.ndarray:
        return np.array([self.t, agent], dtype=np.float32)

    def step(self, actions: dict[int, Any]) -> Any:
        if self.t == self.fail_at:
            raise RuntimeError(f"scripted failure at step {self.t}")
        if self.busy_us:
            end = time.perf_counter() + self.busy_us * 1e-6
            while time.perf_counter() < end:
                pass
        self.t += 1
        noise = self._rng.random(len(self.agents))
        rewards = {a: float(actions[a]) + float(n) for a, n in zip(self.agents, noise, strict=True)}
        self.total += sum(rewards.values())
        done = self.t >= self.max_steps
        obs = {a: self._obs(a) for a in self.agents}
        terms = dict.fromkeys(self.agents, False)
        truncs = dict.fromkeys(self.agents, done)
        infos: dict[int, dict[str, Any]] = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos

    def observation_space(self, agent: int) -> gymnasium.spaces.Space[Any]:
        return self._obs_space

    def action_space(self, agent: int) -> gymnasium.spaces.Space[Any]:
        return self._act_space

    def episode_stats(self) -> dict[str, float]:
        return {"total": self.total}


class LeakyEnv(ScriptedEnv):
    """Like PettingZoo's KAZ: ``reset(seed)`` keeps a counter from earlier episodes, and
    the rewards depend on it, so a reused environment plays another episode than a fresh
    one with the same seed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.resets = 0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.resets += 1
        return super().reset(seed, options)

    def step(self, actions: dict[int, Any]) -> Any:
        obs, rewards, terms, truncs, infos = super().step(actions)
        return obs, {a: r + self.resets for a, r in rewards.items()}, terms, truncs, infos


class SeedlessEnv(ScriptedEnv):
    """Like an environment that ignores its seed: its noise comes from a generator seeded
    by the operating system, so no two fresh environments play the same episode."""

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        result = super().reset(seed, options)
        self._rng = np.random.default_rng()
        return result


class NaNEnv(ScriptedEnv):
    """Agent 1's rewards become NaN from step 3, and its last observation is NaN."""

    def step(self, actions: dict[int, Any]) -> Any:
        obs, rewards, terms, truncs, infos = super().step(actions)
        if self.t >= 3 and 1 in rewards:
            rewards[1] = float("nan")
        if not self.agents and 1 in obs:
            obs[1] = np.full(2, np.nan, dtype=np.float32)
        return obs, rewards, terms, truncs, infos


def scripted_mission(name: str = "scripted", **params: Any) -> Mission:
    """A mission backed by :class:`ScriptedEnv`."""
    defaults: dict[str, Any] = {"agents": 3, "max_steps": 10, "fail_at": -1, "busy_us": 0}
    defaults.update(params)
    return Mission(name=name, env="tests.fakes:ScriptedEnv", params=defaults,
                   max_steps=defaults["max_steps"])


class StatefulPolicy:
    """Remembers what it saw: the action depends on the whole history since reset."""

    def __init__(self, spec: AgentSpec) -> None:
        self.space = spec.action_space
        self.memory = 0
        self.rng = np.random.default_rng(0)

    def reset(self, seed: int) -> None:
        self.memory = 0
        self.rng = np.random.default_rng(seed)

    def step(self, obs: Any) -> Any:
        self.memory += int(self.rng.integers(1, 4)) + int(np.asarray(obs).sum() * 10)
        if isinstance(self.space, gymnasium.spaces.Discrete):
            return self.memory % int(self.space.n)
        phase = (self.memory % 100) / 50.0 - 1.0
        return np.full(self.space.shape, phase, dtype=self.space.dtype)  # type: ignore[arg-type]


class _MisbehavingPolicy:
    """Plays action 0 for ``at_step`` steps of every episode, then misbehaves on every step."""

    def __init__(self, spec: AgentSpec, at_step: int = 2) -> None:
        self.at_step = at_step
        self.t = 0

    def reset(self, seed: int) -> None:
        self.t = 0

    def step(self, obs: Any) -> int:
        self.t += 1
        if self.t > self.at_step:
            self._misbehave()
        return 0

    def _misbehave(self) -> None:
        raise NotImplementedError


class CrashingPolicy(_MisbehavingPolicy):
    """Raises on a given step of every episode."""

    def _misbehave(self) -> None:
        raise ValueError(f"policy crashed on step {self.t}")


class HangingPolicy(_MisbehavingPolicy):
    """Sleeps far longer than any timeout on a given step; with ``marker`` (a file path),
    creates that file first, so a test can wait until the policy hangs."""

    def __init__(self, spec: AgentSpec, at_step: int = 2, seconds: float = 3600.0,
                 marker: str = "") -> None:
        super().__init__(spec, at_step)
        self.seconds = seconds
        self.marker = marker

    def _misbehave(self) -> None:
        if self.marker:
            Path(self.marker).touch()
        time.sleep(self.seconds)


class StubbornPolicy(_MisbehavingPolicy):
    """On a given step, sleeps for ever and swallows every exception that would end it
    (``SystemExit``, ``KeyboardInterrupt``, parcat's SIGTERM); ``marker`` as for
    :class:`HangingPolicy`."""

    def __init__(self, spec: AgentSpec, at_step: int = 2, marker: str = "") -> None:
        super().__init__(spec, at_step)
        self.marker = marker

    def _misbehave(self) -> None:
        if self.marker:
            Path(self.marker).touch()
        while True:
            with contextlib.suppress(BaseException):  # swallowing everything is the point
                time.sleep(3600.0)


class PrintingPolicy:
    """Plays action 0 and prints a line on every step (as a debugging user's policy does)."""

    def __init__(self, spec: AgentSpec) -> None:
        self.agent = spec.agent_id

    def reset(self, seed: int) -> None:
        print(f"policy of {self.agent} reset")

    def step(self, obs: Any) -> int:
        print(f"policy of {self.agent} stepped")
        return 0


class ExitingPolicy:
    """Plays action 0, then ends its own process on step ``at_step`` of an episode.

    Args:
        how: ``"os_exit"`` (``os._exit(9)``), ``"sys_exit"`` (``sys.exit()``: exit code 0)
            or ``"sigkill"``.
        at_step: The step of the episode on which it happens.
        agent: Only the policy of this agent index misbehaves (-1: every agent's).
        marker: A file path: misbehave only if it does not exist yet (creating it first),
            so a retry succeeds; ``""`` misbehaves every time.
    """

    def __init__(self, spec: AgentSpec, how: str = "os_exit", at_step: int = 2,
                 agent: int = -1, marker: str = "") -> None:
        self.how = how
        self.at_step = at_step
        self.armed = agent in (-1, spec.agent_index)
        self.marker = marker
        self.t = 0

    def reset(self, seed: int) -> None:
        self.t = 0

    def step(self, obs: Any) -> int:
        self.t += 1
        if self.armed and self.t == self.at_step and self._first_time():
            if self.how == "os_exit":
                os._exit(9)
            elif self.how == "sys_exit":
                sys.exit()
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return 0

    def _first_time(self) -> bool:
        if not self.marker:
            return True
        try:
            with open(self.marker, "x") as handle:
                handle.write(str(os.getpid()))
        except FileExistsError:
            return False
        return True


class NoKwargsPolicy:
    """A policy whose constructor takes no agent spec."""

    def __init__(self, action: int = 1) -> None:
        self.action = action

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> int:
        return self.action


class DyingEnv(ScriptedEnv):
    """A ScriptedEnv whose process dies (or hangs) on a given step of given episodes.

    Args:
        how: ``"sigkill"``, ``"exit"`` (``os._exit(3)``), ``"segfault"`` or ``"hang"``.
        at_step: The step on which it happens.
        marker: A file path: die only if it does not exist yet (creating it first), so
            the retry in a fresh worker succeeds; ``""`` dies every time.
        spare_pid: Never die in this process (the test runner, when it steps envs too).
    """

    def __init__(self, how: str = "sigkill", at_step: int = 3, marker: str = "",
                 spare_pid: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.how = how
        self.at_step = at_step
        self.marker = marker
        self.spare_pid = spare_pid

    def step(self, actions: dict[int, Any]) -> Any:
        if self.t == self.at_step and self._should_die():
            self._die()
        return super().step(actions)

    def _should_die(self) -> bool:
        if os.getpid() == self.spare_pid:
            return False  # never kill the test runner itself
        if not self.marker:
            return True
        try:  # created exclusively: of processes reaching the step together, one dies
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return True

    def _die(self) -> None:
        if self.how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.how == "exit":
            os._exit(3)
        elif self.how == "segfault":
            import ctypes

            ctypes.string_at(0)
        elif self.how == "hang":
            time.sleep(3600)
        time.sleep(5)


def dying_mission(name: str = "dying", **params: Any) -> Mission:
    """A mission backed by :class:`DyingEnv`."""
    defaults: dict[str, Any] = {"agents": 2, "max_steps": 10, "how": "sigkill", "at_step": 3,
                                "marker": ""}
    defaults.update(params)
    return Mission(name=name, env="tests.fakes:DyingEnv", params=defaults,
                   max_steps=defaults["max_steps"])


class WhereItRunsPolicy(StatefulPolicy):
    """Like :class:`StatefulPolicy`, but from step ``at_step`` on it plays differently in a
    worker process than in the main process: not a function of its seed and observations."""

    def __init__(self, spec: AgentSpec, at_step: int = 3) -> None:
        super().__init__(spec)
        self.at_step = at_step
        self.t = 0

    def reset(self, seed: int) -> None:
        super().reset(seed)
        self.t = 0

    def step(self, obs: Any) -> Any:
        self.t += 1
        action = super().step(obs)
        if self.t >= self.at_step and multiprocessing.parent_process() is not None:
            self.memory += 1
        return action


def misbehave(how: str) -> None:
    """End, crash, hang or raise the way user code does at set-up.

    ``how``: ``"sys_exit"`` (``sys.exit(0)``), ``"os_exit"`` (``os._exit(6)``),
    ``"segfault"`` (a real one: ``ctypes.string_at(0)``), ``"raise"`` (``ValueError``),
    ``"hang"`` (a busy loop: the heartbeat goes on, only a deadline ends it), ``"none"``.
    """
    if how == "sys_exit":
        sys.exit(0)
    elif how == "os_exit":
        os._exit(6)
    elif how == "segfault":
        import ctypes

        ctypes.string_at(0)
    elif how == "raise":
        raise ValueError(f"refused at set-up ({how})")
    elif how == "hang":
        while True:
            time.sleep(0.01)


class SetupFailingPolicy(StatefulPolicy):
    """A policy whose constructor misbehaves (:func:`misbehave`) for agent ``agent``
    (-1: every agent)."""

    def __init__(self, spec: AgentSpec, how: str = "sys_exit", agent: int = -1) -> None:
        if agent in (-1, spec.agent_index):
            misbehave(how)
        super().__init__(spec)


def setup_failing_env(how: str = "sys_exit", **kwargs: Any) -> ScriptedEnv:
    """An environment factory that misbehaves (:func:`misbehave`) before building."""
    misbehave(how)
    return ScriptedEnv(**kwargs)


class ResetFailingEnv(ScriptedEnv):
    """A ScriptedEnv whose ``reset`` misbehaves (:func:`misbehave`)."""

    def __init__(self, how: str = "sys_exit", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.how = how

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        misbehave(self.how)
        return super().reset(seed, options)


class WaitingPolicy(StatefulPolicy):
    """:class:`StatefulPolicy`'s actions after sleeping ``ms`` milliseconds a step: a policy
    that waits (on a server, an API) rather than computes."""

    def __init__(self, spec: AgentSpec, ms: float = 1.0) -> None:
        super().__init__(spec)
        self.seconds = float(ms) / 1000

    def step(self, obs: Any) -> Any:
        time.sleep(self.seconds)
        return super().step(obs)


class DoomedEnv(ScriptedEnv):
    """A ScriptedEnv whose process dies (:class:`DyingEnv`'s ``how``) on step ``at_step``
    of the episode reset with seed ``doomed_seed``, every time it is played."""

    def __init__(self, doomed_seed: int = -1, how: str = "exit", at_step: int = 3,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.doomed_seed, self.how, self.at_step = doomed_seed, how, at_step
        self.seed: int | None = None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.seed = seed
        return super().reset(seed, options)

    def step(self, actions: dict[int, Any]) -> Any:
        if self.t == self.at_step and self.seed == self.doomed_seed:
            DyingEnv._die(self)  # type: ignore[arg-type]
        return super().step(actions)


class PickyBatchPolicy:
    """Stateless with a ``step_batch`` (so lockstep shares it across episodes): action 1,
    but it raises on the observation of agent ``agent`` at step ``at_step`` (a
    :class:`ScriptedEnv` observation is ``[step, agent]``). ``calls`` keeps every batch's size."""

    stateless = True
    calls: list[int] = []

    def __init__(self, spec: AgentSpec, agent: int = 2, at_step: int = 3) -> None:
        self.agent, self.at_step = agent, at_step

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> int:
        return self.step_batch([obs])[0]

    def step_batch(self, obs_batch: list[Any]) -> list[int]:
        PickyBatchPolicy.calls.append(len(obs_batch))
        for obs in obs_batch:
            if obs[0] == self.at_step and obs[1] == self.agent:
                raise ValueError(f"agent {self.agent} is not served at step {self.at_step}")
        return [1] * len(obs_batch)


class AsyncStatefulPolicy(StatefulPolicy):
    """:class:`StatefulPolicy` with an ``async def step`` that waits a millisecond first:
    its twin, acting the same."""

    async def step(self, obs: Any) -> Any:  # type: ignore[override]
        await asyncio.sleep(0.001)
        return StatefulPolicy.step(self, obs)


class AsyncStatelessPolicy:
    """Acts on the observation alone, through async ``step`` and ``step_batch``."""

    stateless = True

    def __init__(self, spec: AgentSpec) -> None:
        self.n = int(spec.action_space.n)  # type: ignore[attr-defined]

    def reset(self, seed: int) -> None:
        """Nothing to reset."""

    async def step(self, obs: Any) -> int:
        return (await self.step_batch([obs]))[0]

    async def step_batch(self, obs_batch: list[Any]) -> list[int]:
        await asyncio.sleep(0.001)
        return [int(np.asarray(obs).sum()) % self.n for obs in obs_batch]


class AsyncBlockingHangingPolicy(HangingPolicy):
    """:class:`HangingPolicy` with an ``async def step`` whose hang is a blocking sleep: it
    blocks the event loop itself, not only its own call."""

    async def step(self, obs: Any) -> int:  # type: ignore[override]
        return HangingPolicy.step(self, obs)


class MixedSpacesEnv(ScriptedEnv):
    """Agent 0 sees three numbers and has two actions; the others see two and have three
    (as MPE's adversary and good agents): one network per kind of agent."""

    def _obs(self, agent: int) -> np.ndarray:
        return np.array([self.t, agent, 1.0][: 3 if agent == 0 else 2], dtype=np.float32)

    def observation_space(self, agent: int) -> gymnasium.spaces.Space[Any]:
        return gymnasium.spaces.Box(-1e9, 1e9, (3 if agent == 0 else 2,), np.float32)

    def action_space(self, agent: int) -> gymnasium.spaces.Space[Any]:
        return gymnasium.spaces.Discrete(2 if agent == 0 else 3)


class StrayAgentEnv(ScriptedEnv):
    """From step 2, ``agents`` names an agent that is not among ``possible_agents``."""

    def step(self, actions: dict[int, Any]) -> Any:
        result = super().step(actions)
        if self.t == 2 and self.agents:
            self.agents = [*self.agents, 99]
        return result


class FlakyPolicy:
    """A sync policy behind a flaky link: every third call raises ``TransientError`` first
    (counted across instances, as a shared server would be)."""

    calls = 0
    stateless = True

    def __init__(self, spec: AgentSpec) -> None:
        self.space = spec.action_space

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> Any:
        return self.step_batch([obs])[0]

    def step_batch(self, obs_batch: Any) -> list[Any]:
        from parcat import TransientError

        FlakyPolicy.calls += 1
        if FlakyPolicy.calls % 3 == 0:
            raise TransientError("503 from the model server", retry_after=0.0)
        return [int(abs(float(np.asarray(o).sum()))) % int(self.space.n) for o in obs_batch]


class AsyncWaitingPolicy(StatefulPolicy):
    """:class:`StatefulPolicy` behind an ``async def step`` that waits ``ms`` first (a model
    server's answer): its calls mostly wait."""

    def __init__(self, spec: AgentSpec, ms: float = 5.0) -> None:
        super().__init__(spec)
        self.wait_s = ms / 1000

    async def step(self, obs: Any) -> Any:  # type: ignore[override]
        await asyncio.sleep(self.wait_s)
        return StatefulPolicy.step(self, obs)
