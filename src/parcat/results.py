"""Result types: what one episode produced, and the errors that ended one."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class EpisodeStatus(str, enum.Enum):
    """How an episode ended."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class ErrorInfo:
    """Why an episode failed, with enough to find the culprit."""

    type: str
    """Exception class name, e.g. ``"ValueError"``."""
    message: str
    """The exception's message."""
    traceback: str
    """The formatted traceback from where it was raised (in the worker, if any)."""
    agent: str | None = None
    """The agent whose policy raised, or ``None`` when the environment did."""
    phase: str = "step"
    """``"setup"``, ``"reset"``, ``"policy"`` or ``"step"``."""


@dataclass(frozen=True)
class AgentResult:
    """One agent's share of an episode."""

    agent_id: str
    """The environment's agent id, as a string."""
    policy: str
    """Name of the policy that played it."""
    reward: float
    """Sum of the agent's rewards over the episode."""
    late_actions: int = 0
    """Steps on which the agent's action was late and the default action was used."""


@dataclass(frozen=True)
class EpisodeResult:
    """Everything one episode produced; a pure function of (mission, policies, seed, index)."""

    mission: str
    """Mission name."""
    episode_index: int
    """Index of the episode within its mission."""
    seed: int
    """Seed the environment was reset with."""
    steps: int
    """Environment steps taken."""
    agents: tuple[AgentResult, ...]
    """One entry per agent in ``possible_agents`` order."""
    stats: dict[str, float] = field(default_factory=dict)
    """What the environment reported at the end (``episode_stats()``)."""
    status: EpisodeStatus = EpisodeStatus.OK
    """How the episode ended."""
    error: ErrorInfo | None = None
    """Why it failed, when it did."""
    task: dict[str, Any] | None = None
    """The task the environment was reset to, for task-based missions."""
    duration_s: float = 0.0
    """Wall time of the episode (a timing: excluded when results are compared)."""
    warnings: tuple[str, ...] = ()
    """What looked wrong without failing the episode: a non-finite return, a non-finite
    or out-of-space first or last observation (one line per agent and kind)."""

    @property
    def ok(self) -> bool:
        """Whether the episode finished without error."""
        return self.status is EpisodeStatus.OK

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``episodes[]`` entries of the results schema)."""
        data = asdict(self)
        data["status"] = self.status.value
        data["warnings"] = list(self.warnings)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeResult:
        """Rebuild an episode result from :meth:`to_dict` output."""
        error = data.get("error")
        return cls(
            mission=data["mission"],
            episode_index=int(data["episode_index"]),
            seed=int(data["seed"]),
            steps=int(data["steps"]),
            agents=tuple(AgentResult(**a) for a in data["agents"]),
            stats=dict(data.get("stats") or {}),
            status=EpisodeStatus(data.get("status", "ok")),
            error=ErrorInfo(**error) if error else None,
            task=data.get("task"),
            duration_s=float(data.get("duration_s", 0.0)),
            warnings=tuple(str(w) for w in data.get("warnings") or ()),
        )
