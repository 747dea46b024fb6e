"""Run directories: checkpoints ``parcat eval -p runs/NAME`` can load, and resuming.

A run directory is a run checkpoint (see :mod:`parcat.policies.checkpoint`): one directory per agent
holding the greedy policy as ``MLPPolicy`` arrays, plus ``state.npz`` with everything the
learner needs to continue bit-identically, and the metrics log, carried along.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from parcat.core import runlock
from parcat.core.errors import CheckpointError
from parcat.policies import checkpoint
from parcat.train.learner import Learner

if TYPE_CHECKING:
    from parcat.envs.missions import Mission
    from parcat.train.config import TrainConfig

METRICS_FILES = ("metrics.jsonl", "metrics.csv")


BEST = checkpoint.BEST


@dataclass(frozen=True)
class RunSnapshot:
    """A run checkpoint held in memory (arrays copied), ready to be written."""

    agents: Mapping[str, checkpoint.PolicyCheckpoint]
    meta: Mapping[str, Any]
    arrays: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    """More ``.npz`` files of the checkpoint (the episodes in flight)."""

    @property
    def epoch(self) -> int:
        """The epochs it holds."""
        return int(self.meta["epoch"])


def write_snapshot(path: Path, snapshot: RunSnapshot, best: bool = False) -> Path:
    """Write ``snapshot`` into the run directory atomically (its metrics log, ``best/`` and
    any other file stay); with ``best``, ``best/`` becomes a copy of it."""
    return checkpoint.save_run(path, snapshot.agents, snapshot.meta,
                               copy_to=BEST if best else "", arrays=snapshot.arrays)


def capture(config: TrainConfig, mission: Mission, learners: dict[Any, Learner],
            epoch: int, arrays: dict[str, dict[str, np.ndarray]] | None = None,
            **meta: Any) -> RunSnapshot:
    """Copy everything a checkpoint after ``epoch`` epochs holds (``arrays``: more files,
    e.g. the episodes in flight; ``meta``: extra manifest keys), so it can be written
    later though the learners go on changing.

    Each agent's policy is the learner's :attr:`~Learner.policy` with its
    :attr:`~Learner.policy_kwargs` (plus ``agent_ids`` for a shared learner, whose network
    also sees the agent's one-hot id) and :meth:`~Learner.policy_arrays`.
    """
    specs = {s.agent_id: s for s in mission.agents()}
    shared_ids = [str(s.agent_id) for s in specs.values()] if config.shared_learner else None
    agents = {}
    for agent, learner in learners.items():
        kwargs = dict(learner.policy_kwargs)
        if shared_ids is not None:
            kwargs["agent_ids"] = shared_ids
        agents[str(agent)] = checkpoint.PolicyCheckpoint(
            policy=learner.policy,
            kwargs=kwargs,
            arrays=_copied(learner.policy_arrays()),
            meta={
                "mission": mission.name, "agent_id": str(agent), "epoch": epoch,
                "observation_space": str(specs[agent].observation_space),
                "action_space": str(specs[agent].action_space),
                "learner": {"class": type(learner).__module__ + ":" + type(learner).__qualname__,
                            **dict(learner.config)},
            },
            state=_copied(learner.state_dict()),
        )
    run_meta = {
        "mission": mission.name, "mission_params": dict(mission.params), "epoch": epoch,
        "seed": config.seed, "shared_learner": config.shared_learner,
        "config": config.to_dict(), **meta,
    }
    return RunSnapshot(agents, run_meta, {name: _copied(data)
                                          for name, data in (arrays or {}).items()})


def _copied(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {key: np.array(value, copy=True) for key, value in arrays.items()}


# settings a resumed run must share with the run it continues (the rest may change)
SAME_ON_RESUME = ("mission", "overrides", "seed", "learner", "shared_learner",
                  "steps_per_epoch", "train_steps", "mode", "train_interval")


def has_checkpoint(path: Path) -> bool:
    """Whether the run directory holds a checkpoint to resume from.

    A directory that does not exist, is empty or holds only a metrics log (a run stopped
    before its first checkpoint) has none.

    Raises:
        CheckpointError: the directory holds other files but no checkpoint, or is no
            directory at all: it is not a parcat run, and resuming must not write into it.
    """
    checkpoint.recover_swap(path)
    if not path.exists():
        return False
    if (path / checkpoint.MANIFEST).exists():
        return True
    if not path.is_dir():
        raise CheckpointError(f"--resume: '{path}' is not a directory; name a run directory")
    if all(_is_metrics_file(entry.name) for entry in path.iterdir()):
        return False
    raise CheckpointError(
        f"--resume: '{path}' holds files but no {checkpoint.MANIFEST}: it is no parcat run, "
        "or a damaged one; give another --run-dir"
    )


def _is_metrics_file(name: str) -> bool:
    # a log, the run's lock, or what a rewrite of a metrics log killed halfway left
    return name in (*METRICS_FILES, "tensorboard", runlock.LOCK_FILE) or (
        name.startswith(".metrics.") and name.endswith(".tmp"))


def restore(path: Path, learners: dict[Any, Learner], config: TrainConfig | None = None) -> int:
    """Load every learner's state from the run directory; return the epoch it reached.

    Every file is checked (sizes, hashes, finite weights) before a learner reads it.

    Raises:
        CheckpointError: no checkpoint there, it is damaged, it belongs to other agents,
            or ``config`` differs from the saved run in a setting that changes the results.
    """
    manifest = checkpoint.read_manifest(path)
    if manifest["format"] != checkpoint.RUN_FORMAT:
        raise CheckpointError(f"--resume: '{path}' is not a run directory")
    if config is not None:
        saved, now = manifest.get("config", {}), config.to_dict()
        changed = [k for k in SAME_ON_RESUME if k in saved and saved[k] != now[k]]
        if changed:
            key = changed[0]
            raise CheckpointError(
                f"--resume: '{path}' was trained with {key}={saved[key]!r}, not {now[key]!r}; "
                "resume with the same settings or use another --run-dir"
            )
    if "epoch" not in manifest:
        raise CheckpointError(f"--resume: '{path}/{checkpoint.MANIFEST}' records no epoch")
    dirs: dict[str, str] = manifest["agents"]
    for agent, learner in learners.items():
        if str(agent) not in dirs:
            raise CheckpointError(f"--resume: '{path}' has no agent '{agent}'")
        agent_dir = path / dirs[str(agent)]
        checkpoint.load_policy(agent_dir, str(agent))  # its checks: the greedy weights too
        state = checkpoint.load_state(agent_dir)
        if not state:
            raise CheckpointError(f"--resume: '{agent_dir}' has no training state")
        # collected data (buffer.*) holds observations, which may be NaN; the rest may not
        checkpoint.check_finite(agent_dir, str(agent), state, checkpoint.STATE, skip=("buffer.",))
        try:
            learner.load_state_dict(state)
        except CheckpointError as exc:
            raise CheckpointError(f"--resume: '{agent_dir / checkpoint.STATE}': {exc}") from exc
    return int(manifest["epoch"])


def init_weights(source: str, learners: dict[Any, Learner]) -> None:
    """Start from trained weights: a run directory (per agent) or one agent's directory.

    Each learner takes the saved policy arrays through
    :meth:`~parcat.train.learner.Learner.load_policy_arrays`.

    Raises:
        CheckpointError: the checkpoint lacks an agent, or its weights do not fit a learner.
    """
    path = Path(source)
    try:
        manifest = checkpoint.read_manifest(path)
    except CheckpointError as exc:
        raise CheckpointError(f"--init-from: {exc}") from exc
    for agent, learner in learners.items():
        if manifest["format"] == checkpoint.RUN_FORMAT:
            dirs = manifest["agents"]
            if str(agent) not in dirs:
                raise CheckpointError(f"--init-from: '{path}' has no agent '{agent}'")
            saved = checkpoint.load_policy(path / dirs[str(agent)], str(agent))
        else:
            saved = checkpoint.load_policy(path)
        try:
            learner.load_policy_arrays({k: np.asarray(v) for k, v in saved.arrays.items()})
        except CheckpointError as exc:
            raise CheckpointError(
                f"--init-from: '{path}' weights do not fit this learner ({exc})") from None
