"""``parcat eval -p RUN``: a run directory knows the mission it was trained on.

Its manifest's ``mission_params`` are the layer below ``--set``; without ``-m`` the run's own
mission is evaluated. Parameters that change an agent's spaces against the run are one error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError, clip
from parcat.core.imports import require_trusted
from parcat.core.settings import merge_settings
from parcat.envs.missions import Mission, builtin_code, load_mission
from parcat.policies import checkpoint


@dataclass(frozen=True)
class RunCheckpoint:
    """What a run directory's manifest says about what it was trained on."""

    path: Path
    mission: str
    """What ``load_mission`` takes: the training config's ``mission`` (a name or path)."""
    name: str
    params: Mapping[str, Any]
    spaces: Mapping[str, tuple[str, str]]
    """Each agent's observation and action space, as text."""
    epoch: int
    eval_total: float | None
    agent_dir: bool = False
    """``path`` is one agent's folder in the run (its policy, played by every agent)."""
    side_epochs: Mapping[str, int] = field(default_factory=dict)
    """``best/``'s sides (one best per side): the epoch each side's agents come from."""

    def describe(self) -> str:
        """One line: which checkpoint of the run this is."""
        score = ("" if self.eval_total is None
                 else f", evaluation return {self.eval_total:.3f} summed over its agents")
        if self.agent_dir:
            return (f"-p {self.path}: one agent's policy of run {self.path.parent} "
                    f"(epoch {self.epoch}{score}), on the run's mission parameters")
        if self.path.name == checkpoint.BEST and self.side_epochs:
            epochs = ", ".join(f"{side} of epoch {epoch}"
                               for side, epoch in self.side_epochs.items())
            return f"-p {self.path}: the best checkpoint of each side ({epochs})"
        if self.path.name == checkpoint.BEST:
            return f"-p {self.path}: the best checkpoint (epoch {self.epoch}{score})"
        best = self.path / checkpoint.BEST
        other = f"; the best is -p {best}" if (best / checkpoint.MANIFEST).is_file() else ""
        return f"-p {self.path}: the last checkpoint (epoch {self.epoch}{score}){other}"


def read_run(target: str) -> RunCheckpoint | None:
    """The run checkpoint at ``target``, or ``None`` when it is no run directory (the policy
    loader says what it is); ``CheckpointError`` when its manifest or an agent's is damaged."""
    path = Path(target)
    if not path.is_dir():
        return None
    checkpoint.recover_swap(path)
    if not (path / checkpoint.MANIFEST).exists():
        return None
    manifest = checkpoint.read_manifest(path)
    if manifest["format"] != checkpoint.RUN_FORMAT:
        if not (path.parent / checkpoint.MANIFEST).is_file():
            return None
        # one agent's folder in a run: the run's mission and parameters; its policy
        # plays every agent, so there are no per-agent spaces to hold it to
        run = read_run(str(path.parent))
        if run is None:
            return None
        # in a best/ of sides, the agent's own epoch; the total is another epoch's
        return replace(run, path=path, spaces={}, agent_dir=True,
                       epoch=manifest.get("epoch", run.epoch),
                       eval_total=None if run.side_epochs else run.eval_total)
    if "mission" not in manifest:
        return None
    spaces = {}
    for agent, folder in manifest["agents"].items():
        meta = checkpoint.read_manifest(path / folder)
        spaces[str(agent)] = (str(meta.get("observation_space")), str(meta.get("action_space")))
    mission = manifest.get("config", {}).get("mission")
    total = manifest.get("eval_return", {}).get("total")
    return RunCheckpoint(
        path=path, mission=mission or manifest["mission"], name=manifest["mission"],
        params=dict(manifest.get("mission_params", {})), spaces=spaces,
        epoch=manifest.get("epoch", 0),
        eval_total=float(total) if isinstance(total, int | float) else None,
        side_epochs={side: entry.get("epoch") for side, entry in
                     (manifest.get("sides") or {}).items() if side != "total"},
    )


def load_missions(missions: Sequence[str], policy_targets: Sequence[str],
                  overrides: Mapping[str, Any],
                  on_note: Callable[[str], None] | None = None,
                  trust_code: bool = False) -> tuple[Mission, ...]:
    """The missions to evaluate: ``-m`` (or, without it, the runs' own), each with the
    parameters of a run among ``policy_targets`` trained on it below ``overrides``. A mission
    taken from a run's manifest (a file) may use only parcat's own code unless ``trust_code``.

    Raises:
        ConfigError: no mission to evaluate; two runs of one mission with different
            parameters; spaces that differ from a run's.
        MissionError: an unknown mission or bad parameters.
        CheckpointError: a run directory among ``policy_targets`` is damaged.
        UntrustedCodeError: a run's mission names code from outside parcat.
    """
    runs = [run for run in map(read_run, policy_targets) if run is not None]
    for run in runs:
        if on_note is not None:
            on_note(run.describe())
    names = list(missions) or list(dict.fromkeys(run.mission for run in runs))
    if not names:
        raise ConfigError("give a mission with -m NAME, or a run directory with -p RUN "
                          "(its manifest names the mission it was trained on)")
    loaded = []
    for name in names:
        check = None if missions else _code_check(
            next(run for run in runs if run.mission == name), trust_code)
        mission = load_mission(name, overrides, check)
        trained = [run for run in runs if run.name == mission.name]
        if trained:
            _same_params(trained)
            mission = load_mission(name, merge_settings(trained[0].params, overrides), check)
            for run in trained:
                check_spaces(run, mission, overrides)
        loaded.append(mission)
    return tuple(loaded)


def _code_check(run: RunCheckpoint, trust_code: bool) -> Callable[[str], None]:
    envs, heuristics = builtin_code()

    def check(reference: str) -> None:
        require_trusted(reference, envs | heuristics, trust_code,
                        f"run '{run.path}' (trained on mission '{clip(run.mission)}')",
                        "name the mission with -m, or ")
    return check


def _same_params(runs: list[RunCheckpoint]) -> None:
    for run in runs[1:]:
        if dict(run.params) != dict(runs[0].params):
            raise ConfigError(
                f"-p {runs[0].path} and -p {run.path} were trained on mission "
                f"'{run.name}' with different parameters; evaluate them one at a time"
            )


def check_spaces(run: RunCheckpoint, mission: Mission, overrides: Mapping[str, Any]) -> None:
    """Every agent of ``run`` sees the spaces it was trained on in ``mission`` (else
    ``ConfigError`` naming the agent, both spaces and the ``--set`` keys given)."""
    for spec in mission.agents():
        saved = run.spaces.get(str(spec.agent_id))
        if saved is None:
            continue  # the policy loader names the missing agent
        now = (str(spec.observation_space), str(spec.action_space))
        if now != saved:
            kind, index = ("observation", 0) if now[0] != saved[0] else ("action", 1)
            sets = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "none"
            raise ConfigError(
                f"-p {run.path}: agent '{spec.agent_id}' was trained with {kind} space "
                f"{brief_space(saved[index])}, but mission '{mission.name}' now gives "
                f"{brief_space(now[index])} "
                f"(--set: {sets}); drop the --set that changes it"
            )


_BOX_TAIL = re.compile(r"(\([\d, ]*\)), (\w+)\)$")


def brief_space(text: str) -> str:
    """A space's text without a Box's bounds: ``Box((39,), float32)``."""
    match = _BOX_TAIL.search(text) if text.startswith("Box(") else None
    return f"Box({match.group(1)}, {match.group(2)})" if match else clip(text)
