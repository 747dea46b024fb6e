"""Result types: what one episode produced, and the errors that ended one."""

from __future__ import annotations

import copy
import enum
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from parcat.core import seeding

if TYPE_CHECKING:
    from parcat.episode.rollout import EpisodeTask


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
    policy: str
    """Name of the policy that played it."""
    reward: float
    """Sum of the agent's rewards over the episode."""
    late_actions: int = 0
    """Steps on which the agent's action was late and the default action was used."""
    retries: int = 0
    """Calls of the agent's policy tried again after a transient error (``--retries``);
    a retry never changes the results."""


@dataclass(frozen=True)
class EpisodeResult:
    """Everything one episode produced; a pure function of (mission, policies, seed, index)."""

    mission: str
    episode_index: int
    seed: int
    """Seed the environment was reset with."""
    steps: int
    agents: tuple[AgentResult, ...]
    """One entry per agent in ``possible_agents`` order."""
    stats: dict[str, float] = field(default_factory=dict)
    """What the environment reported at the end (``episode_stats()``)."""
    status: EpisodeStatus = EpisodeStatus.OK
    error: ErrorInfo | None = None
    task: dict[str, Any] | None = None
    """The task the environment was reset to, for task-based missions."""
    duration_s: float = 0.0
    warnings: tuple[str, ...] = ()
    """What looked wrong without failing the episode: a non-finite return, a non-finite
    or out-of-space first or last observation."""

    @property
    def ok(self) -> bool:
        """Whether the episode finished without error."""
        return self.status is EpisodeStatus.OK

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``episodes[]`` entries of the results schema), written
        field by field: ``dataclasses.asdict`` deep-copies every value, which is slow."""
        error = self.error
        return {
            "mission": self.mission, "episode_index": self.episode_index, "seed": self.seed,
            "steps": self.steps,
            "agents": [{"agent_id": a.agent_id, "policy": a.policy, "reward": a.reward,
                        "late_actions": a.late_actions, "retries": a.retries}
                       for a in self.agents],
            "stats": dict(self.stats),
            "status": self.status.value,
            "error": None if error is None else {
                "type": error.type, "message": error.message, "traceback": error.traceback,
                "agent": error.agent, "phase": error.phase},
            "task": copy.deepcopy(self.task), "duration_s": self.duration_s,
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeResult:
        """Rebuild an episode result from :meth:`to_dict` output (``KeyError``,
        ``TypeError`` or ``ValueError`` for a field missing or of the wrong type)."""
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        error, task = _object(data.get("error"), "error"), _object(data.get("task"), "task")
        stats = _object(data.get("stats") or {}, "stats")
        status = _text(data.get("status", "ok"), "status")
        if status == EpisodeStatus.FAILED.value and not error:
            raise ValueError(f"status '{status[:40]}' without an 'error' saying why")
        agents = tuple(_agent(a) for a in _items(data["agents"], "agents"))
        ids = [a.agent_id for a in agents]
        if len(set(ids)) != len(ids):
            twice = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"agents: agent '{twice[:40]}' appears more than once")
        return cls(
            mission=_text(data["mission"], "mission"),
            episode_index=_integer(data["episode_index"], "episode_index"),
            seed=_integer(data["seed"], "seed"), steps=_integer(data["steps"], "steps"),
            agents=agents,
            stats={_text(k, "stats"): _number(v, f"stats.{k}") for k, v in (stats or {}).items()},
            status=EpisodeStatus(status), error=_error(error) if error else None, task=task,
            duration_s=_number(data.get("duration_s", 0.0), "duration_s"),
            warnings=tuple(_text(w, "warnings") for w in _items(data.get("warnings") or [],
                                                                "warnings")),
        )


def failed_result(task: EpisodeTask, kind: str, message: str,
                  status: EpisodeStatus = EpisodeStatus.FAILED, agent: str | None = None,
                  phase: str = "worker") -> EpisodeResult:
    """The record of ``task``'s episode when it produced nothing (its worker died, it timed
    out or was cancelled)."""
    seed = seeding.episode_seed(task.seed, task.mission.key, task.episode_index)
    return EpisodeResult(task.mission.name, task.episode_index, seed, 0, (), status=status,
                         error=ErrorInfo(kind, message, "", agent, phase))


def timed_out_result(task: EpisodeTask, timeout_s: float, how: str,
                     partial: EpisodeResult | None = None, agent: str | None = None,
                     phase: str = "worker") -> EpisodeResult:
    """The record of ``task``'s episode stopped at its deadline (``how``: e.g. ``worker
    stopped``), keeping what it had got if the executor could save it."""
    message = f"episode exceeded --episode-timeout {timeout_s:g} s; {how}"
    if partial is None:
        return failed_result(task, "EpisodeTimeout", message, EpisodeStatus.TIMEOUT, agent, phase)
    error = ErrorInfo("EpisodeTimeout", f"{message} at step {partial.steps}", "", agent, phase)
    return replace(partial, status=EpisodeStatus.TIMEOUT, error=error)


def _agent(data: Any) -> AgentResult:
    if not isinstance(data, dict):
        raise TypeError(f"agents: expected objects, got {type(data).__name__}")
    return AgentResult(_text(data["agent_id"], "agent_id"), _text(data["policy"], "policy"),
                       _number(data["reward"], "reward"),
                       _integer(data.get("late_actions", 0), "late_actions"),
                       _integer(data.get("retries", 0), "retries"))


def _typed(value: Any, name: str, kind: type | tuple[type, ...], expected: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, kind):  # JSON's true is no integer
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}")
    return value


def _object(value: Any, name: str) -> dict[str, Any] | None:
    return None if value is None else _typed(value, name, dict, "an object")


def _items(value: Any, name: str) -> list[Any] | tuple[Any, ...]:
    return _typed(value, name, (list, tuple), "a list")


def _text(value: Any, name: str) -> str:
    return _typed(value, name, str, "a string")


def _integer(value: Any, name: str) -> int:
    return _typed(value, name, int, "an integer")


def _number(value: Any, name: str) -> float:
    """A float from JSON (NaN and infinity arrive as floats, or as None from nan_to_none)."""
    if value is None:
        return math.nan
    _typed(value, name, (int, float), "a number")
    if isinstance(value, int) and abs(value) > _EXACT_INT:  # parcat writes these as floats
        raise ValueError(f"{name}: an integer of {len(str(abs(value))):,} digits, more than a "
                         "float holds exactly")
    return float(value)


_EXACT_INT = 2**53  # the largest integer every float next to it holds exactly


def _error(data: dict[str, Any]) -> ErrorInfo:
    agent = data.get("agent")
    return ErrorInfo(_text(data["type"], "error.type"), _text(data["message"], "error.message"),
                     _text(data.get("traceback", ""), "error.traceback"),
                     None if agent is None else _text(agent, "error.agent"),
                     _text(data.get("phase", "step"), "error.phase"))
