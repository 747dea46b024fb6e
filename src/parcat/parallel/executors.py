"""Episode executors: where whole episodes run. Results always come back in task order.

Every executor bounds an episode by ``--episode-timeout`` its own way (``SIGALRM`` inline, a
deadline per worker in :mod:`~parcat.parallel.process_executor`, ``ray.cancel`` on Ray)
behind one interface: :attr:`Executor.timeout_s`, :meth:`Executor.overdue` and
:meth:`Executor.timed_out`, the record of an episode stopped at its deadline.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from parcat.core.errors import ConfigError
from parcat.core.resources import blas_limited
from parcat.core.trace import Tracer
from parcat.episode.lockstep import run_many
from parcat.episode.results import EpisodeResult, timed_out_result
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.ipc.process import Terminated
from parcat.parallel.planner import ExecutorKind, Plan
from parcat.stepping.config import StepperConfig
from parcat.stepping.thread import DaemonThreadPool

ResultCallback = Callable[[int, EpisodeResult], None]


class Executor(ABC):
    """Runs episode tasks somewhere and returns their results in task order."""

    name = "executor"
    timeout_s: float | None = None
    """``--episode-timeout``: an episode running longer is stopped and recorded as a timeout."""
    tracer: Tracer | None = None
    """Traces the episodes this process plays (``--trace``)."""
    _events: list[dict[str, Any]] = []  # what workers sent back (each executor its own list)

    @abstractmethod
    def run(self, tasks: Sequence[EpisodeTask],
            on_result: ResultCallback | None = None) -> list[EpisodeResult]:
        """Run every task; call ``on_result(index, result)`` as each one finishes."""

    def overdue(self, running_s: float) -> bool:
        """Whether an episode running for ``running_s`` is past the timeout."""
        return self.timeout_s is not None and running_s > self.timeout_s

    def timed_out(self, task: EpisodeTask, how: str, partial: EpisodeResult | None = None,
                  agent: str | None = None, phase: str = "worker") -> EpisodeResult:
        """The record of ``task`` stopped at its deadline (``how``: what was done to it)."""
        assert self.timeout_s is not None
        return timed_out_result(task, self.timeout_s, how, partial, agent, phase)

    def trace_events(self) -> list[dict[str, Any]]:
        """Trace events gathered during :meth:`run` (empty unless tracing): this
        process's, then the workers'."""
        events, self._events = self._events, []
        return (self.tracer.take() if self.tracer else []) + events

    def close(self, force: bool = False) -> None:  # noqa: B027 - inline executors hold nothing
        """Release workers; ``force`` stops them without waiting for their episodes."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InlineExecutor(Executor):
    """Every episode in this process, one after the other. A timeout is a real-time alarm
    (``SIGALRM``): it interrupts Python code, not a C call that never returns (the process
    executor can kill its worker)."""

    name = "inline"

    def __init__(self, stepper: StepperConfig | None = None, trace: bool = False,
                 episode_timeout_s: float | None = None) -> None:
        self.tracer = Tracer("episodes") if trace else None
        self.stepper = stepper or StepperConfig()
        self.timeout_s = episode_timeout_s
        self.runner = self._new_runner()

    def _new_runner(self) -> EpisodeRunner:
        return EpisodeRunner(self.stepper.make_stepper(self.tracer), tracer=self.tracer,
                             retries=self.stepper.retries)

    def run(self, tasks: Sequence[EpisodeTask],

            on_result: ResultCallback | None = None) -> list[EpisodeResult]:
        if self.timeout_s is None:  # up to stepper.lockstep episodes side by side
            played = run_many(self.runner, enumerate(tasks), self.stepper.lockstep)
        else:  # the alarm stops the one episode playing
            played = ((index, self._run_bounded(task)) for index, task in enumerate(tasks))
        results: dict[int, EpisodeResult] = {}
        # as in a worker: BLAS pools spinning beside the episode loop cost it several times
        # what they give on a policy's small matrices (BENCHMARKS.md)
        with blas_limited(self.stepper.blas_threads):
            for index, result in played:
                results[index] = result
                if on_result is not None:
                    on_result(index, result)
        return [results[i] for i in range(len(tasks))]

    def _run_bounded(self, task: EpisodeTask) -> EpisodeResult:
        if threading.current_thread() is not threading.main_thread():
            raise ConfigError("--episode-timeout with --executor inline needs the main "
                              "thread (use --executor process from other threads)")

        def expire(signum: int, frame: Any) -> None:
            raise Terminated(-signum)

        previous = signal.signal(signal.SIGALRM, expire)
        try:
            signal.setitimer(signal.ITIMER_REAL, self.timeout_s or 0.0)
            try:
                return self.runner.run(task)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except Terminated as stop:
            # the alarm may have stopped any code mid-way: nothing it touched is reused
            with contextlib.suppress(Exception):
                self.runner.close()
            self.runner = self._new_runner()
            partial = stop.partial
            phase = partial.error.phase if partial is not None and partial.error else "step"
            return self.timed_out(task, "stopped", partial, phase=phase)
        finally:
            signal.signal(signal.SIGALRM, previous)

    def close(self, force: bool = False) -> None:
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
            track = threading.current_thread().name
            runner = EpisodeRunner(self.stepper.make_stepper(self.tracer), tracer=self.tracer,
                                   retries=self.stepper.retries, track=track)
            self._local.runner = runner
            with self._lock:
                self._runners.append(runner)
        return runner

    def run(self, tasks: Sequence[EpisodeTask],

            on_result: ResultCallback | None = None) -> list[EpisodeResult]:
        """Run the tasks on the threads, a few ahead per thread; report as they finish."""
        results: dict[int, EpisodeResult] = {}
        inflight: dict[Future[EpisodeResult], int] = {}
        upcoming = iter(range(len(tasks)))
        while True:
            for index in itertools.islice(upcoming, 2 * self.workers - len(inflight)):
                inflight[self._pool.submit(lambda t: self._runner().run(t), tasks[index])] = index
            if not inflight:
                break
            done, _ = wait(inflight, return_when=FIRST_COMPLETED)
            for future in done:
                index = inflight.pop(future)
                results[index] = future.result()
                if on_result is not None:
                    on_result(index, results[index])
        return [results[i] for i in sorted(results)]

    def close(self, force: bool = False) -> None:
        self._pool.shutdown(wait=not force, cancel=force)
        for runner in self._runners:
            runner.close()


