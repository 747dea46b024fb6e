"""The episode worker process: runs the inline episode path on tasks sent by its parent.

Command ``task(task)`` replies ``(result, trace events)``; a timeout's SIGTERM sends back
what the episode had got (``("partial", ...)``). Imports nothing for the CLI or rendering.
"""

from __future__ import annotations

import os
from typing import Any

from parcat.core.trace import Tracer
from parcat.episode.rollout import EpisodeRunner
from parcat.ipc.process import Handlers, preload
from parcat.stepping.config import StepperConfig

preload(__name__)  # the fork server imports it and all it imports, once


def make_episode_worker(stepper: StepperConfig, gpu: str | None, track: str,
                        trace: bool) -> Handlers:
    """Build the worker's stepper and runner; serve ``task`` commands."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    tracer = Tracer(track) if trace else None
    runner = EpisodeRunner(stepper.make_stepper(tracer), tracer=tracer, track=track,
                           retries=stepper.retries)

    def task(episode: Any) -> tuple[Any, list[Any]]:
        result = runner.run(episode)
        return result, tracer.take() if tracer else []

    return Handlers({"task": task}, close=runner.close)
