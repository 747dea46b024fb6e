"""Agent-level strategies: who computes the agents' actions within one episode.

A :class:`Stepper` receives the episode's seats (agent, policy spec, seed) at the start of
an episode and then maps observations to actions once per step. ``inline`` calls every
policy in this process; ``thread`` hands some agents to threads (for policies that release
the GIL); ``batch`` calls ``step_batch`` once for all agents that share a stateless policy;
``process`` (in :mod:`parcat.parallel.policy_workers`) hands some agents to persistent
processes through shared memory.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from parcat.missions import Mission
from parcat.policies.base import AgentSpec, Policy
from parcat.policies.builtin import noop_action
from parcat.policies.specs import PolicySpec, make_policy

STRAGGLER_WAIT_S = 5.0
"""How long a new episode waits for a late policy step of the last one."""


@dataclass(frozen=True)
class Seat:
    """One agent of one episode: who plays it and with which seed."""

    agent: AgentSpec
    """The agent (id, index, spaces)."""
    spec: PolicySpec
    """The policy that plays it."""
    seed: int
    """The seed for ``policy.reset``."""


class PolicyStepError(Exception):
    """A policy raised (here or in a worker) while acting for ``agent``."""

    def __init__(self, agent: Any, phase: str, remote: tuple[str, str, str] | None = None):
        super().__init__(agent, phase)
        self.agent = agent
        self.phase = phase
        self.remote = remote
        """(exception type, message, formatted traceback) when raised in a worker."""


class PolicyCache:
    """Policies kept alive between episodes, one per (mission, spec, agent index)."""

    def __init__(self) -> None:
        self._policies: dict[tuple[Mission, PolicySpec, int], Policy] = {}

    def get(self, mission: Mission, seat: Seat) -> Policy:
        """The policy for ``seat``, built on first use."""
        key = (mission, seat.spec, seat.agent.agent_index)
        policy = self._policies.get(key)
        if policy is None:
            policy = self._policies[key] = make_policy(seat.spec, mission, seat.agent)
        return policy

    def reset(self, mission: Mission, seats: Sequence[Seat]) -> dict[Any, Policy]:
        """Policies for ``seats``, each reset with its seed."""
        policies = {}
        for seat in seats:
            policy = self.get(mission, seat)
            try:
                policy.reset(seat.seed)
            except Exception as exc:
                raise PolicyStepError(seat.agent.agent_id, "reset") from exc
            policies[seat.agent.agent_id] = policy
        return policies

    def forget(self, agent_index: int) -> None:
        """Drop the policies of one agent, so the next episode builds new ones."""
        for key in [k for k in self._policies if k[2] == agent_index]:
            del self._policies[key]

    def clear(self) -> None:
        """Forget every policy."""
        self._policies.clear()


class Stepper(ABC):
    """Computes every live agent's action for one step of an episode."""

    name = "stepper"

    @abstractmethod
    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        """Prepare for an episode: build and reset the seats' policies."""

    @abstractmethod
    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        """Actions for the ``live`` agents, keyed like ``obs``."""

    def late_actions(self) -> dict[Any, int]:
        """Per agent, how many steps used the default action because the policy was late."""
        return {}

    def close(self) -> None:  # noqa: B027 - most steppers hold nothing to release
        """Release workers and memory."""


class InlineStepper(Stepper):
    """Every policy runs in this process, one agent after the other."""

    name = "inline"

    def __init__(self) -> None:
        self.cache = PolicyCache()
        self._step_fns: dict[Any, Any] = {}

    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        """Build and reset the policies."""
        policies = self.cache.reset(mission, seats)
        self._step_fns = {agent_id: p.step for agent_id, p in policies.items()}

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        """Call each live agent's policy in turn."""
        step_fns = self._step_fns
        actions = {}
        agent_id = None
        try:
            for agent_id in live:
                actions[agent_id] = step_fns[agent_id](obs[agent_id])
        except Exception as exc:
            raise PolicyStepError(agent_id, "policy") from exc
        return actions

    def close(self) -> None:
        """Forget the policies."""
        self.cache.clear()


