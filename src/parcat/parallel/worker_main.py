"""Entry points of worker processes. Imports nothing for the CLI or rendering.

A policy worker hosts some agents of an episode: it waits for a step request in shared
memory (spinning while the plan allows a spinner per core, parked on its pipe otherwise),
steps its agents' policies and flags the actions done. Control messages (a new episode,
wake, close) travel on the pipe.
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from parcat.missions import Mission
from parcat.parallel.handoff import Serving
from parcat.parallel.procs import become_worker
from parcat.parallel.resources import limit_blas_threads
from parcat.parallel.shm import Codec, SlotBlock
from parcat.parallel.steppers import PolicyCache, Seat


class _PolicyHost:
    def __init__(self, conn: Connection, spin: bool) -> None:
        self.conn = conn
        self.spin = spin
        self.cache = PolicyCache()
        self.block: SlotBlock | None = None
        self.serving: Serving | None = None
        self.step_fns: list[Any] = []
        self.agent_ids: list[Any] = []
        self.obs_codecs: list[Codec] = []
        self.act_codecs: list[Codec] = []

    def serve(self) -> None:
        while True:
            if self.serving is not None and self.serving.wait_request():
                self._step(self.serving)
                continue
            message = self.conn.recv()
            kind = message[0]
            if kind == "close":
                return
            if kind == "episode":
                self._start_episode(message[1], message[2], message[3])

    def _start_episode(self, mission: Mission, seats: Sequence[Seat], block_name: str) -> None:
        try:
            if self.block is None or self.block.name != block_name:
                if self.block is not None:
                    self.block.close()
                codecs = [(Codec.for_space(s.agent.observation_space),
                           Codec.for_space(s.agent.action_space)) for s in seats]
                self.block = SlotBlock(codecs, name=block_name, create=False)
                self.serving = Serving(self.block.header, self.conn, self.spin)
            self.obs_codecs = [c[0] for c in self.block.codecs]
            self.act_codecs = [c[1] for c in self.block.codecs]
            policies = self.cache.reset(mission, seats)
            self.agent_ids = [s.agent.agent_id for s in seats]
            self.step_fns = [policies[a].step for a in self.agent_ids]
        except BaseException as exc:
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            agent = getattr(exc, "agent", None)
            self.conn.send(("setup_error", agent, *_describe(cause)))
            return
        self.conn.send(("ready",))

    def _step(self, serving: Serving) -> None:
        block = self.block
        assert block is not None
        request = serving.take()
        agent_id = None
        try:
            for i, slots in enumerate(block.agents):
                if slots.live[0]:
                    agent_id = self.agent_ids[i]
                    action = self.step_fns[i](self.obs_codecs[i].read(slots.obs))
                    self.act_codecs[i].write(slots.action, action)
        except Exception as exc:
            serving.finish(request, (agent_id, *_describe(exc)))
            return
        serving.finish(request)

    def close(self) -> None:
        if self.block is not None:
            self.block.close()
            self.block = None


def _unsendable(result: Any, exc: Exception) -> Any:
    from dataclasses import replace

    from parcat.results import EpisodeStatus, ErrorInfo

    message = f"the episode's result cannot be sent back: {type(exc).__name__}: {exc}"
    error = ErrorInfo("ResultError", message, "", None, "worker")
    return replace(result, status=EpisodeStatus.FAILED, error=error, stats={}, task=None)


def _describe(exc: BaseException) -> tuple[str, str, str]:
    formatted = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return type(exc).__name__, str(exc), formatted


def policy_worker_main(conn: Connection, parent_pid: int, spin: bool, blas_threads: int) -> None:
    """Run a policy worker until told to close or its parent goes away."""
    become_worker(parent_pid)
    limit_blas_threads(blas_threads)
    host = _PolicyHost(conn, spin)
    _serve(conn, host.serve, host.close)


def episode_worker_main(
    conn: Connection,
    parent_pid: int,
    stepper: Any,
    blas_threads: int,
    gpu: str | None,
    lane: str,
    trace: bool,
) -> None:
    """Run episodes sent by the parent until told to close or the parent goes away."""
    import os

    from parcat.parallel.trace import Tracer
    from parcat.rollout import EpisodeRunner

    become_worker(parent_pid)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    limit_blas_threads(blas_threads)
    tracer = Tracer(lane) if trace else None
    runner = EpisodeRunner(stepper.make_stepper(tracer), tracer=tracer, lane=lane)

    def serve() -> None:
        while True:
            message = conn.recv()
            if message[0] == "close":
                return
            _, index, task = message
            result = runner.run(task)
            events = tracer.take() if tracer else []
            try:
                payload = pickle.dumps(("result", index, result, events))
            except Exception as exc:
                payload = pickle.dumps(("result", index, _unsendable(result, exc), []))
            conn.send_bytes(payload)

    _serve(conn, serve, runner.close)


def _serve(conn: Connection, serve: Callable[[], None], cleanup: Callable[[], None]) -> None:
    """Run a worker's loop; exit quietly when the parent is gone or stops us, cleaned up."""
    try:
        serve()
    except (EOFError, OSError, SystemExit):
        pass
    finally:
        cleanup()
        with contextlib.suppress(OSError):
            conn.close()
    sys.exit(0)
