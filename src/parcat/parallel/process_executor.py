"""Episodes on persistent worker processes, surviving their workers.

Each worker runs the inline episode path on tasks sent by pipe, two at a time so it never
idles, or, for work that waits, ``episodes_per_worker`` at once on its threads (each task
is sent with its index and its result comes back with it, as soon as it is done); the
parent waits on every pipe and process sentinel. A worker that dies mid-episode is
replaced and its episode retried ``retries`` times (an episode is a pure function of its
seeds), then recorded as failed; episodes queued behind it are requeued, never lost or run
twice. When several episodes were running in the worker that died, none is charged: each
runs again alone in a worker, so the one that kills its worker is found and charged, and
the others finish. An episode past the timeout has its worker terminated and is recorded
as a timeout (a timeout keeps one episode in flight per worker).
"""

from __future__ import annotations

import collections
import pickle
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from typing import Any

from parcat.core.errors import ConfigError
from parcat.episode.results import EpisodeResult, failed_result
from parcat.episode.rollout import EpisodeTask, TaskList
from parcat.ipc.process import (
    ErrorReport,
    Worker,
    WorkerLostError,
    check_start_method,
    get_context,
    raise_if_unguarded_main,
    start_worker,
    wait_any,
)
from parcat.parallel.episode_worker import make_episode_worker
from parcat.parallel.executors import Executor, ResultCallback, RunState
from parcat.stepping.config import StepperConfig

PREFETCH = 2  # tasks queued per worker, so a worker never idles waiting for its next task
PARTIAL_WAIT_S = 1.0
"""How long a timed-out worker may take to hand back its episode's partial result."""
WAIT_S = 0.5  # longest single wait; deadlines and liveness are checked at least this often


@dataclass(eq=False)  # compared by identity: fields hold processes and pipes
class _Lane:
    """An episode worker and the tasks it has been sent."""

    index: int
    worker: Worker
    inflight: collections.deque[int] = field(default_factory=collections.deque)
    head_started: float = 0.0
    setup: ErrorReport | bool = False
    alone: bool = False
    """It runs one episode alone: one of several that were in flight when a worker died."""


