"""When a run writes its checkpoints: every N epochs, at the end, on Ctrl-C or SIGTERM, and
which one is kept as ``RUN/best``.

The checkpoint written on an interrupt holds the *last finished* epoch, so ``--resume``
continues exactly as if the run had stopped there. In sync mode the learners change during
an epoch (transitions observed, exploration drawn), so every finished epoch is captured in
memory (arrays copied) until a later one replaces it. In async mode the acting learners are
refreshed from the learner process first, as for any async checkpoint.

Every write replaces the checkpoint in the run directory in one atomic swap
(:func:`parcat.policies.checkpoint.save_run`): a second Ctrl-C during the final write leaves the
previous checkpoint, never half of one; a full disk leaves it too, and is one line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core.errors import CheckpointError, ParcatError, WriteError
from parcat.envs.missions import Mission, is_foreign
from parcat.ipc.process import SetupFailedError
from parcat.policies import checkpoint
from parcat.train.config import TrainConfig
from parcat.train.greedy_eval import (
    TOTAL,
    LearnerObs,
    evaluate_greedy,
    evaluate_greedy_in_a_worker,
    nan_returns,
)
from parcat.train.learner import Learner
from parcat.train.recipes import LearnerRecipe
from parcat.train.runs import BEST, RunSnapshot, capture, write_snapshot

log = logging.getLogger("parcat.train")


@dataclass
class Checkpointer:
    """Writes one run's checkpoints and keeps its best.

    Args:
        config: The run (``run_path``, ``eval_episodes``, ``seed``).
        mission: What the evaluation episodes run on.
        learners: The acting learners, by agent.
        learner_obs: What an agent's learner observes of the agent's observation
            (a shared learner also sees the agent's one-hot id).
    """

    config: TrainConfig
    mission: Mission
    learners: dict[Any, Learner]
    learner_obs: LearnerObs | None = None
    extra_arrays: Callable[[], dict[str, dict[str, np.ndarray]]] | None = None
    """More files each checkpoint holds, as they are now (the episodes in flight)."""
    recipes: Mapping[str, LearnerRecipe] | None = None
    """What the learners are built from, to evaluate them in a worker process (an
    environment from outside parcat); ``None``: evaluated in this process."""

    def __post_init__(self) -> None:
        self.best_return = best_return(self.config.run_path)
        self.pending: RunSnapshot | None = None
        """The last finished epoch, captured but not written yet (sync mode)."""

    def evaluate(self) -> dict[str, float]:
        """The learners' greedy returns on the run's fixed evaluation episodes; an
        environment from outside parcat plays them in a worker process (``recipes``), and
        its crash there leaves NaN returns and a warning, not a dead trainer."""
        episodes = self.config.eval_episodes
        if self.recipes is None or not is_foreign(self.mission) or episodes <= 0:
            return evaluate_greedy(self.mission, self.learners, self.config.seed, episodes,
                                   self.learner_obs)
        try:
            return evaluate_greedy_in_a_worker(self.mission, self.recipes, self.learners,
                                               self.config.seed, episodes)
        except (SetupFailedError, ParcatError) as exc:
            log.warning("the greedy evaluation's environment %s; eval_return is NaN", exc)
            return nan_returns(episodes, self.learners)

    def finished(self, epoch: int, eval_return: dict[str, float] | None = None) -> None:
        """Capture the learners after ``epoch`` epochs (with their evaluation, if any), to
        be written by :meth:`save` or, after an interrupt, :meth:`save_interrupted`."""
        meta: dict[str, Any] = {}
        if eval_return:
            meta = {"eval_return": eval_return, "eval_episodes": self.config.eval_episodes}
        self.pending = capture(self.config, self.mission, self.learners, epoch,
                               arrays=self._arrays(), **meta)

    def _arrays(self) -> dict[str, dict[str, np.ndarray]]:
        return self.extra_arrays() if self.extra_arrays is not None else {}

    def save(self) -> Path:
        """Write the captured checkpoint; it is also ``best/`` when its total evaluation
        return beats every earlier one (the first evaluated one always does)."""
        assert self.pending is not None, "save() follows finished()"
        eval_return = self.pending.meta.get("eval_return") or {}
        score = eval_return.get(TOTAL, math.nan)
        best = not math.isnan(score) and score > self.best_return
        path = self._write(self.pending, best=best)
        if best:
            self.best_return = score
        self.pending = None
        return path

    def save_interrupted(self, finished_epochs: int, saved_epochs: int,
                         live: bool = False) -> Path | None:
        """After Ctrl-C or SIGTERM: write the last finished epoch if no checkpoint has it
        yet. Returns the run directory, or ``None`` when there was nothing new to write.

        Args:
            finished_epochs: Epochs finished (and logged).
            saved_epochs: Epochs the last checkpoint written holds.
            live: The learners as they are now stand for the last finished epoch (async
                mode, once synced); otherwise only a captured epoch is written.
        """
        if self.pending is not None:
            return self._write(self.pending)
        if live and finished_epochs > saved_epochs:
            snapshot = capture(self.config, self.mission, self.learners, finished_epochs,
                               arrays=self._arrays())
            return self._write(snapshot)
        return None

    def _write(self, snapshot: RunSnapshot, best: bool = False) -> Path:
        """Write ``snapshot``; a failed write (a full disk) leaves the last checkpoint.

        Raises:
            WriteError: naming the run directory, the reason and the epoch kept.
        """
        path = self.config.run_path
        try:
            return write_snapshot(path, snapshot, best=best)
        except OSError as exc:
            raise WriteError(
                f"could not write the checkpoint of epoch {snapshot.epoch} to '{path}' "
                f"({exc.strerror or exc}); the last checkpoint there is intact: free the "
                "space and --resume") from None


def best_return(run: Path) -> float:
    """The total evaluation return of ``run/best`` (``-inf`` when there is none)."""
    try:
        manifest = checkpoint.read_manifest(run / BEST)
    except CheckpointError:
        return -math.inf
    value = manifest.get("eval_return", {}).get(TOTAL) if isinstance(
        manifest.get("eval_return"), dict) else None
    return float(value) if isinstance(value, (int, float)) else -math.inf
