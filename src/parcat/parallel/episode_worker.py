"""The episode worker process: runs the inline episode path on tasks sent by its parent.

Imports nothing for the CLI or rendering. Each result goes back pickled, with the trace
events recorded while it ran; a result that cannot be pickled comes back as a failure of
its episode.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from parcat.core.trace import Tracer
from parcat.episode.results import EpisodeResult, EpisodeStatus, ErrorInfo
from parcat.episode.rollout import EpisodeRunner
from parcat.ipc.process import Terminated, become_worker, preload, serve
from parcat.stepping.config import StepperConfig

preload(__name__)  # the fork server imports it and all it imports, once


def episode_worker_main(
    conn: Connection,
    parent_pid: int,
    stepper: StepperConfig,
    blas_threads: int,
    gpu: str | None,
    track: str,
    trace: bool,
) -> None:
    """Run episodes sent by the parent until told to close or the parent goes away."""
    become_worker(parent_pid, blas_threads)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    tracer = Tracer(track) if trace else None
    runner = EpisodeRunner(stepper.make_stepper(tracer), tracer=tracer, track=track,
                           retries=stepper.retries)

    def loop() -> None:
        while True:
            message = conn.recv()
            if message[0] == "close":
                return
            _, index, task = message
            try:
                result = runner.run(task)
            except Terminated as stop:  # a timeout: the parent keeps what the episode got
                if stop.partial is not None:
                    conn.send(("partial", index, stop.partial, []))
                raise
            events = tracer.take() if tracer else []
            try:
                payload = pickle.dumps(("result", index, result, events))
            except Exception as exc:
                payload = pickle.dumps(("result", index, _unsendable(result, exc), []))
            conn.send_bytes(payload)

    serve(conn, loop, runner.close)


def _unsendable(result: EpisodeResult, exc: Exception) -> Any:
    message = f"the episode's result cannot be sent back: {type(exc).__name__}: {exc}"
    error = ErrorInfo("ResultError", message, "", None, "worker")
    return replace(result, status=EpisodeStatus.FAILED, error=error, stats={}, task=None)
