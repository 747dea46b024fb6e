"""The flags of ``parcat eval`` and ``parcat plan`` as one value: ``EvalArgs(("harvest",),
options=RunOptions(jobs=4)).build()`` gives the ``EvalConfig`` and ``RunOptions`` that
``parcat eval -m harvest --jobs 4`` runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from parcat.core.limits import require_int
from parcat.core.settings import parse_overrides
from parcat.envs.missions import Mission
from parcat.eval.evaluate import EvalConfig, check_policies
from parcat.eval.trained_run import load_missions
from parcat.parallel.planner import ExecutorKind
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec


@dataclass(frozen=True)
class EvalArgs:
    """Everything ``parcat eval`` and ``parcat plan`` are told."""

    missions: Sequence[str]
    """Mission names, ``gymnasium:ENV_ID`` or YAML paths (``-m``); empty: the missions of
    the run directories among ``policies``."""
    policies: Sequence[str] = ()
    """Policy specs ``NAME[,KEY=VALUE...][@WEIGHT]`` (``-p``); empty: ``greedy``, or
    ``random`` when a mission has no heuristic (with a note)."""
    episodes: int = 10
    seed: int = 0
    overrides: Sequence[str] = ()
    """Mission parameters ``KEY=VALUE`` (``--set``)."""
    options: RunOptions = field(default_factory=RunOptions)
    trace: Path | None = None
    """Where the caller writes the run's timeline; recorded only when set (``--trace``)."""
    trust_code: bool = False
    """Let a run directory's manifest name code from outside parcat (``--trust-code``)."""

    def build(self, on_note: Callable[[str], None] | None = None
              ) -> tuple[EvalConfig, RunOptions]:
        """Validate the words and build what runs, before anything runs (a run directory
        given with ``-p`` brings its mission and parameters: :func:`load_missions`).

        Args:
            on_note: Told which checkpoint a run directory loads and which default policy
                was chosen.

        Raises:
            ConfigError: a bad value, or a Ray executor without Ray installed.
            MissionError, PolicyError: an unknown or malformed mission or policy.
        """
        require_int("--episodes", self.episodes)
        options = self.options
        if options.executor is ExecutorKind.RAY:
            from parcat.parallel.ray_executor import import_ray

            import_ray()
        if self.trace is not None:
            options = replace(options, trace=True)
        notes: list[str] = []  # told once everything is valid: an error stays one line
        targets = [parse_policy_spec(p).target for p in self.policies]
        missions = load_missions(self.missions, targets, parse_overrides(self.overrides),
                                 notes.append, self.trust_code)
        policies = tuple(self.policies) or default_policies(missions, notes.append)
        config = EvalConfig(missions, tuple(parse_policy_spec(p, self.trust_code)
                                            for p in policies), self.episodes, self.seed)
        check_policies(config)
        if on_note is not None:
            for note in notes:
                on_note(note)
        return config, options


def default_policies(missions: Sequence[Mission],
                     on_note: Callable[[str], None] | None = None) -> tuple[str, ...]:
    """``greedy``, or ``random`` when some mission has no heuristic (said in one note)."""
    without = [m.name for m in missions if m.heuristic is None]
    if not without:
        return ("greedy",)
    if on_note is not None:
        on_note(f"mission '{without[0]}' has no heuristic: evaluating policy 'random' "
                "(give -p to choose)")
    return ("random",)
