"""Episode executors: where whole episodes run. Results always come back in task order.

``InlineExecutor`` runs tasks in this process; ``ThreadExecutor`` on threads (for
environments that release the GIL); ``ProcessExecutor`` on persistent worker processes,
each of which runs the same :class:`~parcat.rollout.EpisodeRunner` as the inline path.
"""

from __future__ import annotations

import collections
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from parcat import seeding
from parcat.parallel import procs
from parcat.parallel.config import StepperConfig
from parcat.parallel.trace import Tracer
from parcat.results import EpisodeResult, EpisodeStatus, ErrorInfo
from parcat.rollout import EpisodeRunner, EpisodeTask

ResultCallback = Callable[[int, EpisodeResult], None]
PREFETCH = 2
"""Tasks queued per worker, so a worker never idles waiting for its next task."""


class Executor(ABC):
    """Runs episode tasks somewhere and returns their results in task order."""

    name = "executor"

    @abstractmethod
    def run(
        self, tasks: Sequence[EpisodeTask], on_result: ResultCallback | None = None
    ) -> list[EpisodeResult]:
        """Run every task; call ``on_result(index, result)`` as each one finishes."""

    def trace_events(self) -> list[dict[str, Any]]:
        """Trace events gathered during :meth:`run` (empty unless tracing)."""
        return []

    def close(self) -> None:  # noqa: B027 - inline executors hold nothing
        """Release workers."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InlineExecutor(Executor):
    """Every episode in this process, one after the other."""

    name = "inline"

    def __init__(self, stepper: StepperConfig | None = None, trace: bool = False) -> None:
        self.tracer = Tracer("episodes") if trace else None
        self.runner = EpisodeRunner((stepper or StepperConfig()).make_stepper(self.tracer),
                                    tracer=self.tracer)

    def run(
        self, tasks: Sequence[EpisodeTask], on_result: ResultCallback | None = None
    ) -> list[EpisodeResult]:
        """Run the tasks in order."""
        results = []
        for index, task in enumerate(tasks):
            result = self.runner.run(task)
            results.append(result)
            if on_result is not None:
                on_result(index, result)
        return results

    def trace_events(self) -> list[dict[str, Any]]:
        """Events recorded so far."""
        return self.tracer.take() if self.tracer else []

    def close(self) -> None:
        """Close environments and policy workers."""
        self.runner.close()


class ThreadExecutor(Executor):
    """Episodes on threads, each with its own runner (environments are not shared)."""

    name = "thread"

    def __init__(self, workers: int, stepper: StepperConfig | None = None,
                 trace: bool = False) -> None:
        self.workers = max(1, workers)
        self.stepper = stepper or StepperConfig()
        self.tracer = Tracer() if trace else None
        self._local = threading.local()
        self._runners: list[EpisodeRunner] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="parcat-episode")

    def _runner(self) -> EpisodeRunner:
        runner = getattr(self._local, "runner", None)
        if runner is None:
            lane = threading.current_thread().name
            runner = EpisodeRunner(self.stepper.make_stepper(self.tracer), tracer=self.tracer,
                                   lane=lane)
            self._local.runner = runner
            with self._lock:
                self._runners.append(runner)
        return runner

    def _run_one(self, task: EpisodeTask) -> EpisodeResult:
        return self._runner().run(task)

    def run(
        self, tasks: Sequence[EpisodeTask], on_result: ResultCallback | None = None
    ) -> list[EpisodeResult]:
        """Run the tasks on the threads; collect in order, report as they finish."""
        futures = [self._pool.submit(self._run_one, task) for task in tasks]
        index_of = {f: i for i, f in enumerate(futures)}
        if on_result is not None:
            from concurrent.futures import as_completed

            for future in as_completed(futures):
                on_result(index_of[future], future.result())
        return [f.result() for f in futures]

    def trace_events(self) -> list[dict[str, Any]]:
        """Events recorded so far."""
        return self.tracer.take() if self.tracer else []

    def close(self) -> None:
        """Stop the threads and close every runner."""
        self._pool.shutdown(wait=True)
        for runner in self._runners:
            runner.close()


@dataclass
class _EpisodeWorker:
    index: int
    process: BaseProcess
    conn: Connection
    inflight: collections.deque[int] = field(default_factory=collections.deque)


class ProcessExecutor(Executor):
    """Episodes on persistent worker processes; each runs the inline episode path.

    Args:
        workers: Episode worker processes.
        stepper: Agent-level strategy inside each worker.
        start_method: ``forkserver`` (default on Linux) or ``spawn``.
        blas_threads: BLAS/OpenMP threads per worker.
        gpus: ``CUDA_VISIBLE_DEVICES`` per worker (round-robin), or empty.
        trace: Record a timeline.
    """

    name = "process"

    def __init__(
        self,
        workers: int,
        stepper: StepperConfig | None = None,
        start_method: str | None = None,
        blas_threads: int = 1,
        gpus: Sequence[str] = (),
        trace: bool = False,
    ) -> None:
        self.num_workers = max(1, workers)
        self.stepper = stepper or StepperConfig()
        self.blas_threads = blas_threads
        self.gpus = tuple(gpus)
        self.trace = trace
        self._ctx = procs.get_context(start_method)
        self._workers: list[_EpisodeWorker] = []
        self._events: list[dict[str, Any]] = []

    def _start(self, index: int) -> _EpisodeWorker:
        from parcat.parallel.worker_main import episode_worker_main

        gpu = self.gpus[index % len(self.gpus)] if self.gpus else None
        process, conn = procs.start_worker(
            self._ctx,
            episode_worker_main,
            (self.stepper, self.blas_threads, gpu, f"episode-worker-{index}", self.trace),
            f"parcat-episode-{index}",
        )
        return _EpisodeWorker(index, process, conn)

    def run(
        self, tasks: Sequence[EpisodeTask], on_result: ResultCallback | None = None
    ) -> list[EpisodeResult]:
        """Feed tasks to the workers in order; gather results into their slots."""
        while len(self._workers) < min(self.num_workers, max(1, len(tasks))):
            self._workers.append(self._start(len(self._workers)))
        pending = collections.deque(range(len(tasks)))
        results: list[EpisodeResult | None] = [None] * len(tasks)
        remaining = len(tasks)
        while remaining:
            for worker in self._workers:
                while pending and len(worker.inflight) < PREFETCH:
                    index = pending.popleft()
                    worker.conn.send(("task", index, tasks[index]))
                    worker.inflight.append(index)
            busy = [w for w in self._workers if w.inflight]
            waitables: list[Any] = [w.conn for w in busy] + [w.process.sentinel for w in busy]
            for ready in wait(waitables, timeout=1.0):
                worker = next(w for w in busy if ready in (w.conn, w.process.sentinel))
                for index, result in self._receive(worker, tasks, pending):
                    results[index] = result
                    remaining -= 1
                    if on_result is not None:
                        on_result(index, result)
        return [r for r in results if r is not None]

    def _receive(
        self, worker: _EpisodeWorker, tasks: Sequence[EpisodeTask],
        pending: collections.deque[int],
    ) -> list[tuple[int, EpisodeResult]]:
        done: list[tuple[int, EpisodeResult]] = []
        try:
            while worker.conn.poll():
                kind, index, payload, events = worker.conn.recv()
                if kind == "result" and index in worker.inflight:
                    worker.inflight.remove(index)
                    self._events.extend(events)
                    done.append((index, payload))
        except (EOFError, OSError):
            pass
        if not worker.process.is_alive() and worker.inflight:
            # the task at the head of the queue was running: record it; requeue the rest
            index = worker.inflight.popleft()
            done.append((index, _died(tasks[index], worker.process)))
            pending.extendleft(reversed(worker.inflight))
            worker.inflight.clear()
            procs.stop_worker(worker.process, worker.conn)
            self._workers[self._workers.index(worker)] = self._start(worker.index)
        return done

    def trace_events(self) -> list[dict[str, Any]]:
        """Events shipped back by the workers."""
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        """Stop every worker (politely, then by force) and reap it."""
        for worker in self._workers:
            procs.stop_worker(worker.process, worker.conn, grace_s=5.0)
        self._workers = []


def _died(task: EpisodeTask, process: BaseProcess) -> EpisodeResult:
    process.join(1.0)
    seed = seeding.episode_seed(task.seed, task.mission.key, task.episode_index)
    how = procs.describe_exit(process)
    message = f"episode worker {process.name} died ({how}) while running this episode"
    return EpisodeResult(
        mission=task.mission.name,
        episode_index=task.episode_index,
        seed=seed,
        steps=0,
        agents=(),
        status=EpisodeStatus.FAILED,
        error=ErrorInfo("WorkerError", message, "", None, "worker"),
    )
