"""Episodes as Ray tasks: the same tasks and results as local runs, on a cluster.

Each task runs the inline episode path in a Ray worker, with a runner of its own that it
closes (its policies' and environment's ``close``) before it returns: Ray ends its worker
processes without running their exit hooks, so nothing left open there would be closed. Ray
retries a task whose worker died, the executor resubmits one whose node died (an episode is
a pure function of its seeds), and results are de-duplicated by task index. An episode past
the timeout is cancelled (``ray.cancel(force=True)``). Traced episodes are on their node's track.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from parcat.core import raycluster
from parcat.core.raycluster import import_ray
from parcat.core.trace import Tracer
from parcat.episode.results import EpisodeResult, failed_result
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.parallel.executors import Executor, ResultCallback, RunState
from parcat.stepping.config import StepperConfig

__all__ = ["RayExecutor", "import_ray"]
NODE_LOSSES = 3
"""Times an episode is submitted again because the node running it died. A lost node is
not the episode's failure, so these do not count against ``retries``."""
NODE_TRACK = "ray-node-"
"""The trace names an episode's track after the Ray node that ran it: this and its node id."""


def _run_task(stepper: StepperConfig, task: EpisodeTask, index: int, clock: Any,
              trace: bool) -> tuple[EpisodeResult, list[dict[str, Any]]]:
    """Body of the Ray task: the result and (tracing) the episode's events."""
    if clock is not None:
        clock.started.remote(index)  # the timeout counts from here, not from submission
    track = NODE_TRACK + import_ray().get_runtime_context().get_node_id()
    tracer = Tracer(track) if trace else None
    runner = EpisodeRunner(stepper.make_stepper(tracer), tracer=tracer, track=track,
                           retries=stepper.retries)
    try:
        return runner.run(task), tracer.take() if tracer is not None else []
    finally:
        runner.close()


class EpisodeClock:
    """A Ray actor that notes when episodes start, on its own clock (machines' clocks need
    not agree)."""

    def __init__(self) -> None:
        self.starts: dict[int, float] = {}

    def started(self, index: int) -> None:
        self.starts[index] = time.monotonic()

    def running_for(self, indices: list[int]) -> dict[int, float]:
        """Seconds each of the started ``indices`` has been running."""
        now = time.monotonic()
        return {i: now - self.starts[i] for i in indices if i in self.starts}


class RayExecutor(Executor):
    """Episodes as Ray tasks on a local or remote Ray cluster (``address``; ``None`` starts
    a local one), ``workers`` in flight at once; Ray re-runs a task whose worker died
    ``retries`` times."""

    name = "ray"

    def __init__(self, workers: int, stepper: StepperConfig | None = None,
                 address: str | None = None, cpus_per_task: float = 1.0,
                 gpus_per_task: float = 0.0, retries: int = 1,
                 episode_timeout_s: float | None = None, trace: bool = False) -> None:
        self.ray = import_ray()
        self.trace = trace
        self._events: list[dict[str, Any]] = []
        self.workers = max(1, workers)
        self.stepper = stepper or StepperConfig()
        self.timeout_s = episode_timeout_s
        self._owns_cluster = raycluster.connect(address, num_cpus=self.workers)
        self._clock: Any = None
        if episode_timeout_s is not None:
            # on the driver's node: the clock must outlive any other node
            here = self.ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                self.ray.get_runtime_context().get_node_id(), soft=False)
            self._clock = self.ray.remote(num_cpus=0, scheduling_strategy=here)(
                EpisodeClock).remote()
        self._remote = self.ray.remote(
            num_cpus=cpus_per_task, num_gpus=gpus_per_task, max_retries=retries,
            retry_exceptions=False,
        )(_run_task)

    def run(self, tasks: Sequence[EpisodeTask],

            on_result: ResultCallback | None = None) -> list[EpisodeResult]:
        """Submit tasks with at most ``workers`` in flight; gather results by index. An
        episode whose node died (Ray says so once the node is marked dead) is submitted
        again, up to :data:`NODE_LOSSES` times."""
        ray = self.ray
        run = RunState(tasks, on_result)
        losses = collections.Counter[int]()
        inflight: dict[Any, int] = {}
        stepper_ref = ray.put(self.stepper)
        while run.remaining:
            while run.pending and len(inflight) < self.workers:
                index = run.pending.popleft()
                inflight[self._remote.remote(stepper_ref, tasks[index], index, self._clock,
                                             self.trace)] = index
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in ready:
                index = inflight.pop(ref)
                result = self._result(ref, tasks[index], losses[index] < NODE_LOSSES)
                if result is None:
                    losses[index] += 1
                    run.pending.appendleft(index)
                else:
                    run.finish(index, result)
            self._cancel_late(inflight, run)
        return [run.results[i] for i in sorted(run.results)]

    def _result(self, ref: Any, task: EpisodeTask, resubmit: bool) -> EpisodeResult | None:
        """The task's result; ``None`` when its node died and ``resubmit`` allows a rerun."""
        try:
            outcome: tuple[EpisodeResult, list[dict[str, Any]]] = self.ray.get(ref)
            self._events.extend(outcome[1])
            return outcome[0]
        except self.ray.exceptions.TaskCancelledError:
            return self.timed_out(task, "cancelled")  # only a timeout cancels a task
        except self.ray.exceptions.NodeDiedError as exc:
            if resubmit:
                return None
            return failed_result(task, "WorkerError", f"the Ray node running the episode died "
                           f"{NODE_LOSSES + 1} times: {_first_line(exc)}")
        except self.ray.exceptions.RayError as exc:
            kind = type(exc).__name__
            return failed_result(task, "WorkerError",
                           f"Ray task failed after retries ({kind}): {_first_line(exc)}")

    def _cancel_late(self, inflight: dict[Any, int], run: RunState) -> None:
        if self._clock is None or not inflight:
            return
        running = self.ray.get(self._clock.running_for.remote(list(inflight.values())))
        for ref, index in list(inflight.items()):
            if self.overdue(running.get(index, 0.0)):
                self.ray.cancel(ref, force=True)
                del inflight[ref]
                run.finish(index, self.timed_out(run.tasks[index], "cancelled"))

    def close(self, force: bool = False) -> None:
        """Shut down the local cluster this executor started."""
        if self._clock is not None and self.ray.is_initialized():
            with contextlib.suppress(Exception):
                self.ray.kill(self._clock)
            self._clock = None
        if self._owns_cluster:
            raycluster.disconnect()
            self._owns_cluster = False


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else ""
