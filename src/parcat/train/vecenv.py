"""Training environments: ``num_workers × envs_per_worker`` of them, in lanes, stepped together.

Every step the trainer writes each lane's actions into its arrays and starts the step in
*all* lanes before waiting for any, so all environments step at once; results are read
straight from the lanes' arrays (shared memory for worker processes). Where a lane runs —
this process, a worker process, a Ray actor — is :mod:`parcat.train.lanes`' business;
``num_workers=0`` is one local lane. A lane that raises or dies is replaced; the episodes
it was running are discarded (logged), its environments start their next episodes and
training goes on.

Environments are reset once (:meth:`VecEnv.reset`, or :meth:`VecEnv.restore` to continue
a checkpoint's episodes) and then only when an episode ends (autoreset), so episodes run
across epochs. The actions of the episodes running are recorded
(:class:`~parcat.train.inflight.EpisodeHistory`) for :meth:`VecEnv.in_flight`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from parcat.core.errors import WorkerError
from parcat.envs.missions import Mission
from parcat.ipc.process import get_context
from parcat.train.envslice import AgentLayout, agent_layouts, array_specs
from parcat.train.inflight import EpisodeHistory, InFlight
from parcat.train.lanes.base import Command, EnvLane, LaneLostError, LocalLane

log = logging.getLogger("parcat.train")
MAX_RESTARTS = 3
"""Lane failures in a row (no episode finished in between) before training stops: an
environment that crashes in every episode cannot be trained on."""


class VecEnv:
    """``num_workers × envs_per_worker`` environments of one mission, stepped together.

    Args:
        mission: The mission to train on.
        num_workers: Worker processes (or Ray actors); 0 steps the environments here.
        envs_per_worker: Environments per worker (or in-process when ``num_workers`` is 0).
        seed: The run seed (resets and tasks derive from it, never from the layout).
        spin: Whether workers spin on shared memory (only when busy processes <= cores).
        start_method: ``forkserver`` or ``spawn``.
        on_event: Called with short event names (``"worker restarted"``).
        local_share: This process steps a share of the environments itself while the
            workers step theirs (the ``num_workers × envs_per_worker`` environments are
            spread over the workers and this process).
        parent_spin: Whether this process spins while it waits for the workers (never
            while a learner process needs the core).
        backend: ``local`` (worker processes) or ``ray`` (Ray actors; the cluster must be
            initialised).
        num_envs: Environments in all (default ``max(1, num_workers) * envs_per_worker``),
            spread over the lanes as evenly as they go.
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
        num_envs: int | None = None,
    ) -> None:
        self.mission = mission
        self.layouts: list[AgentLayout] = agent_layouts(mission)
        self.agents = [lay.agent_id for lay in self.layouts]
        self.num_envs = num_envs or max(1, num_workers) * envs_per_worker
        self.seed = seed
        self.spin = spin
        self.parent_spin = spin if parent_spin is None else parent_spin
        self.on_event = on_event
        self.discarded = 0
        self.backend = backend
        self.start_method = start_method
        self.history = EpisodeHistory(self.num_envs, self.layouts)
        self._restarted = np.zeros(self.num_envs, dtype=bool)
        self._failures = 0
        num_lanes = max(1, num_workers) + (1 if local_share and num_workers else 0)
        num_lanes = min(num_lanes, self.num_envs)
        # the local lane (if any) is last, so every worker is dispatched before it steps
        self._lanes: list[EnvLane] = []
        first = 0
        try:
            for index, count in enumerate(_shares(self.num_envs, num_lanes)):
                local = not num_workers or index == num_workers
                self._lanes.append(self._open(first, count, local))
                first += count
        except LaneLostError as exc:
            self.close()
            raise WorkerError(str(exc)) from exc
        except BaseException:
            self.close()
            raise

    # -- opening and replacing lanes ------------------------------------------------------

    def _open(self, first: int, count: int, local: bool) -> EnvLane:
        specs = array_specs(self.layouts, count)
        if local:
            return LocalLane(self.mission, first, count, self.seed, specs)
        if self.backend == "ray":
            from parcat.train.lanes.ray import RayLane

            return RayLane(self.mission, first, count, self.seed, specs)
        from parcat.train.lanes.process import ProcessLane

        return ProcessLane(self.mission, first, count, self.seed, specs, self.spin,
                           self.parent_spin, get_context(self.start_method))

    def _recover(self, index: int, why: str) -> None:
        """Replace a failed lane: its unfinished episodes are discarded, training goes on;
        past :data:`MAX_RESTARTS` restarts with no episode finished in between, stop."""
        lane = self._lanes[index]
        span = f"envs {lane.first}-{lane.first + lane.count - 1}"
        # the discarded episodes keep their numbers: the environments start the next ones
        following = lane.arrays["episode"] + 1
        while True:
            self._failures += 1
            if self._failures > MAX_RESTARTS:
                raise WorkerError(
                    f"the environment worker for {span} failed {self._failures} times with "
                    f"no episode finished in between (last: {why})")
            log.warning("environment worker for %s %s; restarting it, its %d unfinished "
                        "episode(s) are discarded", span, why, lane.count)
            self.discarded += lane.count
            lane.close()
            try:
                lane = self._lanes[index] = self._open(lane.first, lane.count, lane.local)
                lane.arrays["episode"][:] = following
                lane.submit(Command.RESET)
                lane.finish()
                break
            except LaneLostError as exc:
                why = str(exc)
        rows = np.zeros(self.num_envs, dtype=bool)
        rows[lane.first : lane.first + lane.count] = True
        self._restarted |= rows
        self.history.restart(rows)
        for key in ("rew", "term", "trunc", "alive"):
            for i in range(len(self.layouts)):
                lane.arrays[f"{key}{i}"][:] = 0
        lane.arrays["ep_done"][:] = False
        if self.on_event is not None:
            self.on_event("worker restarted")

    # -- commands -------------------------------------------------------------------------

    def _run(self, command: Command) -> None:
        failed: dict[int, str] = {}
        for index, lane in enumerate(self._lanes):  # all started before any is awaited
            try:
                lane.submit(command)
            except LaneLostError as exc:
                failed[index] = str(exc)
        for index, lane in enumerate(self._lanes):
            if index in failed:
                continue
            try:
                lane.finish()
            except LaneLostError as exc:
                failed[index] = str(exc)
        for index, why in failed.items():
            self._recover(index, why)

    def reset(self, episodes: np.ndarray | None = None) -> dict[Any, np.ndarray]:
        """Start every environment's first episode (or the numbered ``episodes``); return
        each agent's observations."""
        self._write("episode", np.zeros(self.num_envs, np.int64) if episodes is None
                    else episodes)
        self._run(Command.RESET)
        self.history = EpisodeHistory(self.num_envs, self.layouts)
        return self.gather("obs")

    def step(self, actions: dict[Any, np.ndarray]) -> None:
        """Step every environment with one action per agent per environment."""
        self._restarted[:] = False
        columns = [np.array(actions[agent]) for agent in self.agents]
        for i, column in enumerate(columns):
            self._write(_key("act", i), column)
        self._run(Command.STEP)
        if any(lane.arrays["ep_done"].any() for lane in self._lanes):
            self._failures = 0
        self.history.record(columns, self.reset_mask())

    def in_flight(self) -> InFlight:
        """The episodes running now, as a checkpoint keeps them."""
        episodes = np.concatenate([lane.arrays["episode"] for lane in self._lanes])
        returns = np.concatenate([lane.arrays["run_ret"] for lane in self._lanes])
        return self.history.snapshot(episodes, list(self.gather("obs").values()), returns)

    def restore(self, state: InFlight) -> dict[Any, np.ndarray]:
        """Continue ``state``'s episodes: reset to them and replay their actions.

        An environment whose replay ends its episode early or arrives at other
        observations (a non-deterministic environment) is logged, once, and runs on.
        Returns each agent's observations.
        """
        self.reset(state.episodes)
        lost = np.zeros(self.num_envs, dtype=bool)
        for t in range(int(state.lengths.max(initial=0))):
            self._write("hold", (state.lengths <= t) | lost)
            for i, column in enumerate(state.actions_at(t)):
                self._write(_key("act", i), column)
            self._run(Command.STEP)
            lost |= self.reset_mask()
        self._write("hold", np.zeros(self.num_envs, dtype=bool))
        obs = self.gather("obs")
        returns = np.concatenate([lane.arrays["run_ret"] for lane in self._lanes])
        other = lost | _rows_differ(state.returns, returns)
        for saved, now in zip(state.obs, obs.values(), strict=True):
            other |= _rows_differ(saved, now)
        if other.any():
            log.warning(
                "%d of %d environment(s) took another course when their episodes were "
                "replayed (is the environment deterministic?); resuming is not exact for "
                "them; training goes on", int(other.sum()), self.num_envs,
            )
        self.history.load(state, lost)
        self._restarted[:] = False
        return obs

    def _write(self, key: str, values: np.ndarray) -> None:
        """Write one array's rows into every lane's share."""
        for lane in self._lanes:
            lane.arrays[key][:] = values[lane.first : lane.first + lane.count]

    def gather(self, kind: str) -> dict[Any, np.ndarray]:
        """One ``(num_envs, ...)`` array per agent of ``kind`` (obs, final, rew, ...)."""
        out = {}
        lanes = self._lanes
        for i, agent in enumerate(self.agents):
            key = _key(kind, i)
            if len(lanes) == 1:
                out[agent] = lanes[0].arrays[key].copy()
            else:
                out[agent] = np.concatenate([lane.arrays[key] for lane in lanes])
        return out

    def finished_episodes(self) -> list[tuple[int, list[float]]]:
        """(length, per-agent returns) of every episode that ended in the last step."""
        found = []
        for lane in self._lanes:
            arrays = lane.arrays
            for e in np.flatnonzero(arrays["ep_done"]):
                found.append((int(arrays["ep_len"][e]), [float(r) for r in arrays["ep_ret"][e]]))
        return found

    def render(self) -> str | None:
        """The first in-process environment drawn as text, if it can draw itself."""
        for lane in self._lanes:
            if lane.local:
                return lane.render()
        return None

    def reset_mask(self) -> np.ndarray:
        """Which environments started a new episode with the last step (autoreset, or a
        lane restarted)."""
        return np.concatenate([lane.arrays["ep_done"] for lane in self._lanes]) | self._restarted

    @property
    def layout(self) -> list[tuple[str, int]]:
        """Where the environments step: ("local" or "worker", count) per lane."""
        return [("local" if lane.local else "worker", lane.count) for lane in self._lanes]

    def worker_pids(self) -> list[int]:
        """Process ids of the environment workers (empty in-process)."""
        return [lane.pid for lane in self._lanes if lane.pid]

    def close(self) -> None:
        """Stop the workers and free the shared memory."""
        for lane in self._lanes:
            lane.close()
        self._lanes = []

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rows_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, whether the two arrays differ in any bit (NaN equals the same NaN)."""
    rows = len(a)
    bits_a = np.ascontiguousarray(a).reshape(rows, -1).view(np.uint8)
    bits_b = np.ascontiguousarray(b, dtype=a.dtype).reshape(rows, -1).view(np.uint8)
    return np.asarray((bits_a != bits_b).any(axis=1))


def _shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` nearly equal counts, earlier ones larger."""
    size, extra = divmod(total, parts)
    return [size + (1 if i < extra else 0) for i in range(parts)]


@functools.lru_cache(maxsize=1024)
def _key(kind: str, index: int) -> str:
    """``kind`` + agent index, e.g. ``obs0``: built once, not every step."""
    return f"{kind}{index}"
