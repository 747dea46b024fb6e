"""The ``process`` agent-level strategy: persistent policy workers and shared memory.

The episode's process keeps one share of the agents and hands the others to policy workers
(:mod:`~parcat.stepping.policy_worker`): each step it writes their observations to shared
memory and raises every request flag before it steps its own agents, then reads the actions
(:mod:`parcat.ipc.handoff`).
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from parcat.core.trace import Tracer, now_us
from parcat.envs.missions import Mission
from parcat.ipc.handoff import Handoff
from parcat.ipc.process import (
    ErrorReport,
    Worker,
    WorkerLostError,
    WorkerRaisedError,
    get_context,
    start_worker,
)
from parcat.ipc.shm import Codec, SlotBlock
from parcat.policies.builtin import noop_action
from parcat.stepping.base import InlineStepper, PolicyStepError, Seat, straggler_wait
from parcat.stepping.policy_worker import make_policy_worker

SETUP_TIMEOUT_S = 120.0
# a worker that cannot build a policy which this process could build has an environment
# problem (the class is not importable there): those agents step inline instead
FALLBACK_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError", "PicklingError"}


@dataclass(eq=False)  # compared by identity: fields hold processes and pipes
class _Host:
    """A policy worker and what it hosts this episode."""

    index: int
    worker: Worker
    block: SlotBlock | None = None
    handoff: Handoff | None = None
    layout: list[tuple[Any, Any]] = field(default_factory=list)
    seats: list[Seat] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return self.handoff is not None and self.handoff.busy


class ProcessStepper(InlineStepper):
    """Agents' policies in ``workers`` persistent worker processes (this process steps a
    share too), observations through shared memory. A worker later than
    ``action_timeout_s`` gets the default action for its agents. Calls failing with a
    transient error are made again up to ``retries`` times, here and in the workers."""

    name = "process"

    def __init__(self, workers: int, spin: bool = True, action_timeout_s: float | None = None,
                 start_method: str | None = None, blas_threads: int = 1,
                 tracer: Tracer | None = None, retries: int = 0) -> None:
        super().__init__(retries=retries)
        self.num_workers = max(1, workers)
        self.spin = spin
        self.timeout = action_timeout_s
        self.blas_threads = blas_threads
        self.tracer = tracer
        self._workers: list[_Host] = []
        self._local: list[Any] = []
        self._late: dict[Any, int] = {}
        self._defaults: dict[Any, Any] = {}
        self._inline_specs: set[str] = set()
        self._ctx = get_context(start_method)

    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        """Share the seats out, send each worker its own, and reset the local ones."""
        self._ensure_workers()
        # with a deadline every agent steps on a worker: only a worker's step can be late
        parts = self.num_workers + (0 if self.timeout is not None else 1)
        shares = _split(list(seats), parts)
        if self.timeout is not None:
            shares.insert(0, [])
        local = list(shares[0])
        for worker, share in zip(self._workers, shares[1:], strict=True):
            local += [s for s in share if s.spec.name in self._inline_specs]
            worker.seats = [s for s in share if s.spec.name not in self._inline_specs]
        for worker in self._workers:
            self._send_episode(worker, mission)
        for worker in self._workers:
            local += self._await_ready(worker, mission)
        super().start(mission, local)
        self._local = [s.agent.agent_id for s in local]
        self._late = {s.agent.agent_id: 0 for s in seats}
        self._defaults = {s.agent.agent_id: noop_action(s.agent.action_space) for s in seats}

    def _ensure_workers(self) -> None:
        for worker in list(self._workers):
            if not worker.worker.alive or worker.worker.frozen() or (
                worker.busy and not self._drain(worker, straggler_wait(self.timeout))
            ):
                self._replace(worker)  # dead, or hung on a step of the last episode
                continue
            if worker.handoff is not None:
                try:
                    worker.handoff.discard_messages()
                except WorkerLostError:
                    self._replace(worker)
        while len(self._workers) < self.num_workers:
            self._workers.append(self._spawn(len(self._workers)))

    def _spawn(self, index: int) -> _Host:
        worker = start_worker(make_policy_worker, (self.spin, self.awaited.calls.retries),
                              f"parcat-policy-{index}",
                              self.blas_threads, ctx=self._ctx)
        return _Host(index, worker)

    def _replace(self, worker: _Host) -> None:
        self._stop(worker)
        self._workers[worker.index] = self._spawn(worker.index)

    def _send_episode(self, worker: _Host, mission: Mission) -> None:
        layout = [(s.agent.observation_space, s.agent.action_space) for s in worker.seats]
        if worker.block is None or layout != worker.layout:
            if worker.block is not None:
                worker.block.close()
            codecs = [(Codec.for_space(o), Codec.for_space(a)) for o, a in layout]
            worker.block = SlotBlock(codecs)
            worker.handoff = Handoff(worker.block.header, worker.worker, self.spin)
            worker.layout = layout
        try:
            worker.worker.send(("episode", mission, worker.seats, worker.block.name))
        except WorkerLostError:
            self._lost(worker)

    def _await_ready(self, worker: _Host, mission: Mission) -> list[Seat]:
        """Wait for a worker's set-up; return seats that must step here instead."""
        if worker.block is None:
            return []  # a replacement for one that died hosting no one: it has no episode
        try:
            worker.worker.reply(SETUP_TIMEOUT_S)
            return []
        except WorkerLostError:
            self._lost(worker)
            return []
        except WorkerRaisedError as exc:
            report = exc.report
        if report.kind not in FALLBACK_ERRORS:
            raise PolicyStepError(report.agent, "reset", report)
        moved = worker.seats
        for name in sorted({s.spec.name for s in moved} - self._inline_specs):
            warnings.warn(f"policy '{name}' cannot run in a policy worker ({report.summary}); "
                          "stepping it inline", RuntimeWarning, stacklevel=2)
            self._inline_specs.add(name)
        worker.seats = []
        self._send_episode(worker, mission)
        if worker.worker.alive:  # else already replaced: it hosts no one
            try:
                worker.worker.reply(SETUP_TIMEOUT_S)
            except (WorkerLostError, WorkerRaisedError):
                self._lost(worker)
        return moved

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        """Dispatch every worker, step the local agents, then collect the workers' actions."""
        deadline = None if self.timeout is None else time.perf_counter() + self.timeout
        live_set = set(live)
        started = now_us() if self.tracer else 0.0
        dispatched = [w for w in self._workers if self._dispatch(w, obs, live_set)]
        actions = super().act(obs, [a for a in self._local if a in live_set])
        for worker in self._workers:
            if worker in dispatched and self._wait_done(worker, deadline):
                self._collect(worker, live_set, actions)
                if self.tracer:
                    agents = ", ".join(str(s.agent.agent_id) for s in worker.seats)
                    self.tracer.span(f"step {agents}", started, now_us(),
                                     track=f"policy-worker-{worker.index}")
                continue
            for seat in worker.seats:
                agent_id = seat.agent.agent_id
                if agent_id in live_set:
                    self._late[agent_id] += 1
                    actions[agent_id] = self._defaults[agent_id]
        return {a: actions[a] for a in live}

    def _dispatch(self, worker: _Host, obs: dict[Any, Any], live: set[Any]) -> bool:
        block, handoff = worker.block, worker.handoff
        if block is None or handoff is None or not worker.seats or handoff.busy:
            return False  # nothing to do, or still on an earlier, late step
        any_live = False
        for seat, slots, (codec, _) in zip(worker.seats, block.agents, block.codecs,
                                           strict=True):
            agent_id = seat.agent.agent_id
            if agent_id in live:
                codec.write(slots.obs, obs[agent_id])
                slots.live[0] = 1
                any_live = True
            else:
                slots.live[0] = 0
        if any_live:
            try:
                handoff.request()
            except WorkerLostError:
                self._died(worker)
        return any_live

    def _wait_done(self, worker: _Host, deadline: float | None) -> bool:
        """Wait for the worker's actions; False when the deadline passed first."""
        handoff = worker.handoff
        assert handoff is not None
        try:
            if not handoff.wait_done(deadline):
                return False
        except WorkerLostError:
            self._died(worker)
        if handoff.failed:
            try:
                report = handoff.error()
            except WorkerLostError:
                self._died(worker)
            raise PolicyStepError(report.agent, "policy", report)
        return True

    def _collect(self, worker: _Host, live: set[Any], actions: dict[Any, Any]) -> None:
        """Read the worker's actions, and count the retries it spent on them."""
        block, handoff = worker.block, worker.handoff
        assert block is not None and handoff is not None
        for seat, slots, (_, codec) in zip(worker.seats, block.agents, block.codecs,
                                           strict=True):
            agent_id = seat.agent.agent_id
            if agent_id in live:
                actions[agent_id] = codec.read(slots.action)
                self.awaited.count_retries(agent_id, int(slots.live[0]) - 1)

    def _died(self, worker: _Host) -> NoReturn:
        """Fail the episode, naming the agent the worker was stepping, else those it hosted."""
        how = worker.worker.describe()
        index = worker.worker.acting()
        acting = [s for s in worker.seats if s.agent.agent_index == index]
        if acting:
            agent = acting[0].agent.agent_id
            text = f"policy worker {worker.index} {how} while agent '{agent}' was acting"
        else:
            agent = worker.seats[0].agent.agent_id if len(worker.seats) == 1 else None
            hosted = ", ".join(f"'{s.agent.agent_id}'" for s in worker.seats)
            text = f"policy worker {worker.index} {how}; it hosted agent(s) {hosted}"
        raise PolicyStepError(agent, "worker", ErrorReport("WorkerError", text, "", agent))

    def _lost(self, worker: _Host) -> None:
        """A worker ended while it was given an episode: the episode fails if the worker
        hosts some of its agents; one that hosts none (they step here) is only replaced."""
        if worker.seats:
            self._died(worker)
        self._replace(worker)

    def worker_pids(self) -> list[int]:
        return [h.worker.pid for h in self._workers if h.worker.pid]

    def late_actions(self) -> dict[Any, int]:
        return dict(self._late)

    def _drain(self, worker: _Host, timeout: float) -> bool:
        end = time.perf_counter() + timeout
        while worker.busy:
            if time.perf_counter() > end or not worker.worker.alive:
                return False
            time.sleep(0.001)
        return True

    def _stop(self, worker: _Host) -> None:
        worker.worker.stop()
        if worker.block is not None:
            worker.block.close()
            worker.block = None
            worker.handoff = None

    def close(self) -> None:
        for worker in self._workers:
            self._stop(worker)
        self._workers = []
        super().close()


def _split(items: list[Seat], parts: int) -> list[list[Seat]]:
    """Contiguous, as even as possible, earlier parts larger."""
    size, extra = divmod(len(items), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [items[a:b] for a, b in itertools.pairwise(bounds)]
