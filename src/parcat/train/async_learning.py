"""Async learning (``--mode async``): a learner process trains while collection goes on.

The trainer keeps *acting* copies of the learners and sends each round's transitions to a
learner process, which trains its own copies (rebuilt from their recipes); the new greedy
weights come back whole and are swapped into the acting copies between two steps. A
counter in shared memory that collection bumps every step, read by the learner process as
a round starts and ends, shows that collection went on while it trained.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from parcat.core.errors import WorkerError
from parcat.ipc.process import (
    Handlers,
    WorkerLostError,
    WorkerRaisedError,
    WorkerState,
    get_context,
    hold_sigterm,
    start_worker,
)
from parcat.train.learner import Learner, Transitions, train_each
from parcat.train.recipes import LearnerRecipe, class_reference

HOLD_S = 90.0
"""How long the learner process outlives a SIGTERM while the trainer lives: longer than the
trainer's wait for its state (``LEARNER_SYNC_S``), so the final checkpoint has it."""


@dataclass
class Round:
    """What one training round in the learner process did (``collected_*``: collection
    steps taken when it started and ended)."""

    epoch: int
    weights: dict[str, dict[str, np.ndarray]]
    metrics: dict[str, dict[str, float]]
    train_s: float
    collected_before: int
    collected_after: int


class AsyncLearning:
    """Feeds a learner process (rebuilding the learners from their ``recipes``) and swaps
    its weights into the acting ``learners``; ``on_event`` gets ``(train_start |
    train_end, epoch)``; ``parallel`` trains on ``threads`` at once (0: one per learner)."""

    def __init__(self, learners: dict[str, Learner], recipes: dict[str, LearnerRecipe],
                 gradient_steps: int, on_event: Callable[[str, int], None], parallel: bool = False,
                 threads: int = 0, start_method: str | None = None) -> None:
        self.learners, self.on_event = learners, on_event
        ctx = get_context(start_method)
        self.counter: Any = ctx.Value("q", 0, lock=False)
        payload = {name: (recipes[name], lr.state_dict()) for name, lr in learners.items()}
        classes = sorted({class_reference(recipes[name].cls) for name in learners})
        self.label = f"the learner process (training {', '.join(classes)})"
        self.worker = start_worker(
            make_learner_worker, (payload, gradient_steps, self.counter,
                                  (threads or len(payload)) if parallel else 0),
            "parcat-learner", ctx=ctx)
        self.busy = False
        self.pending: dict[str, list[Transitions]] = {name: [] for name in learners}
        self.metrics: dict[str, dict[str, float]] = {n: {"loss": math.nan} for n in learners}
        self.train_s = 0.0
        self.overlap_steps: list[int] = []

    def record(self, name: str, batch: Transitions) -> None:
        """Keep transitions for the next round; the acting learner's schedule moves on."""
        self.pending[name].append(batch)
        self.learners[name].num_observed += len(batch[0])

    def step_done(self) -> None:
        """Count a collection step; take new weights if a round has just finished."""
        self.counter.value += 1
        if self.worker.state is WorkerState.STARTING and self.worker.poll():
            self._recv(setup=True)  # the set-up's reply: no wait
        if self.busy and self.worker.poll():
            self.wait()

    def submit(self, epoch: int) -> float:
        """Start a round on the transitions so far; return how long collection waited."""
        waited = self.wait()
        batches = {name: _concat(parts) for name, parts in self.pending.items() if parts}
        self.pending = {name: [] for name in self.learners}
        self._send(("train", epoch, batches))
        self.busy = True
        self.on_event("train_start", epoch)
        return waited

    def wait(self) -> float:
        """Wait for the running round (if any) and apply it; return the time waited."""
        if not self.busy:
            return 0.0
        begin = time.perf_counter()
        result = self._recv()
        self.busy = False
        self._apply(result)
        return time.perf_counter() - begin

    def sync_states(self, timeout_s: float | None = None) -> None:
        """Make the acting learners full copies of the trained ones (for a checkpoint),
        after applying a round an interrupt left unread; with ``timeout_s``,
        :class:`WorkerError` when the learner process has not answered by then."""
        self._send(("state",))
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while isinstance(reply := self._recv(end), Round):
            self.busy = False
            self._apply(reply)
        for name, state in reply.items():
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

    def _send(self, message: Any) -> None:
        try:
            self.worker.send(message)
        except WorkerLostError as exc:
            raise WorkerError(f"{self.label} {self.worker.describe()}") from exc

    def _recv(self, end: float | None = None, setup: bool = False) -> Any:
        # a round takes as long as training does: no deadline unless ``end`` (monotonic)
        # is given, but a death or a freeze is seen at once
        while True:
            wait_s = 3600.0 if end is None else end - time.monotonic()
            if wait_s <= 0:
                raise WorkerError(f"{self.label} did not answer in time ({self.worker.name})")
            try:
                return (self.worker.wait_ready if setup else self.worker.reply)(wait_s)
            except WorkerRaisedError as exc:
                raise WorkerError(f"{self.label} raised {exc.report.summary}") from None
            except WorkerLostError as exc:
                if self.worker.alive and not self.worker.frozen():
                    continue
                raise WorkerError(f"{self.label} {self.worker.describe()}") from exc

    def close(self) -> None:
        """Stop the learner process."""
        self.worker.stop()


def _concat(parts: list[Transitions]) -> Transitions:
    columns: Any = [None if any(c is None for c in column) else np.concatenate(column)
                    for column in zip(*parts, strict=True)]
    return Transitions(*columns)


def make_learner_worker(payload: dict[str, Any], gradient_steps: int, counter: Any,
                        threads: int = 0) -> Handlers:
    """Rebuild the learners; serve ``train(epoch, batches)`` and ``state`` commands.

    A SIGTERM to the whole process group is held while the trainer lives (up to
    :data:`HOLD_S`): the trainer asks for the trained state for its final checkpoint."""
    hold_sigterm(HOLD_S)
    pool = ThreadPoolExecutor(threads) if threads > 1 and len(payload) > 1 else None
    learners: dict[str, Learner] = {}
    for name, (recipe, saved) in payload.items():
        learners[name] = recipe.build()
        learners[name].load_state_dict(saved)

    def train(epoch: int, batches: dict[str, Transitions]) -> Round:
        before, start = int(counter.value), time.perf_counter()

        def add_new(name: str, learner: Learner) -> None:
            batch = batches.get(name)
            if batch is not None and len(batch[0]):
                learner.observe(batch)

        metrics = train_each(learners, gradient_steps, pool, add_new)
        return Round(epoch, {n: lr.policy_arrays() for n, lr in learners.items()}, metrics,
                     time.perf_counter() - start, before, int(counter.value))

    def state() -> dict[str, dict[str, np.ndarray]]:
        return {n: lr.state_dict() for n, lr in learners.items()}

    def close() -> None:
        if pool is not None:
            pool.shutdown(wait=False)

    return Handlers({"train": train, "state": state}, close=close)