class BatchStepper(InlineStepper):
    """Agents that share a stateless policy act through one ``step_batch`` call.

    A policy class opts in with ``stateless = True``: its actions depend only on the
    observation, so one instance can act for all agents with the same spec and the results
    equal per-agent stepping. Other policies are stepped one by one.
    """

    name = "batch"

    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        """Group the seats by shared stateless policy."""
        super().start(mission, seats)
        groups: dict[PolicySpec, list[Any]] = {}
        self._leader: dict[PolicySpec, Any] = {}
        self._singles: list[Any] = []
        for seat in seats:
            policy = self.cache.get(mission, seat)
            batchable = callable(getattr(policy, "step_batch", None))
            if batchable and getattr(policy, "stateless", False):
                groups.setdefault(seat.spec, []).append(seat.agent.agent_id)
                self._leader.setdefault(seat.spec, policy)
            else:
                self._singles.append(seat.agent.agent_id)
        self._groups = groups

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        """One ``step_batch`` per group, then the rest one by one."""
        live_set = set(live)
        actions: dict[Any, Any] = {}
        for spec, members in self._groups.items():
            acting = [a for a in members if a in live_set]
            if not acting:
                continue
            try:
                batch = self._leader[spec].step_batch([obs[a] for a in acting])
            except Exception as exc:
                raise PolicyStepError(acting[0], "policy") from exc
            actions.update(zip(acting, batch, strict=True))
        singles = [a for a in self._singles if a in live_set]
        actions.update(super().act(obs, singles))
        return {a: actions[a] for a in live}


class ThreadStepper(InlineStepper):
    """Some agents' policies run on threads while this thread steps its own share.

    Only pays off for policies that release the GIL (numpy on large arrays, torch).

    Args:
        threads: Worker threads besides the calling one.
        action_timeout_s: A policy later than this gets the default action for the step.
    """

    name = "thread"

    def __init__(self, threads: int, action_timeout_s: float | None = None) -> None:
        super().__init__()
        self.threads = max(1, threads)
        self.timeout = action_timeout_s
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="parcat-policy")
        self._pending: dict[Any, Future[Any]] = {}
        self._late: dict[Any, int] = {}
        self._defaults: dict[Any, Any] = {}
        self._index: dict[Any, int] = {}

    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        """Build and reset the policies; wait for any late step of the last episode."""
        for agent_id, future in self._pending.items():
            try:
                future.exception(timeout=STRAGGLER_WAIT_S)
            except FutureTimeout:
                # still running: that policy cannot be reset under it, so build a new one
                self.cache.forget(self._index[agent_id])
        self._pending = {}
        super().start(mission, seats)
        self._late = {s.agent.agent_id: 0 for s in seats}
        self._index = {s.agent.agent_id: s.agent.agent_index for s in seats}
        self._defaults = {s.agent.agent_id: noop_action(s.agent.action_space) for s in seats}
        share = len(seats) // (self.threads + 1)
        self._local = {s.agent.agent_id for s in seats[:share]}

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        """Dispatch the threads' agents, step the local ones, then collect."""
        deadline = None if self.timeout is None else time.perf_counter() + self.timeout
        futures: dict[Any, Future[Any]] = {}
        for agent_id in live:
            if agent_id in self._local:
                continue
            busy = self._pending.get(agent_id)
            if busy is not None and not busy.done():
                continue  # still on an earlier step: this one gets the default action
            futures[agent_id] = self._pool.submit(self._step_fns[agent_id], obs[agent_id])
        actions = super().act(obs, [a for a in live if a in self._local])
        for agent_id in live:
            if agent_id in self._local:
                continue
            future = futures.get(agent_id)
            if future is None:
                actions[agent_id] = self._late_default(agent_id)
                continue
            wait = None if deadline is None else max(0.0, deadline - time.perf_counter())
            try:
                actions[agent_id] = future.result(timeout=wait)
            except FutureTimeout:
                self._pending[agent_id] = future
                actions[agent_id] = self._late_default(agent_id)
            except Exception as exc:
                raise PolicyStepError(agent_id, "policy") from exc
        return {a: actions[a] for a in live}

    def _late_default(self, agent_id: Any) -> Any:
        self._late[agent_id] += 1
        return self._defaults[agent_id]

    def late_actions(self) -> dict[Any, int]:
        """Late steps per agent in this episode."""
        return dict(self._late)

    def close(self) -> None:
        """Stop the threads (a hung policy thread is abandoned, not joined)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        super().close()
