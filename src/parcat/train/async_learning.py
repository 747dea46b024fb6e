"""The trainer's side of async learning: transitions out, weights back, between steps."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from parcat.train.learner import Learner, Transitions
from parcat.train.learner_process import LearnerWorker, Round
from parcat.train.recipes import LearnerRecipe


class AsyncLearning:
    """Feeds a :class:`LearnerWorker` and swaps its weights into the acting learners.

    Args:
        learners: The acting learners by name (one per agent, or ``shared``).
        recipes: What each was built from (the learner process rebuilds from them).
        train_steps: Gradient updates per learner per round.
        on_event: Called with ``("train_start" | "train_end", epoch)``.
        parallel: Train the learners at once in the learner process.
        threads: Threads for that (0: one per learner).
    """

    def __init__(self, learners: dict[str, Learner], recipes: dict[str, LearnerRecipe],
                 train_steps: int, on_event: Callable[[str, int], None], parallel: bool = False,
                 threads: int = 0) -> None:
        self.learners = learners
        self.process = LearnerWorker(learners, recipes, train_steps, parallel=parallel,
                                     threads=threads)
        self.on_event = on_event
        self.pending: dict[str, list[Transitions]] = {name: [] for name in learners}
        self.metrics: dict[str, dict[str, float]] = {name: {"loss": math.nan}
                                                     for name in learners}
        self.train_s = 0.0
        self.overlap_steps: list[int] = []

    def record(self, name: str, batch: Transitions) -> None:
        """Keep transitions for the next round; the acting learner's schedule moves on."""
        self.pending[name].append(batch)
        self.learners[name].num_observed += len(batch[0])

    def step_done(self) -> None:
        """Count a collection step; take new weights if a round has just finished."""
        self.process.collected()
        if self.process.round_done():
            self._apply(self.process.result())

    def submit(self, epoch: int) -> float:
        """Start a round on the transitions so far; return how long collection waited."""
        waited = self.wait()
        batches = {name: _concat(parts) for name, parts in self.pending.items() if parts}
        self.pending = {name: [] for name in self.learners}
        self.process.submit(epoch, batches)
        self.on_event("train_start", epoch)
        return waited

    def wait(self) -> float:
        """Wait for the running round (if any) and apply it; return the time waited."""
        if not self.process.busy:
            return 0.0
        begin = time.perf_counter()
        self._apply(self.process.result())
        return time.perf_counter() - begin

    def sync_states(self, timeout_s: float | None = None) -> None:
        """Make the acting learners full copies of the trained ones (for a checkpoint),
        after applying the running round; with ``timeout_s``, raise
        :class:`~parcat.core.errors.WorkerError` when the learner process has not answered
        by then."""
        for name, state in self.process.states(self._apply, timeout_s).items():
            self.learners[name].load_state_dict(state)

    def take_overlaps(self) -> list[int]:
        """Collection steps taken during each round applied since the last call."""
        overlaps, self.overlap_steps = self.overlap_steps, []
        return overlaps

    def _apply(self, result: Round) -> None:
        for name, weights in result.weights.items():
            self.learners[name].load_policy_arrays(weights)
        self.metrics, self.train_s = result.metrics, result.train_s
        self.overlap_steps.append(result.collected_after - result.collected_before)
        self.on_event("train_end", result.epoch)

    def close(self) -> None:
        """Stop the learner process."""
        self.process.close()


def _concat(parts: list[Transitions]) -> Transitions:
    columns: Any = [None if any(c is None for c in column) else np.concatenate(column)
                    for column in zip(*parts, strict=True)]
    return Transitions(*columns)
