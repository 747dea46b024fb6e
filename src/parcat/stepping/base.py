"""Agent-level strategies: who computes the agents' actions within one episode.

A :class:`Stepper` gets the episode's seats (agent, policy spec, seed) at its start, then
maps observations to actions once per step: ``inline`` here, ``thread``, ``batch`` and
``process`` in the modules of those names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.ipc.process import ACTING, ErrorReport, acting_marker
from parcat.policies.base import AgentSpec, Policy
from parcat.policies.specs import PolicySpec, make_policy
from parcat.stepping.calls import AsyncAgents

STRAGGLER_WAIT_S = 5.0  # how long a new episode waits for a late policy step of the last one


def straggler_wait(action_timeout_s: float | None) -> float:
    """How long to wait for a late step: :data:`STRAGGLER_WAIT_S`, or, with a deadline,
    ten deadlines (at least half a second): a step that late is taken as hung."""
    if action_timeout_s is None:
        return STRAGGLER_WAIT_S
    return min(STRAGGLER_WAIT_S, max(0.5, 10 * action_timeout_s))


@dataclass(frozen=True)
class Seat:
    """One agent of one episode: who plays it and with which seed."""

    agent: AgentSpec
    spec: PolicySpec
    seed: int
    """The seed for ``policy.reset``."""


class PolicyStepError(Exception):
    """A policy raised (here or in a worker) while acting for ``agent``."""

    def __init__(self, agent: Any, phase: str, remote: ErrorReport | None = None):
        super().__init__(agent, phase)
        self.agent = agent
        self.phase = phase
        self.remote = remote
        """The worker's report (type, message, traceback) when raised in a worker."""


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

    def reset(self, mission: Mission, seats: Sequence[Seat],
              marker: Any = None) -> dict[Any, Policy]:
        """Policies for ``seats``, each reset with its seed; ``marker`` (a worker's
        :func:`~parcat.ipc.process.acting_marker`) names the agent being built or reset."""
        policies = {}
        for seat in seats:
            if marker is not None:
                marker[ACTING] = seat.agent.agent_index + 1
            policy = self.get(mission, seat)
            try:
                policy.reset(seat.seed)
            except USER_CODE_ERRORS as exc:
                raise PolicyStepError(seat.agent.agent_id, "reset") from exc
            policies[seat.agent.agent_id] = policy
        if marker is not None:
            marker[ACTING] = 0
        return policies

    def forget(self, agent_index: int) -> None:
        """Drop the policies of one agent, so the next episode builds new ones."""
        for key in [k for k in self._policies if k[2] == agent_index]:
            del self._policies[key]

    def clear(self) -> None:
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

    def call_retries(self) -> dict[Any, int]:
        """Per agent, how many policy calls were retried after a transient error."""
        return {}

    def close(self) -> None:  # noqa: B027 - most steppers hold nothing to release
        """Release workers and memory."""


class InlineStepper(Stepper):
    """Every policy runs in this process, one agent after the other."""

    name = "inline"

    def __init__(self, action_timeout_s: float | None = None, retries: int = 0) -> None:
        self.cache = PolicyCache()
        self.awaited = AsyncAgents(action_timeout_s, retries)  # policies with async step
        self._step_fns: dict[Any, Any] = {}
        # in a worker process, which agent's code runs now (for a death's report)
        self._marker = acting_marker()
        self._marks: dict[Any, int] = {}

    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        self._marks = {s.agent.agent_id: s.agent.agent_index + 1 for s in seats}
        policies = self.cache.reset(mission, seats, self._marker)
        self._step_fns = {agent_id: p.step for agent_id, p in policies.items()}
        self.awaited.start(policies, {s.agent.agent_id: s.agent.action_space for s in seats})

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        step_fns, marker, marks = self._step_fns, self._marker, self._marks
        awaited = bool(self.awaited.steps)  # their calls all go out at once, first
        actions = self.awaited.act(obs, live, PolicyStepError) if awaited else {}
        agent_id = None
        try:
            for agent_id in live:
                if agent_id in actions:
                    continue
                if marker is not None:
                    marker[ACTING] = marks[agent_id]
                actions[agent_id] = step_fns[agent_id](obs[agent_id])
        except USER_CODE_ERRORS as exc:
            raise PolicyStepError(agent_id, "policy") from exc
        if marker is not None:
            marker[ACTING] = 0
        return {a: actions[a] for a in live} if awaited else actions

    def late_actions(self) -> dict[Any, int]:
        return dict(self.awaited.late)

    def call_retries(self) -> dict[Any, int]:
        return dict(self.awaited.retried)

    def close(self) -> None:
        self.cache.clear()
