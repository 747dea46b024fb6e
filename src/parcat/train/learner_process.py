"""Async learning in its own process: collection and training truly run at the same time.

A learning *thread* shares the trainer's interpreter with the collection loop, so on a
Python-bound loop both slow down. Here the trainer keeps *acting* copies of the learners
and sends each round's transitions to a learner process, which adds them to its own
buffers and trains; the new greedy weights come back whole and are swapped into the acting
copies between two steps. A counter in shared memory that collection bumps every step,
read by the learner process when a round starts and ends, shows by event order that
collection went on while the learner trained.
"""

from __future__ import annotations

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
from parcat.train.learner import Learner, Transitions
from parcat.train.recipes import LearnerRecipe, class_reference
from parcat.train.rounds import train_each

HOLD_S = 90.0
"""How long the learner process outlives a SIGTERM while the trainer lives: longer than the
trainer's wait for its state (``LEARNER_SYNC_S``), so the final checkpoint has it."""


@dataclass
class Round:
    """What one training round in the learner process did."""

    epoch: int
    weights: dict[str, dict[str, np.ndarray]]
    metrics: dict[str, dict[str, float]]
    """Each learner's metrics as last reported (``loss`` among them)."""
    train_s: float
    collected_before: int
    """Collection steps taken when the round started."""
    collected_after: int
    """... and when it ended: more means collection went on meanwhile."""


class LearnerWorker:
    """Trains copies of ``learners`` (by name) in another process.

    Each copy is rebuilt there from its recipe (the class pickled by reference, so it must
    be importable), then loaded with the learner's :meth:`~Learner.state_dict`.

    Args:
        learners: The learners to mirror, by name; their state is copied once.
        recipes: What each was built from, by the same names.
        train_steps: Gradient updates per learner per round.
        start_method: ``forkserver`` or ``spawn``.
        parallel: Train the learners on threads at once (``--parallel-training``).
        threads: How many threads (0: one per learner).
    """

    def __init__(self, learners: dict[str, Learner], recipes: dict[str, LearnerRecipe],
                 train_steps: int, start_method: str | None = None, parallel: bool = False,
                 threads: int = 0) -> None:
        ctx = get_context(start_method)
        self.counter: Any = ctx.Value("q", 0, lock=False)
        payload = {name: (recipes[name], lr.state_dict()) for name, lr in learners.items()}
        pool_size = (threads or len(payload)) if parallel else 0
        classes = sorted({class_reference(recipes[name].cls) for name in learners})
        self.label = f"the learner process (training {', '.join(classes)})"
        """How errors name it: the learner classes it trains run their code there."""
        self.worker = start_worker(make_learner_worker,
                                   (payload, train_steps, self.counter, pool_size),
                                   "parcat-learner", ctx=ctx)
        self.busy = False

    def collected(self) -> None:
        """Count one collection step (read by the learner process)."""
        self.counter.value += 1

    def submit(self, epoch: int, batches: dict[str, Transitions]) -> None:
        """Start a training round on these new transitions (returns at once)."""
        self._send(("train", epoch, batches))
        self.busy = True

    def round_done(self) -> bool:
        """Whether the running round's result waits to be read (returns at once)."""
        if self.worker.state is WorkerState.STARTING and self.worker.poll():
            self._recv(setup=True)  # the set-up's reply: no wait
        return self.busy and self.worker.poll()

    def result(self) -> Round:
        """Wait for the running round and return it.

        Raises:
            WorkerError: the learner process died, froze or raised (one line).
        """
        result: Round = self._recv()
        self.busy = False
        return result

    def states(self, on_round: Callable[[Round], None] | None = None,
               timeout_s: float | None = None) -> dict[str, dict[str, np.ndarray]]:
        """Every learner's full state, after the rounds asked for so far.

        A round whose result is still unread (an interrupt may have cut the wait for it) is
        read first and given to ``on_round``: the state is always the learner's reply to
        this question, whatever was asked before.

        Args:
            on_round: Called with each round read on the way.
            timeout_s: Give up (:class:`WorkerError`) after this long (default: never,
                while the learner process lives).
        """
        self._send(("state",))
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            reply: Any = self._recv(end)
            if not isinstance(reply, Round):
                return reply
            self.busy = False
            if on_round is not None:
                on_round(reply)

    def _send(self, message: Any) -> None:
        try:
            self.worker.send(message)
        except WorkerLostError as exc:
            raise WorkerError(f"{self.label} {self.worker.describe()}") from exc

    def _recv(self, end: float | None = None, setup: bool = False) -> Any:
        # a round may take as long as training does: no deadline unless ``end`` (a
        # monotonic time) is given, but a death or a freeze is seen at once
        while True:
            wait_s = 3600.0 if end is None else end - time.monotonic()
            if wait_s <= 0:
                raise WorkerError(f"{self.label} did not answer in time ({self.worker.name})")
            try:
                read = self.worker.wait_ready if setup else self.worker.reply
                return read(wait_s)
            except WorkerRaisedError as exc:
                report = exc.report
                raise WorkerError(f"{self.label} raised {report.summary}") from None
            except WorkerLostError as exc:
                if self.worker.alive and not self.worker.frozen():
                    continue
                raise WorkerError(f"{self.label} {self.worker.describe()}") from exc

    def close(self) -> None:
        """Stop the learner process."""
        self.worker.stop()


def make_learner_worker(payload: dict[str, Any], train_steps: int, counter: Any,
                        threads: int = 0) -> Handlers:
    """Rebuild the learners; serve ``train(epoch, batches)`` and ``state`` commands.

    A SIGTERM to the whole process group is held while the trainer lives (up to
    :data:`HOLD_S`): the trainer asks for the trained state for its final checkpoint."""
    hold_sigterm(HOLD_S)
    pool = ThreadPoolExecutor(threads) if threads > 1 and len(payload) > 1 else None
    learners: dict[str, Learner] = {}
    for name, (recipe, saved) in payload.items():
        learner = recipe.build()
        learner.load_state_dict(saved)
        learners[name] = learner

    def train(epoch: int, batches: dict[str, Transitions]) -> Round:
        return _train(learners, epoch, batches, train_steps, counter, pool)

    def state() -> dict[str, dict[str, np.ndarray]]:
        return {n: lr.state_dict() for n, lr in learners.items()}

    def close() -> None:
        if pool is not None:
            pool.shutdown(wait=False)

    return Handlers({"train": train, "state": state}, close=close)


def _train(learners: dict[str, Learner], epoch: int, batches: dict[str, Transitions],
           train_steps: int, counter: Any, pool: ThreadPoolExecutor | None = None) -> Round:
    before = int(counter.value)
    start = time.perf_counter()

    def add_new(name: str, learner: Learner) -> None:
        batch = batches.get(name)
        if batch is not None and len(batch[0]):
            learner.observe(batch)

    metrics = train_each(learners, train_steps, pool, add_new)
    return Round(epoch, {n: lr.policy_arrays() for n, lr in learners.items()}, metrics,
                 time.perf_counter() - start, before, int(counter.value))