class PendingTasks:
    """Task indices still to send: a lost worker's first, then the next new ones (nothing
    is held per task never sent)."""

    def __init__(self, total: int) -> None:
        self.returned: collections.deque[int] = collections.deque()
        self.next_new = 0
        self.total = total

    def __len__(self) -> int:
        return len(self.returned) + self.total - self.next_new

    def popleft(self) -> int:
        if self.returned:
            return self.returned.popleft()
        if self.next_new >= self.total:
            raise IndexError("no task pending")
        self.next_new += 1
        return self.next_new - 1

    def appendleft(self, index: int) -> None:
        self.returned.appendleft(index)

    def extendleft(self, indices: Iterable[int]) -> None:
        self.returned.extendleft(indices)


class RunState:
    """The tasks of one run: what is pending, what finished (exactly one record per
    episode, reported as it finishes) and how often each was attempted."""

    def __init__(self, tasks: Sequence[EpisodeTask], on_result: ResultCallback | None) -> None:
        self.tasks = tasks
        self.on_result = on_result
        self.pending = PendingTasks(len(tasks))
        self.results: dict[int, EpisodeResult] = {}
        self.remaining = len(tasks)
        self.attempts: collections.Counter[int] = collections.Counter()
        self.alone: collections.deque[int] = collections.deque()
        """Episodes that were running together in a worker when it died: each runs alone
        until the one that kills its worker is found (see :mod:`process_executor`)."""

    def finish(self, index: int, result: EpisodeResult) -> None:
        if index in self.results:
            return  # exactly one record per episode
        self.results[index] = result
        self.remaining -= 1
        if self.on_result is not None:
            self.on_result(index, result)


def make_executor(plan: Plan) -> Executor:
    """The executor the plan calls for, built from the plan alone."""
    from parcat.parallel.hybrid_executor import HybridExecutor
    from parcat.parallel.process_executor import ProcessExecutor

    stepper = StepperConfig(plan.strategy, plan.policy_workers, spin=plan.spin,
                            action_timeout_s=plan.action_timeout_s,
                            start_method=plan.start_method, blas_threads=plan.blas_threads,
                            retries=plan.retries, lockstep=plan.lockstep)
    workers = plan.episode_workers
    if plan.executor is ExecutorKind.PROCESS:
        kind = HybridExecutor if plan.local_lane else ProcessExecutor
        return kind(workers - plan.local_lane, stepper, start_method=plan.start_method,
                    blas_threads=plan.blas_threads, gpus=plan.gpus, trace=plan.trace,
                    retries=plan.retries, episode_timeout_s=plan.episode_timeout_s,
                    episodes_per_worker=plan.episodes_per_worker)
    if plan.executor is ExecutorKind.THREAD:
        return ThreadExecutor(workers, stepper, plan.trace)
    if plan.executor is ExecutorKind.RAY:
        from parcat.parallel.ray_executor import RayExecutor

        return RayExecutor(
            workers, stepper, plan.address, cpus_per_task=max(1, plan.busy_processes // workers),
            gpus_per_task=1.0 if plan.gpus else 0.0, retries=plan.retries,
            episode_timeout_s=plan.episode_timeout_s, trace=plan.trace,
        )
    return InlineExecutor(stepper, plan.trace, plan.episode_timeout_s)
