"""Episodes in this process *and* on worker processes that start in the background.

Starting workers takes a few hundred milliseconds, and a run of a few short episodes is
over before that. So an ``auto`` plan with trusted code makes this process one of its lanes:
the first episode starts at once, here, and only when the rest of the run looks longer than
:data:`WORTH_STARTING_S` does a thread start the workers, each joining as it comes up.
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from parcat.core.resources import blas_limited
from parcat.core.trace import Tracer
from parcat.episode.lockstep import run_many
from parcat.episode.results import EpisodeResult
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.ipc.process import wait_any
from parcat.parallel.executors import ResultCallback, RunState
from parcat.parallel.process_executor import ProcessExecutor, _check_picklable, _Lane
from parcat.stepping.config import StepperConfig

WORTH_STARTING_S = 1.0
"""Remaining work (estimated from the episodes run here) worth starting workers for: one
takes 0.3–0.5 s to start and two lanes halve the rest, so below ~1 s it cannot pay."""
JOIN_STARTER_S = 30.0
"""Longest wait at the end of a run for a worker still starting (it stops itself then)."""


def _pending(run: RunState) -> Iterator[tuple[int, EpisodeTask]]:
    """The run's pending tasks, tagged with their index, while there are any."""
    while run.pending:
        index = run.pending.popleft()
        yield index, run.tasks[index]


@dataclass
class _Played:
    """What this lane has played so far: the estimate of the rest of the run."""

    began: float
    steps: int
    """The run's longest episode in steps."""
    episodes: int = 0
    rounds: int = 0

    def remaining_s(self, run: RunState, lockstep: int) -> float:
        """The pending tasks' time if this lane played them all: from its episodes, or,
        before any ended, from its lockstep rounds (an episode is at most max_steps)."""
        elapsed = time.perf_counter() - self.began
        if self.episodes:
            return len(run.pending) * elapsed / self.episodes
        if not self.rounds:
            return 0.0
        rounds = math.ceil(len(run.pending) / max(1, lockstep)) * self.steps
        return rounds * elapsed / self.rounds


class HybridExecutor(ProcessExecutor):
    """This process as one episode lane plus ``workers`` worker processes started in the
    background; other arguments as :class:`ProcessExecutor`'s."""

    name = "hybrid"

    def __init__(self, workers: int, stepper: StepperConfig | None = None, *,
                 worth_starting_s: float = WORTH_STARTING_S, **options: Any) -> None:
        super().__init__(workers, stepper, **options)
        self.worth_starting_s = worth_starting_s
        self.tracer = Tracer("this process") if self.trace else None
        self._local = EpisodeRunner(self.stepper.make_stepper(self.tracer), tracer=self.tracer,
                                    retries=self.stepper.retries)
        self._arrivals: queue.SimpleQueue[_Lane | BaseException] = queue.SimpleQueue()
        self._closing = threading.Event()
        self._lock = threading.Lock()  # a started worker is handed over or stopped, never lost
        self._starter: threading.Thread | None = None

    def run(self, tasks: Sequence[EpisodeTask],

            on_result: ResultCallback | None = None) -> list[EpisodeResult]:
        """Run tasks here and on the workers as they arrive; results in task order."""
        _check_picklable(tasks)
        run = RunState(tasks, on_result)
        # a TaskList names its missions; a plain list is of one mission's tasks (or short)
        missions = getattr(tasks, "missions", None) or [t.mission for t in tasks[:1]]
        played_here = _Played(time.perf_counter(), max((m.max_steps for m in missions),
                                                       default=1))

        def between_rounds() -> None:
            played_here.rounds += 1
            self._tend(run, played_here)

        # this lane plays as a worker does (stepper.lockstep episodes at once), taking
        # tasks as its slots free; it stops taking them once none is pending
        local = run_many(self._local, _pending(run), self.stepper.lockstep, between_rounds)
        while run.remaining:
            self._tend(run, played_here)
            with blas_limited(self.stepper.blas_threads):  # as in a worker
                played = next(local, None)
            if played is not None:
                played_here.episodes += 1
                run.finish(*played)
                continue
            busy = [w for w in self._workers if w.inflight]
            wait_any([w.worker for w in busy], timeout=self._next_wait(busy))
            for worker in busy:
                self._collect(worker, run)
        return [run.results[i] for i in sorted(run.results)]

    def _tend(self, run: RunState, played: _Played) -> None:
        """Between this lane's episodes (or lockstep rounds): start the workers once the
        rest of the run looks worth it, take in those that came up, feed them, collect."""
        if self._starter is None and run.pending and \
                played.remaining_s(run, self.stepper.lockstep) > self.worth_starting_s:
            self._start_in_background(min(self.num_workers, len(run.pending)))
        self._admit_arrivals()
        for worker in self._workers:
            self._feed(worker, run)
        for worker in [w for w in self._workers if w.inflight]:
            self._collect(worker, run)

    def _start_in_background(self, count: int) -> None:
        """Start ``count`` workers on a thread (the first also starts the fork server)."""

        def start() -> None:
            for index in range(count):
                if self._closing.is_set():
                    return
                try:
                    lane = self._start(index)
                except BaseException as exc:  # handed to the run, which raises it
                    self._arrivals.put(exc)
                    return
                with self._lock:
                    if not self._closing.is_set():
                        self._arrivals.put(lane)
                        continue
                # the run ended while this one started
                lane.worker.stop(grace_s=1.0, terminate=True)
                return

        self._starter = threading.Thread(target=start, name="parcat-worker-start", daemon=True)
        self._starter.start()

    def _admit_arrivals(self) -> None:
        while True:
            try:
                arrival = self._arrivals.get_nowait()
            except queue.Empty:
                return
            if isinstance(arrival, BaseException):
                raise arrival
            self._workers.append(arrival)

    def close(self, force: bool = False) -> None:
        """Stop the workers (a worker still starting stops itself) and this lane's runner."""
        with self._lock:
            self._closing.set()
        if self._starter is not None:
            # a worker cut off in the middle of its start prints the fork server's traceback
            self._starter.join(JOIN_STARTER_S)
        with contextlib.suppress(Exception):
            self._admit_arrivals()
        super().close(force)
        self._local.close()
