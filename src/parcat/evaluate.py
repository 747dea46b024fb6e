"""The eval job: missions × episodes → tasks → executor → report."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from parcat.errors import ConfigError, PolicyError
from parcat.missions import Mission, load_mission
from parcat.policies.base import AgentSpec
from parcat.policies.specs import PolicySpec, make_policy, parse_policy_spec
from parcat.report import make_document
from parcat.results import EpisodeResult
from parcat.rollout import EpisodeRunner, EpisodeTask

ResultCallback = Callable[[EpisodeResult], None]


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate; built by the CLI or by user code."""

    missions: tuple[Mission, ...]
    """Missions to play, in order; names must be unique."""
    policies: tuple[PolicySpec, ...]
    """Policy specs assigned to agents by weight."""
    episodes: int = 10
    """Episodes per mission."""
    seed: int = 0
    """Base seed: every episode's seeds derive from it."""

    def __post_init__(self) -> None:
        if not self.missions:
            raise ConfigError("at least one mission is needed (-m NAME)")
        names = [m.name for m in self.missions]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"mission '{duplicates[0]}' is given more than once")
        if not self.policies:
            raise ConfigError("at least one policy is needed (-p NAME)")
        policy_names = [p.name for p in self.policies]
        dup_policies = sorted({n for n in policy_names if policy_names.count(n) > 1})
        if dup_policies:
            raise ConfigError(f"policy '{dup_policies[0]}' is given more than once")
        if not isinstance(self.episodes, int) or self.episodes < 1:
            raise ConfigError(f"--episodes must be an integer >= 1, got {self.episodes!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"--seed must be an integer >= 0, got {self.seed!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready ``config`` section of the results document."""
        return {
            "missions": [
                {"name": m.name, "env": m.env, "params": dict(m.params), "max_steps": m.max_steps}
                for m in self.missions
            ],
            "policies": [
                {"name": p.name, "target": p.target, "kwargs": dict(p.kwargs), "weight": p.weight}
                for p in self.policies
            ],
            "episodes": self.episodes,
            "seed": self.seed,
        }


@dataclass
class EvalReport:
    """The outcome of an eval run, in task order."""

    config: EvalConfig
    """What was asked for."""
    episodes: list[EpisodeResult] = field(default_factory=list)
    """One result per task, in task order."""
    status: str = "complete"
    """``complete``, ``failed`` (some episode failed) or ``interrupted``."""
    started: str = ""
    """ISO-8601 start time."""
    elapsed_s: float = 0.0
    """Wall time of the run."""

    @property
    def failed(self) -> list[EpisodeResult]:
        """Episodes that did not finish cleanly."""
        return [e for e in self.episodes if not e.ok]

    def to_document(self) -> dict[str, Any]:
        """The JSON results document."""
        timing = {"started": self.started, "elapsed_s": self.elapsed_s}
        return make_document(self.config.to_dict(), self.episodes, self.status, timing)


def make_config(
    missions: Sequence[str],
    policies: Sequence[str],
    episodes: int = 10,
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
) -> EvalConfig:
    """Build and validate an :class:`EvalConfig` from names and specs, as the CLI does."""
    loaded = tuple(load_mission(m, overrides) for m in missions)
    specs = tuple(parse_policy_spec(p) for p in policies)
    config = EvalConfig(loaded, specs, episodes, seed)
    check_policies(config)
    return config


def check_policies(config: EvalConfig) -> None:
    """Build every policy once for every agent of every mission, before any episode runs.

    Raises:
        PolicyError: a spec is unknown, or a policy cannot be built for some agent.
    """
    for mission in config.missions:
        env = mission.make_env()
        try:
            for index, agent_id in enumerate(env.possible_agents):
                agent = AgentSpec(
                    mission.name,
                    agent_id,
                    index,
                    env.observation_space(agent_id),
                    env.action_space(agent_id),
                    dict(mission.params),
                )
                for spec in config.policies:
                    try:
                        make_policy(spec, mission, agent)
                    except PolicyError as exc:
                        raise PolicyError(f"{exc} (mission '{mission.name}')") from exc
        finally:
            close = getattr(env, "close", None)
            if close is not None:
                close()


def make_tasks(config: EvalConfig) -> list[EpisodeTask]:
    """Missions × episodes as one flat list, mission-major."""
    return [
        EpisodeTask(mission, config.policies, config.seed, index)
        for mission in config.missions
        for index in range(config.episodes)
    ]


def evaluate(config: EvalConfig, on_result: ResultCallback | None = None) -> EvalReport:
    """Run every episode of ``config`` in this process and collect the report.

    Args:
        config: What to evaluate.
        on_result: Called with each episode's result as it finishes (progress bars).
    """
    report = EvalReport(config, started=datetime.now(timezone.utc).isoformat())
    start = time.perf_counter()
    runner = EpisodeRunner()
    try:
        for task in make_tasks(config):
            result = runner.run(task)
            report.episodes.append(result)
            if on_result is not None:
                on_result(result)
    except KeyboardInterrupt:
        report.status = "interrupted"
    finally:
        runner.close()
        report.elapsed_s = time.perf_counter() - start
    if report.status != "interrupted" and report.failed:
        report.status = "failed"
    return report
