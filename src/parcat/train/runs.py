"""Run directories: checkpoints ``parcat eval -p runs/NAME`` can load, and resuming.

A run directory is a run checkpoint (see :mod:`parcat.checkpoint`): one directory per agent
holding the greedy policy as ``MLPPolicy`` arrays, plus ``state.npz`` with everything the
learner needs to continue bit-identically, and the metrics log, carried along.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from parcat import checkpoint
from parcat.errors import CheckpointError
from parcat.train.learner import Learner

if TYPE_CHECKING:
    from parcat.missions import Mission
    from parcat.train.config import TrainConfig

POLICY = "parcat.policies.builtin:MLPPolicy"
METRICS_FILES = ("metrics.jsonl", "metrics.csv")
CARRIED = (*METRICS_FILES, "tensorboard")
"""What the run's loggers keep writing to, carried into every new checkpoint."""


def save_checkpoint(config: TrainConfig, mission: Mission, learners: dict[Any, Learner],
                    epoch: int, arrays: dict[str, dict[str, np.ndarray]] | None = None) -> Path:
    """Write the run directory atomically after ``epoch`` epochs (with more ``arrays``
    files, e.g. the episodes in flight: :func:`parcat.checkpoint.save_run`)."""
    specs = {s.agent_id: s for s in mission.agents()}
    agents = {}
    for agent, learner in learners.items():
        learner_any: Any = learner
        agents[str(agent)] = checkpoint.PolicyCheckpoint(
            policy=POLICY,
            kwargs=dict(learner_any.policy_kwargs),
            arrays=learner.policy_arrays(),
            meta={
                "mission": mission.name, "agent_id": str(agent), "epoch": epoch,
                "observation_space": str(specs[agent].observation_space),
                "action_space": str(specs[agent].action_space),
                "learner": {k: v for k, v in vars(learner_any.config).items()},
            },
            state=learner.state_dict(),
        )
    meta = {
        "mission": mission.name, "mission_params": dict(mission.params), "epoch": epoch,
        "seed": config.seed, "shared_learner": config.shared_learner,
        "config": config.to_dict(),
    }
    return checkpoint.save_run(config.run_path, agents, meta, keep=CARRIED, arrays=arrays)


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
    # a metrics log, or what a rewrite of one killed halfway left (parcat.atomic)
    return name in CARRIED or (name.startswith(".metrics.") and name.endswith(".tmp"))


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
        # the replay buffer holds observations, which may be NaN; the rest may not
        checkpoint.check_finite(agent_dir, str(agent), state, checkpoint.STATE, skip=("buffer.",))
        try:
            learner.load_state_dict(state)
        except CheckpointError as exc:
            raise CheckpointError(f"--resume: '{agent_dir / checkpoint.STATE}': {exc}") from exc
    return int(manifest["epoch"])


def init_weights(source: str, learners: dict[Any, Learner]) -> None:
    """Start from trained weights: a run directory (per agent) or one agent's directory."""
    path = Path(source)
    manifest = checkpoint.read_manifest(path)
    for agent, learner in learners.items():
        if manifest["format"] == checkpoint.RUN_FORMAT:
            dirs = manifest["agents"]
            if str(agent) not in dirs:
                raise CheckpointError(f"--init-from: '{path}' has no agent '{agent}'")
            saved = checkpoint.load_policy(path / dirs[str(agent)], str(agent))
        else:
            saved = checkpoint.load_policy(path)
        state = learner.state_dict()
        for key, array in saved.arrays.items():
            for net in ("online", "target"):
                name = f"{net}.{key}"
                if name not in state or state[name].shape != np.shape(array):
                    raise CheckpointError(
                        f"--init-from: '{path}' weights do not fit this learner ({name})"
                    )
                state[name] = np.asarray(array)
        learner.load_state_dict(state)
