"""Environment workers for training: W processes × M environments, or in-process.

Every step the trainer writes each worker's actions into its shared-memory block and
requests the step from *all* workers before waiting for any, so all environments step at
once; results are read straight from shared memory. ``num_workers=0`` runs the same
:class:`~parcat.train.envslice.EnvSlice` in this process (the fallback). A worker that
raises or dies is replaced; the episodes it was running are discarded (logged) and
training goes on.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np

from parcat.missions import Mission
from parcat.parallel import procs
from parcat.parallel.handoff import Handoff, WorkerLostError
from parcat.parallel.shm import ArrayBlock
from parcat.train.envslice import AgentLayout, EnvSlice, agent_layouts, array_specs
from parcat.train.ray_envs import RaySlot
from parcat.train.worker import CMD, EPOCH, RESET, STEP, env_worker_main

log = logging.getLogger("parcat.train")

SETUP_TIMEOUT_S = 120.0


@dataclass(eq=False)  # compared by identity: fields hold processes and pipes
class _Slot:
    first: int
    count: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    block: ArrayBlock | None = None
    handoff: Handoff | None = None
    local: bool = False
    envs: EnvSlice | None = None
    actor: RaySlot | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


class VecEnv:
    """``num_workers × envs_per_worker`` environments of one mission, stepped together.

    Args:
        mission: The mission to train on.
        num_workers: Worker processes; 0 steps the environments in this process.
        envs_per_worker: Environments per worker (or in-process when ``num_workers`` is 0).
        seed: The run seed (resets and tasks derive from it, never from the layout).
        spin: Whether workers spin on shared memory (only when busy processes <= cores).
        start_method: ``forkserver`` or ``spawn``.
        on_event: Called with short event names (``"step"``, ``"worker restarted"``).
        local_share: This process steps a share of the environments itself while the
            workers step theirs (the ``num_workers × envs_per_worker`` environments are
            spread over the workers and this process).
        parent_spin: Whether this process spins while it waits for the workers (never
            while a learner process needs the core).
        backend: ``local`` (worker processes) or ``ray`` (Ray actors, see
            :mod:`parcat.train.ray_envs`; the cluster must be initialised or is started).
    """

    def __init__(
        self,
        mission: Mission,
        num_workers: int,
        envs_per_worker: int,
        seed: int,
        spin: bool = False,
        start_method: str | None = None,
        on_event: Callable[[str], None] | None = None,
        local_share: bool = False,
        parent_spin: bool | None = None,
        backend: str = "local",
    ) -> None:
        self.mission = mission
        self.layouts: list[AgentLayout] = agent_layouts(mission)
        self.agents = [lay.agent_id for lay in self.layouts]
        self.num_envs = max(1, num_workers) * envs_per_worker
        self.seed = seed
        self.spin = spin
        self.parent_spin = spin if parent_spin is None else parent_spin
        self.on_event = on_event
        self.discarded = 0
        self.backend = backend
        use_processes = num_workers and backend == "local"
        self._ctx = procs.get_context(start_method) if use_processes else None
        lanes = max(1, num_workers) + (1 if local_share and num_workers else 0)
        lanes = min(lanes, self.num_envs)
        # the local slice (if any) is last, so every worker is dispatched before it steps
        self._slots = []
        first = 0
        for lane, count in enumerate(_shares(self.num_envs, lanes)):
            local = not num_workers or lane == num_workers
            self._slots.append(_Slot(first, count, local=local))
            first += count
        for slot in self._slots:
            self._open(slot)
        self.epoch = 0

    # -- building and replacing slices --------------------------------------------------

    def _open(self, slot: _Slot) -> None:
        specs = array_specs(self.layouts, slot.count)
        if self.backend == "ray" and not slot.local:
            slot.arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in specs.items()}
            slot.actor = RaySlot(self.mission, slot.first, slot.count, self.seed, specs)
            return
        if slot.local or self._ctx is None:
            slot.arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in specs.items()}
            slot.envs = EnvSlice(self.mission, slot.first, slot.count, self.seed, slot.arrays)
            return
        slot.block = ArrayBlock(specs)
        slot.arrays = slot.block.arrays
        slot.process, slot.conn = procs.start_worker(
            self._ctx,
            env_worker_main,
            (self.mission, slot.first, slot.count, self.seed, specs, slot.block.name, self.spin),
            f"parcat-env-{slot.first // slot.count}",
        )
        slot.handoff = Handoff(slot.block.header, slot.conn, slot.process, self.parent_spin)
        reply = slot.handoff.recv(SETUP_TIMEOUT_S)
        if reply[0] != "ready":
            raise RuntimeError(f"environment worker failed to start: {reply[2]}: {reply[3]}")

    def _close_slot(self, slot: _Slot) -> None:
        if slot.actor is not None:
            slot.actor.close()
            slot.actor = None
        if slot.envs is not None:
            slot.envs.close()
            slot.envs = None
        if slot.process is not None:
            procs.stop_worker(slot.process, slot.conn)
            slot.process = None
        if slot.block is not None:
            slot.block.close()
            slot.block = None

    def _recover(self, slot: _Slot, why: str) -> None:
        """Replace a failed slice: its unfinished episodes are discarded, training goes on."""
        log.warning(
            "environment worker for envs %d-%d %s; restarting it, its %d unfinished "
            "episode(s) are discarded",
            slot.first,
            slot.first + slot.count - 1,
            why,
            slot.count,
        )
        self.discarded += slot.count
        self._close_slot(slot)
        self._open(slot)
        self._command(slot, RESET)
        self._finish(slot)
        for key in ("rew", "term", "trunc", "alive"):
            for i in range(len(self.layouts)):
                slot.arrays[f"{key}{i}"][:] = 0
        slot.arrays["ep_done"][:] = False
        if self.on_event is not None:
            self.on_event("worker restarted")

    # -- commands -------------------------------------------------------------------------

    def _command(self, slot: _Slot, cmd: int) -> None:
        if slot.actor is not None:
            slot.actor.submit("reset" if cmd == RESET else "step", slot.arrays, self.epoch)
            return
        if slot.envs is not None:
            if cmd == RESET:
                slot.envs.reset_all(self.epoch)
            else:
                slot.envs.step()
            return
        assert slot.block is not None and slot.handoff is not None
        slot.block.header[CMD] = cmd
        slot.block.header[EPOCH] = self.epoch
        slot.handoff.request()

    def _finish(self, slot: _Slot) -> None:
        if slot.actor is not None:
            try:
                slot.actor.collect(slot.arrays)
            except RuntimeError as exc:
                raise WorkerLostError(str(exc)) from exc
            return
        handoff = slot.handoff
        if handoff is None:
            return
        handoff.wait_done()
        if handoff.failed:
            handoff.clear_error()
            message = handoff.recv(10.0)
            raise WorkerLostError(f"raised {message[2]}: {message[3]}")

    def _run(self, cmd: int) -> None:
        failed: list[tuple[_Slot, str]] = []
        for slot in self._slots:  # all dispatched before any is awaited
            try:
                self._command(slot, cmd)
            except WorkerLostError as exc:
                failed.append((slot, str(exc)))
            except Exception as exc:  # in-process slice
                failed.append((slot, f"raised {type(exc).__name__}: {exc}"))
        for slot in self._slots:
            if any(slot is f for f, _ in failed):
                continue
            try:
                self._finish(slot)
            except WorkerLostError as exc:
                failed.append((slot, str(exc)))
        for slot, why in failed:
            self._recover(slot, why)

    def reset(self, epoch: int) -> dict[Any, np.ndarray]:
        """Reset every environment for ``epoch``; return each agent's observations."""
        self.epoch = epoch
        self._run(RESET)
        return self.gather("obs")

    def step(self, actions: dict[Any, np.ndarray]) -> None:
        """Step every environment with one action per agent per environment."""
        for i, agent in enumerate(self.agents):
            column = actions[agent]
            for slot in self._slots:
                slot.arrays[_key("act", i)][:] = column[slot.first : slot.first + slot.count]
        self._run(STEP)

    def gather(self, kind: str) -> dict[Any, np.ndarray]:
        """One ``(num_envs, ...)`` array per agent of ``kind`` (obs, final, rew, ...)."""
        out = {}
        slots = self._slots
        for i, agent in enumerate(self.agents):
            key = _key(kind, i)
            if len(slots) == 1:
                out[agent] = slots[0].arrays[key].copy()
            else:
                out[agent] = np.concatenate([slot.arrays[key] for slot in slots])
        return out

    def finished_episodes(self) -> list[tuple[int, list[float]]]:
        """(length, per-agent returns) of every episode that ended in the last step."""
        found = []
        for slot in self._slots:
            arrays = slot.arrays
            for e in np.flatnonzero(arrays["ep_done"]):
                found.append((int(arrays["ep_len"][e]), [float(r) for r in arrays["ep_ret"][e]]))
        return found

    def render(self) -> str | None:
        """The first in-process environment drawn as text, if it can draw itself."""
        for slot in self._slots:
            if slot.envs is not None and slot.envs.envs:
                render = getattr(slot.envs.envs[0], "render", None)
                if render is not None:
                    frame = render()
                    return frame if isinstance(frame, str) else None
        return None

    def reset_mask(self) -> np.ndarray:
        """Which environments started a new episode with the last step (autoreset)."""
        return np.concatenate([slot.arrays["ep_done"] for slot in self._slots])

    @property
    def layout(self) -> list[tuple[str, int]]:
        """Where the environments step: ("local" or "worker", count) per slice."""
        return [("local" if s.local else "worker", s.count) for s in self._slots]

    def worker_pids(self) -> list[int]:
        """Process ids of the environment workers (empty in-process)."""
        return [s.process.pid for s in self._slots if s.process is not None and s.process.pid]

    def close(self) -> None:
        """Stop the workers and free the shared memory."""
        for slot in self._slots:
            self._close_slot(slot)

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` nearly equal counts, earlier ones larger."""
    size, extra = divmod(total, parts)
    return [size + (1 if i < extra else 0) for i in range(parts)]


@functools.lru_cache(maxsize=1024)
def _key(kind: str, index: int) -> str:
    """``kind`` + agent index, e.g. ``obs0``: built once, not every step."""
    return f"{kind}{index}"
