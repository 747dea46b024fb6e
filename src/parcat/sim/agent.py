"""One simulated agent: its policy, its cycle schedule and its timing statistics.

The same :class:`AgentRunner` computes an agent's actions in the sequential simulation, in
the environment's process (lockstep agents) and in the agent's own process, so they cannot
disagree on when a policy is reset or how a cycle is counted. Cycle ``m`` of an agent starts
at ``m * cycle_ns`` from the run's start; the next cycle starts at the first boundary after
the computation ended (after its start in simulated time), and the boundaries skipped are
``missed``.
"""

from __future__ import annotations

import math
import time
from dataclasses import astuple, dataclass, field
from typing import Any

from parcat.core import seeding
from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.policies.specs import make_policy
from parcat.sim.config import AgentConfig
from parcat.stepping.calls import blocking


class AgentFailure(Exception):
    """A policy raised; carries the agent and the environment step it was acting on."""

    def __init__(self, agent: AgentConfig, step: int, cause: BaseException) -> None:
        super().__init__(f"{describe_agent(agent)} raised at env step {step}: "
                         f"{type(cause).__name__}: {cause}")
        self.agent = agent
        self.cause = cause


@dataclass
class InForce:
    """The action an agent has in force at an environment step, and where it came from."""

    action: Any
    based_on: int = -1
    """The environment step whose observation it was computed from; -1: the default action."""
    compute_s: float = math.nan


@dataclass
class CycleStats:
    """How often an agent computed an action and how long that took."""

    cycles: int = 0
    first_ns: int = -1
    """Start of the first cycle (ns from the run's start); ``last_ns`` of the last."""
    last_ns: int = -1
    missed: int = 0
    """Cycle boundaries skipped because a computation ran past them."""
    compute_sum_ns: int = 0
    compute_max_ns: int = 0

    def add(self, start_ns: int, compute_ns: int) -> None:
        """Count one cycle that started at ``start_ns`` and computed for ``compute_ns``."""
        if self.cycles == 0:
            self.first_ns = start_ns
        self.cycles += 1
        self.last_ns = start_ns
        self.compute_sum_ns += compute_ns
        self.compute_max_ns = max(self.compute_max_ns, compute_ns)

    def as_fields(self) -> list[int]:
        """The numbers in a fixed order (for shared memory)."""
        return list(astuple(self))

    @classmethod
    def from_fields(cls, values: Any) -> CycleStats:
        """The inverse of :meth:`as_fields`."""
        return cls(*(int(v) for v in values[:6]))

    def to_dict(self, due: int | None = None, cycle_ns: int = 1) -> dict[str, float]:
        """JSON-ready numbers, with the achieved cycle time and mean compute time.

        ``due`` is the cycles the agent's rate should have produced over the run (of
        ``cycle_ns`` each): those it did not complete are missed (also those of an agent
        frozen in a computation, whose own count stopped) and the achieved cycle time is the
        run's time per completed cycle. ``None``: the mean time between its cycles.
        """
        missed = self.missed
        if due is None:
            achieved = ((self.last_ns - self.first_ns) / (self.cycles - 1) / 1e9
                        if self.cycles > 1 else math.nan)
        else:
            missed = max(missed, due - self.cycles)
            achieved = due * cycle_ns / self.cycles / 1e9 if self.cycles and due else math.nan
        mean_compute = self.compute_sum_ns / self.cycles / 1e9 if self.cycles else math.nan
        return {"cycles": self.cycles, "missed_cycles": missed,
                "achieved_cycle_s": achieved, "compute_mean_s": mean_compute,
                "compute_max_s": self.compute_max_ns / 1e9}


@dataclass
class CycleClock:
    """When an agent's next cycle is due (integer ns from the run's start)."""

    cycle_ns: int
    next_ns: int = 0

    def due(self, now_ns: int) -> bool:
        """Whether a cycle boundary has been reached."""
        return now_ns >= self.next_ns

    def advance(self, end_ns: int) -> int:
        """Move to the first boundary after ``end_ns``; return the boundaries skipped."""
        expected = self.next_ns + self.cycle_ns
        self.next_ns = (end_ns // self.cycle_ns + 1) * self.cycle_ns
        return max(0, (self.next_ns - expected) // self.cycle_ns)


@dataclass
class AgentRunner:
    """Builds an agent's policy, resets it per episode with the seed ``run_episode`` would
    give it, and times every action."""

    config: AgentConfig
    mission: Mission
    seed: int
    stats: CycleStats = field(default_factory=CycleStats)
    episode: int = -1

    def __post_init__(self) -> None:
        self.policy = make_policy(self.config.policy, self.mission, self.config.spec)
        self.step = blocking(self.policy.step)  # an async policy's too, one call at a time
        self.clock = CycleClock(self.config.cycle_ns)
        """When its next cycle is due (cycled agents)."""

    def act(self, obs: Any, step: int, episode: int, start_ns: int) -> InForce:
        """Compute an action from the observation of env ``step`` (of ``episode``); a policy
        that raises is an :class:`AgentFailure`."""
        try:
            if episode != self.episode:
                index = self.config.spec.agent_index
                self.policy.reset(seeding.agent_seed(self.seed, self.mission.key, episode, index))
                self.episode = episode
            begin = time.perf_counter_ns()
            action = self.step(obs)
            compute_ns = time.perf_counter_ns() - begin
        except USER_CODE_ERRORS as exc:
            raise AgentFailure(self.config, step, exc) from exc
        self.stats.add(start_ns, compute_ns)
        return InForce(action, step, compute_ns / 1e9)


def describe_agent(config: AgentConfig) -> str:
    """``agent 'evader' (policy greedy)``: how errors name an agent."""
    return f"agent '{config.agent_id}' (policy {config.policy.name})"
