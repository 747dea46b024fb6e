"""Policies for the simulator's tests, referenced as ``tests.sim.policies:Name``.

They are imported by agent processes too, so they must stay importable from the
repository root and cheap to construct (the config check builds each one once).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from parcat.policies.base import AgentSpec
from parcat.policies.builtin import noop_action


class SleepyPolicy:
    """The neutral action, after sleeping ``sleep_s`` (a policy slower than its cycle)."""

    def __init__(self, spec: AgentSpec, sleep_s: float = 0.035) -> None:
        self.action = noop_action(spec.action_space)
        self.sleep_s = sleep_s

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> Any:
        time.sleep(self.sleep_s)
        return np.copy(self.action)


class _Countdown:
    """The neutral action for ``after`` calls, then misbehaves."""

    def __init__(self, spec: AgentSpec, after: int = 3) -> None:
        self.action = noop_action(spec.action_space)
        self.after = after
        self.calls = 0

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> Any:
        self.calls += 1
        if self.calls > self.after:
            self.misbehave()
        return np.copy(self.action)

    def misbehave(self) -> None:
        raise NotImplementedError


class RaisingPolicy(_Countdown):
    """Raises ``RuntimeError`` after ``after`` calls."""

    def misbehave(self) -> None:
        raise RuntimeError(f"boom on call {self.calls}")


class ExitingPolicy(_Countdown):
    """Kills its process with ``os._exit(3)`` after ``after`` calls."""

    def misbehave(self) -> None:
        os._exit(3)


class SlowStartPolicy:
    """The neutral action; built in an agent's process, it touches ``marker`` and then takes
    ``delay_s`` to build (the config check builds it first, in a set-up worker: no delay
    there)."""

    def __init__(self, spec: AgentSpec, marker: str = "", delay_s: float = 60.0) -> None:
        self.action = noop_action(spec.action_space)
        checking = multiprocessing.current_process().name == "parcat-policy-setup"
        if multiprocessing.parent_process() is not None and not checking:
            if marker:
                Path(marker).touch()
            time.sleep(delay_s)

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> Any:
        return np.copy(self.action)


class StallingPolicy:
    """The neutral action; after ``after`` steps it touches ``marker`` (if given) and
    freezes for ``stall_s`` seconds, once."""

    def __init__(self, spec: AgentSpec, after: int = 0, stall_s: float = 60.0,
                 marker: str = "") -> None:
        self.action = noop_action(spec.action_space)
        self.after = after
        self.stall_s = stall_s
        self.marker = marker
        self.calls = 0

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> Any:
        self.calls += 1
        if self.calls == self.after + 1:
            if self.marker:
                Path(self.marker).touch()
            time.sleep(self.stall_s)
        return np.copy(self.action)