class ProcessExecutor(Executor):
    """Episodes on ``workers`` persistent worker processes (``gpus``: a
    ``CUDA_VISIBLE_DEVICES`` value per worker, round-robin); each runs the inline episode path."""

    name = "process"

    def __init__(self, workers: int, stepper: StepperConfig | None = None,
                 start_method: str | None = None, blas_threads: int = 1,
                 gpus: Sequence[str] = (), trace: bool = False, retries: int = 1,
                 episode_timeout_s: float | None = None, episodes_per_worker: int = 1) -> None:
        self.num_workers = max(1, workers)
        # a timeout stops the whole worker: it must hold one episode only
        self.episodes_per_worker = 1 if episode_timeout_s is not None \
            else max(1, episodes_per_worker)
        self.stepper = stepper or StepperConfig()
        self.blas_threads = blas_threads
        self.gpus = tuple(gpus)
        self.trace = trace
        self.retries = retries
        self.timeout_s = episode_timeout_s
        self._start_method = check_start_method(start_method)
        self._ctx: BaseContext | None = None  # made with the first worker: see _start
        self._workers: list[_Lane] = []
        self._events: list[dict[str, Any]] = []
        # an executor that is never closed must not keep the interpreter from exiting
        weakref.finalize(self, _stop_all, self._workers)

    def _start(self, index: int) -> _Lane:
        if self._ctx is None:
            # starting the fork server costs a process importing numpy and parcat: only
            # when a worker is really needed (a hybrid run may never need one)
            self._ctx = get_context(self._start_method)
        gpu = self.gpus[index % len(self.gpus)] if self.gpus else None
        worker = start_worker(
            make_episode_worker, (self.stepper, gpu, f"episode-worker-{index}", self.trace,
                                  self.episodes_per_worker),
            # the worker that checked and timed the policies, kept, saves a start (its
            # GPU variable could come too late for what it imported: only without GPUs)
            f"parcat-episode-{index}", self.blas_threads, ctx=self._ctx, reuse=gpu is None,
        )
        return _Lane(index, worker)

    def run(self, tasks: Sequence[EpisodeTask],

            on_result: ResultCallback | None = None) -> list[EpisodeResult]:
        """Feed tasks to the workers in order; gather results into their slots."""
        _check_picklable(tasks)
        while len(self._workers) < min(self.num_workers, max(1, len(tasks))):
            self._workers.append(self._start(len(self._workers)))
        run = RunState(tasks, on_result)
        while run.remaining:
            for worker in self._workers:
                self._feed(worker, run)
            busy = [w for w in self._workers if w.inflight]
            wait_any([w.worker for w in busy], timeout=self._next_wait(busy))
            for worker in busy:
                self._collect(worker, run)
        return [run.results[i] for i in sorted(run.results)]

    def _feed(self, worker: _Lane, run: RunState) -> None:
        if worker.alone:
            return
        if run.alone:  # suspects first, each in a worker of its own
            if not worker.inflight:
                worker.alone = True
                self._send(worker, run, run.alone.popleft())
            return
        # queue a second task only while there is work for every worker: at the tail a
        # task queued behind a slow episode would wait while another worker idles
        depth = self.episodes_per_worker if self.episodes_per_worker > 1 else \
            PREFETCH if len(run.pending) >= len(self._workers) else 1
        while run.pending and len(worker.inflight) < depth:
            if not self._send(worker, run, run.pending.popleft()):
                return

    def _send(self, worker: _Lane, run: RunState, index: int) -> bool:
        """Send task ``index`` to ``worker``; ``False`` when its pipe is broken."""
        if not worker.inflight:
            worker.head_started = time.monotonic()
        worker.inflight.append(index)
        try:
            worker.worker.conn.send(("task", index, run.tasks[index]))
        except OSError:
            return False  # the worker is dead: _collect notices and requeues
        return True

    def _next_wait(self, busy: list[_Lane]) -> float:
        if self.timeout_s is None or not busy:
            return WAIT_S
        first_deadline = min(w.head_started + self.timeout_s for w in busy)
        return max(0.0, min(WAIT_S, first_deadline - time.monotonic()))

    def _collect(self, worker: _Lane, run: RunState) -> None:
        while worker.inflight:
            try:
                if not worker.worker.conn.poll():
                    break
                message = worker.worker.conn.recv()
            except (EOFError, OSError):
                break  # the worker died: handled below
            except Exception as exc:  # a result that cannot be unpickled
                first = worker.inflight[0]
                message = ("ok", (first, failed_result(
                    run.tasks[first], "ResultError",
                    f"the result could not be read: {type(exc).__name__}: {exc}"), []))
            # outside the try: an error in the caller's callback is not a dead worker
            self._receive_one(worker, run, message)
        if not worker.inflight:
            return
        if not worker.worker.alive or worker.worker.frozen():
            self._lost(worker, run, timed_out=False)
        elif self.overdue(time.monotonic() - worker.head_started):
            self._lost(worker, run, timed_out=True)

    def _receive_one(self, worker: _Lane, run: RunState, message: Any) -> None:
        kind, payload = message[0], message[1]
        if worker.setup is False:  # the first reply is the set-up's
            worker.setup = payload if kind == "error" else True
            return
        if kind not in ("ok", "error"):
            return
        if kind == "error":  # the worker could not run or answer the command
            index = worker.inflight[0]
            result = failed_result(run.tasks[index], "ResultError",
                                   f"the episode's result cannot be sent back: {payload.summary}")
        else:
            index, result, events = payload
            self._events.extend(events)
        if index not in worker.inflight:
            return
        worker.inflight.remove(index)
        worker.head_started = time.monotonic()
        worker.alone = worker.alone and bool(worker.inflight)
        run.finish(index, result)

    def _lost(self, worker: _Lane, run: RunState, timed_out: bool) -> None:
        """The worker's current episode ended it (death or timeout): replace the worker.
        Several episodes running in it when it died are each run again alone, uncharged."""
        raise_if_unguarded_main(worker.worker)
        if self.episodes_per_worker > 1 and len(worker.inflight) > 1 and not timed_out:
            worker.worker.stop(grace_s=1.0, terminate=True)
            run.alone.extend(worker.inflight)
            self._workers[self._workers.index(worker)] = self._start(worker.index)
            return
        index = worker.inflight.popleft()
        task = run.tasks[index]
        how = worker.worker.describe() if not isinstance(worker.setup, ErrorReport) \
            else f"failed to set up ({worker.setup.summary})"
        agent = _agent_id(task, worker.worker.acting())
        partial = _partial_result(worker.worker, task) if timed_out else None
        worker.worker.stop(grace_s=1.0, terminate=True)
        run.pending.extendleft(reversed(worker.inflight))
        self._workers[self._workers.index(worker)] = self._start(worker.index)
        if timed_out:
            return run.finish(index, self.timed_out(task, "worker stopped", partial, agent))
        run.attempts[index] += 1
        if run.attempts[index] <= self.retries:
            (run.alone if worker.alone else run.pending).appendleft(index)
            return
        tries = run.attempts[index]
        doing = f"agent '{agent}' was acting" if agent is not None else "running this episode"
        run.finish(index, failed_result(
            task, "WorkerError",
            f"episode worker {how} while {doing} ({tries} attempt{'s' if tries > 1 else ''})",
            agent=agent,
        ))

    def worker_pids(self) -> list[int]:
        return [lane.worker.pid for lane in self._workers if lane.worker.pid]

    def close(self, force: bool = False) -> None:
        _stop_all(self._workers, force)


def _stop_all(workers: list[_Lane], force: bool = False) -> None:
    grace = 0.5 if force else 5.0
    for worker in workers:
        worker.worker.stop(grace_s=grace, terminate=bool(worker.inflight) or force)
    workers.clear()


def _check_picklable(tasks: Sequence[EpisodeTask]) -> None:
    """Every mission's first task can be pickled (a lazy task list is not walked)."""
    if isinstance(tasks, TaskList):
        firsts = [EpisodeTask(m, tasks.policies, tasks.seed, 0) for m in tasks.missions]
    else:
        firsts = list({id(t.mission): t for t in tasks}.values())  # one per mission
    for task in firsts:
        try:
            pickle.dumps(task)
        except Exception as exc:
            raise ConfigError(
                f"mission '{task.mission.name}' cannot be sent to worker processes "
                f"({type(exc).__name__}: {exc}); use picklable parameters or --executor inline"
            ) from exc


def _partial_result(worker: Worker, task: EpisodeTask) -> EpisodeResult | None:
    """SIGTERM a timed-out worker and take what its episode had got, if anything."""
    worker.process.terminate()
    try:
        while True:
            message = worker.recv(PARTIAL_WAIT_S)
            result: EpisodeResult = message[1]
            if message[0] == "partial" and (result.mission, result.episode_index) == (
                    task.mission.name, task.episode_index):
                return result
    except WorkerLostError:
        return None


def _agent_id(task: EpisodeTask, index: int | None) -> str | None:
    """The id of agent ``index`` of the task's mission (``None`` when unknown)."""
    agents = task.mission.agents()
    return str(agents[index].agent_id) if index is not None and index < len(agents) else None
