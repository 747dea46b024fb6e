"""The episode worker process: runs the inline episode path on tasks sent by its parent.

Command ``task(index, task)`` replies ``(index, result, trace events)``: the index is the
parent's, so replies are matched to tasks whatever order they come back in. A worker with
``episodes`` above 1 runs that many tasks at once, each on its own thread with its own
:class:`EpisodeRunner` (a runner caches environments and policies), and answers each as
soon as it finishes (``Handlers.threads``); with ``stepper.lockstep`` above 1, one runner
plays that many in lockstep on one thread (``Handlers.stream``), taking each task as a slot
frees; with 1, a timeout's SIGTERM sends back what the episode had got
(``("partial", ...)``). Imports nothing for the CLI or rendering.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from parcat.core.trace import Tracer
from parcat.episode.lockstep import run_many
from parcat.episode.results import EpisodeResult, failed_result
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.ipc.process import Handlers, preload
from parcat.stepping.config import StepperConfig

preload(__name__)  # the fork server imports it and all it imports, once


def make_episode_worker(stepper: StepperConfig, gpu: str | None, track: str,
                        trace: bool, episodes: int = 1) -> Handlers:
    """Build the worker's steppers and runners (one per thread, as they are needed); serve
    ``task`` commands, ``episodes`` at once."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    tracer = Tracer(track) if trace else None
    local = threading.local()
    runners: list[EpisodeRunner] = []

    def runner() -> EpisodeRunner:
        made: EpisodeRunner | None = getattr(local, "runner", None)
        if made is None:
            made = local.runner = EpisodeRunner(stepper.make_stepper(tracer), tracer=tracer,
                                                track=track, retries=stepper.retries)
            runners.append(made)
        return made

    def task(index: int, episode: EpisodeTask) -> tuple[int, EpisodeResult, list[Any]]:
        result = _sendable(episode, runner().run(episode))
        return index, result, tracer.take() if tracer else []

    def lockstep(commands: Iterable[tuple[str, list[Any]] | None]) -> Iterator[Any]:
        """``task`` commands played ``stepper.lockstep`` at a time, each answered when done."""
        sent: dict[int, EpisodeTask] = {}

        def tagged() -> Iterator[tuple[int, EpisodeTask] | None]:
            for command in commands:
                if command is not None:
                    index, episode = command[1]
                    sent[index] = episode
                    yield index, episode
                else:
                    yield None

        for index, result in run_many(runner(), tagged(), stepper.lockstep):
            yield index, _sendable(sent.pop(index), result), tracer.take() if tracer else []

    def close() -> None:
        for made in runners:
            made.close()

    if stepper.lockstep > 1:
        return Handlers({"task": task}, close=close, stream=lockstep)
    if episodes <= 1:
        runner()  # the one runner, built at set-up
    return Handlers({"task": task}, close=close, threads=max(1, episodes))


def _sendable(task: EpisodeTask, result: EpisodeResult) -> EpisodeResult:
    """``result``, or its failure record when it cannot be pickled: the reply must carry
    the task's index either way."""
    try:
        pickle.dumps(result)
    except Exception as exc:
        return failed_result(task, "ResultError", "the episode's result cannot be sent "
                             f"back: {type(exc).__name__}: {exc}")
    return result
