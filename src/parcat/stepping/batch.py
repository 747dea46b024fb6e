"""The ``batch`` strategy: agents sharing a stateless policy act through one call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.policies.specs import PolicySpec
from parcat.stepping.base import InlineStepper, PolicyStepError, Seat
from parcat.stepping.calls import blocking


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
                batch = blocking(self._leader[spec].step_batch)([obs[a] for a in acting])
            except USER_CODE_ERRORS as exc:
                raise PolicyStepError(acting[0], "policy") from exc
            actions.update(zip(acting, batch, strict=True))
        singles = [a for a in self._singles if a in live_set]
        actions.update(super().act(obs, singles))
        return {a: actions[a] for a in live}
