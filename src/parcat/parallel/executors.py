"""Episode executors: where whole episodes run. Results always come back in task order.

``InlineExecutor`` runs tasks in this process; ``ThreadExecutor`` on threads (for
environments that release the GIL); ``ProcessExecutor`` (in
:mod:`parcat.parallel.process_executor`) on persistent worker processes, each of which runs
the same :class:`~parcat.rollout.EpisodeRunner` as the inline path.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from parcat.results import EpisodeResult
from parcat.rollout import EpisodeRunner, EpisodeTask
from parcat.stepping.config import StepperConfig
from parcat.stepping.thread import DaemonThreadPool
from parcat.trace import Tracer

ResultCallback = Callable[[int, EpisodeResult], None]


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

    def close(self, force: bool = False) -> None:  # noqa: B027 - inline executors hold nothing
        """Release workers; ``force`` stops them without waiting for their episodes."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InlineExecutor(Executor):
    """Every episode in this process, one after the other."""

    name = "inline"

    def __init__(self, stepper: StepperConfig | None = None, trace: bool = False) -> None:
        self.tracer = Tracer("episodes") if trace else None
        stepper = stepper or StepperConfig()
        self.runner = EpisodeRunner(stepper.make_stepper(self.tracer), tracer=self.tracer,
                                    retries=stepper.retries)

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

    def close(self, force: bool = False) -> None:
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
        self._pool = DaemonThreadPool(self.workers, "parcat-episode")

    def _runner(self) -> EpisodeRunner:
        runner = getattr(self._local, "runner", None)
        if runner is None:
            lane = threading.current_thread().name
            runner = EpisodeRunner(self.stepper.make_stepper(self.tracer), tracer=self.tracer,
                                   retries=self.stepper.retries,
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

    def close(self, force: bool = False) -> None:
        """Stop the threads and close every runner."""
        self._pool.shutdown(wait=not force, cancel=force)
        for runner in self._runners:
            runner.close()
