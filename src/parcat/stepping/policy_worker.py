"""The policy worker process: hosts some agents of each episode for :mod:`.process`.

Its command ``episode`` sets up a new episode's agents; between commands it serves step
requests in shared memory. A call that fails with a transient error is made again
(``--retries``), and the agent's ``live`` byte answers ``1 +`` the retries it spent. A policy
that raises is reported with the agent and traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.ipc.handoff import Serving
from parcat.ipc.process import (
    ACTING,
    ErrorReport,
    Handlers,
    ReportedError,
    acting_marker,
    preload,
    worker_pipe,
)
from parcat.ipc.shm import Codec, SlotBlock
from parcat.stepping.base import PolicyCache, Seat
from parcat.stepping.calls import blocking, call_retrying

preload(__name__)  # the fork server imports it and all it imports, once


MAX_COUNTED = 254
"""Retries a step can report in its agent's ``live`` byte (``1 +`` them)."""


class _PolicyHost:
    def __init__(self, spin: bool, retries: int) -> None:
        self.spin = spin
        self.retries = retries
        self.cache = PolicyCache()
        self.block: SlotBlock | None = None
        self.serving: Serving | None = None
        self.step_fns: list[Any] = []
        self.agent_ids: list[Any] = []
        self.obs_codecs: list[Codec] = []
        self.act_codecs: list[Codec] = []
        self.marks: list[int] = []
        self.marker = acting_marker()

    def idle(self) -> bool:
        if self.serving is not None and self.serving.wait_request():
            self._step(self.serving)
            return True
        return False

    def start_episode(self, mission: Mission, seats: Sequence[Seat], block_name: str) -> None:
        try:
            if self.block is None or self.block.name != block_name:
                if self.block is not None:
                    self.block.close()
                codecs = [(Codec.for_space(s.agent.observation_space),
                           Codec.for_space(s.agent.action_space)) for s in seats]
                self.block = SlotBlock(codecs, name=block_name, create=False)
                self.serving = Serving(self.block.header, worker_pipe(), self.spin)
            self.obs_codecs = [c[0] for c in self.block.codecs]
            self.act_codecs = [c[1] for c in self.block.codecs]
            policies = self.cache.reset(mission, seats, self.marker)
            self.agent_ids = [s.agent.agent_id for s in seats]
            self.marks = [s.agent.agent_index + 1 for s in seats]
            self.step_fns = [blocking(policies[a].step) for a in self.agent_ids]
        except USER_CODE_ERRORS as exc:
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            report = ErrorReport.from_exception(cause, getattr(exc, "agent", None))
            raise ReportedError(report) from None

    def _step(self, serving: Serving) -> None:
        block = self.block
        assert block is not None
        request = serving.take()
        agent_id = None
        marker = self.marker
        try:
            for i, slots in enumerate(block.agents):
                if slots.live[0]:
                    agent_id = self.agent_ids[i]
                    if marker is not None:
                        marker[ACTING] = self.marks[i]
                    action, retried = call_retrying(
                        self.step_fns[i], self.obs_codecs[i].read(slots.obs), self.retries)
                    self.act_codecs[i].write(slots.action, action)
                    slots.live[0] = 1 + min(retried, MAX_COUNTED)
        except USER_CODE_ERRORS as exc:
            serving.finish(request, ErrorReport.from_exception(exc, agent_id))
            return
        if marker is not None:
            marker[ACTING] = 0
        serving.finish(request)

    def close(self) -> None:
        self.cache.clear()
        if self.block is not None:
            self.block.close()
            self.block = None


def make_policy_worker(spin: bool, retries: int = 0) -> Handlers:
    """Serve ``episode(mission, seats, block_name)`` commands, and the steps between, each
    call tried up to ``retries`` more times after a transient error."""
    host = _PolicyHost(spin, retries)
    return Handlers({"episode": host.start_episode}, idle=host.idle, close=host.close)
