"""The flags of ``parcat eval`` and ``parcat plan`` as one value.

``EvalArgs(("harvest",), options=RunOptions(jobs=4)).build()`` gives what
``parcat eval -m harvest --jobs 4`` runs: the :class:`~parcat.evaluate.EvalConfig` (what,
built from the command line's words) and the :class:`~parcat.parallel.launch.RunOptions`
(where and how).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from parcat.errors import ConfigError, brief
from parcat.evaluate import EvalConfig, make_config
from parcat.limits import MAX_COUNT
from parcat.parallel.launch import RunOptions
from parcat.parallel.planner import ExecutorKind
from parcat.settings import parse_overrides


@dataclass(frozen=True)
class EvalArgs:
    """Everything ``parcat eval`` and ``parcat plan`` are told."""

    missions: Sequence[str]
    """Mission names or YAML paths (``-m``)."""
    policies: Sequence[str] = ("greedy",)
    """Policy specs ``NAME[,KEY=VALUE...][@WEIGHT]`` (``-p``)."""
    episodes: int = 10
    """Episodes per mission (``-n``)."""
    seed: int = 0
    """Base seed; every episode's seeds derive from it (``--seed``)."""
    overrides: Sequence[str] = ()
    """Mission parameters ``KEY=VALUE`` (``--set``)."""
    options: RunOptions = field(default_factory=RunOptions)
    """Where and how to run (``--jobs``, ``--executor``, ``--backend`` and the rest)."""
    trace: Path | None = None
    """Where the caller writes the run's timeline; recorded only when set (``--trace``)."""

    def build(self) -> tuple[EvalConfig, RunOptions]:
        """Validate the words and build what runs, before anything runs.

        Raises:
            ConfigError: a bad value, or a Ray executor without Ray installed.
            MissionError, PolicyError: an unknown or malformed mission or policy.
        """
        require_count("--episodes", self.episodes)
        options = self.options
        if options.executor is ExecutorKind.RAY:
            from parcat.parallel.ray_executor import import_ray

            import_ray()
        if self.trace is not None:
            options = replace(options, trace=True)
        config = make_config(self.missions, self.policies, self.episodes, self.seed,
                             parse_overrides(self.overrides))
        return config, options


def require_count(flag: str, value: Any) -> int:
    """``value`` if it is an integer from 1 to :data:`~parcat.limits.MAX_COUNT`.

    Raises:
        ConfigError: naming ``flag`` and the range.
    """
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_COUNT:
        raise ConfigError(f"{flag} must be an integer between 1 and {MAX_COUNT:,}, "
                          f"got {brief(value)}")
    return value
