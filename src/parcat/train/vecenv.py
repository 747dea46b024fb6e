"""Training environments in lanes, stepped together, and the episodes in flight.

Each step starts in *all* lanes before any is awaited; results are read straight from the
lanes' arrays. A lane that raises or dies is replaced, its episodes discarded (logged).
Environments reset only when an episode ends, so a checkpoint is written mid-episode: as
parcat cannot read an environment's state, it keeps each one's episode number and actions
so far (:class:`InFlight`, ``envs.npz``), and resuming resets to that episode and replays
them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from parcat.core.errors import CheckpointError, WorkerError
from parcat.envs.missions import Mission
from parcat.ipc.process import get_context
from parcat.train.envslice import AgentLayout, agent_layouts, array_specs
from parcat.train.lanes import Command, EnvLane, LaneLostError, LocalLane, ProcessLane, RayLane

log = logging.getLogger("parcat.train")
MAX_RESTARTS = 3
"""Lane failures in a row (no episode finished in between) before training stops: an
environment that crashes in every episode cannot be trained on."""
FILE = "envs.npz"
"""The episodes in flight in a run directory."""


@dataclass(frozen=True)
class InFlight:
    """The episodes running in every environment, as a checkpoint saves them."""

    episodes: np.ndarray
    """Per environment: the number of the episode it runs."""
    lengths: np.ndarray
    """Per environment: steps taken in it so far."""
    actions: list[np.ndarray]
    """Per agent ``(lengths.sum(), *action_shape)``: the actions, environment after
    environment."""
    obs: list[np.ndarray]
    """Per agent, the last observations and (below) each agent's return so far: what tells
    a replay that took another course."""
    returns: np.ndarray

    @property
    def num_envs(self) -> int:
        """Environments saved."""
        return len(self.episodes)

    def actions_at(self, t: int) -> list[np.ndarray]:
        """Per agent, every environment's ``t``-th action (zero where its episode is shorter)."""
        rows = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64) + t
        taken = self.lengths > t
        columns = []
        for actions in self.actions:
            column = np.zeros((self.num_envs, *actions.shape[1:]), actions.dtype)
            column[taken] = actions[rows[taken]]
            columns.append(column)
        return columns

    def to_arrays(self) -> dict[str, np.ndarray]:
        """For :func:`parcat.policies.checkpoint.save_run`."""
        arrays = {"episodes": self.episodes, "lengths": self.lengths, "returns": self.returns}
        for i, (actions, obs) in enumerate(zip(self.actions, self.obs, strict=True)):
            arrays[f"act{i}"], arrays[f"obs{i}"] = actions, obs
        return arrays

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], layouts: Sequence[AgentLayout],
                    where: str) -> InFlight:
        """Read back :meth:`to_arrays`; :class:`CheckpointError` naming ``where`` for a
        missing key or an array of another shape."""
        def get(key: str, shape: tuple[int, ...], kind: str) -> np.ndarray:
            array = arrays.get(key)
            if array is None or array.shape != shape or array.dtype.kind not in kind:
                raise CheckpointError(
                    f"--resume: '{where}': expected array '{key}' of shape {shape}, found "
                    f"{'none' if array is None else array.shape}; the file belongs to another "
                    "mission or is damaged: delete it to start new episodes")
            return array

        lengths = arrays.get("lengths")
        num_envs = len(lengths) if lengths is not None and lengths.ndim == 1 else 0
        lengths = get("lengths", (num_envs,), "iu")
        if (lengths < 0).any():
            raise CheckpointError(f"--resume: '{where}': a negative episode length")
        total = int(lengths.sum())
        return cls(
            episodes=get("episodes", (num_envs,), "iu"), lengths=lengths,
            actions=[get(f"act{i}", (total, *lay.act_shape), "iuf")
                     for i, lay in enumerate(layouts)],
            obs=[get(f"obs{i}", (num_envs, *lay.obs_shape), "iufb")
                 for i, lay in enumerate(layouts)],
            returns=get("returns", (num_envs, len(layouts)), "f"),
        )


class EpisodeHistory:
    """The actions of every environment's current episode, kept from the oldest episode
    still running."""

    def __init__(self, num_envs: int, layouts: Sequence[AgentLayout],
                 state: InFlight | None = None) -> None:
        self.layouts = list(layouts)
        longest = 0 if state is None else int(state.lengths.max(initial=0))
        self.steps: list[list[np.ndarray]] = [] if state is None else [
            state.actions_at(t) for t in range(longest)]
        """Per step, per agent: every environment's action."""
        self.first, self.now = 0, longest
        """The step numbers of ``steps[0]`` and of the next step."""
        self.start = (np.zeros(num_envs, np.int64) if state is None
                      else (longest - state.lengths).astype(np.int64))
        """The step each environment's current episode began at."""

    def record(self, columns: list[np.ndarray], began: np.ndarray) -> None:
        """Add one step's actions; ``began`` marks environments a new episode began in."""
        self.steps.append(columns)
        self.now += 1
        self.restart(began)

    def restart(self, began: np.ndarray) -> None:
        """Forget the actions of the marked environments (a new episode began there)."""
        self.start[began] = self.now
        oldest = int(self.start.min())
        if oldest > self.first:
            del self.steps[: oldest - self.first]
            self.first = oldest

    def snapshot(self, episodes: np.ndarray, obs: list[np.ndarray],
                 returns: np.ndarray) -> InFlight:
        """What a checkpoint keeps now."""
        actions = []
        for i, lay in enumerate(self.layouts):
            if not self.steps:
                actions.append(np.zeros((0, *lay.act_shape), lay.act_dtype))
                continue
            stacked = np.stack([step[i] for step in self.steps])  # (steps, envs, ...)
            actions.append(np.concatenate(
                [stacked[s - self.first :, e] for e, s in enumerate(self.start)]))
        return InFlight(episodes.astype(np.int64), (self.now - self.start).astype(np.int64),
                        actions, [o.copy() for o in obs], returns.astype(np.float64))


class VecEnv:
    """``num_workers × envs_per_worker`` environments of one mission, stepped together.

    Args:
        num_workers: Worker processes (or Ray actors, ``backend="ray"``); 0 steps here.
        spin: Whether workers spin on shared memory (only when busy processes <= cores).
        on_event: Called with short event names (``"worker restarted"``).
        local_share: This process steps a share of the environments too.
        parent_spin: Whether this process spins waiting for the workers (default ``spin``).
        num_envs: Environments in all (default ``max(1, num_workers) * envs_per_worker``),
            spread over the lanes as evenly as they go.
    """

    def __init__(self, mission: Mission, num_workers: int, envs_per_worker: int, seed: int,
                 spin: bool = False, start_method: str | None = None,
                 on_event: Callable[[str], None] | None = None, local_share: bool = False,
                 parent_spin: bool | None = None,
                 backend: str = "local", num_envs: int | None = None) -> None:
        self.mission, self.seed, self.spin, self.backend = mission, seed, spin, backend
        self.start_method = start_method
        self.layouts: list[AgentLayout] = agent_layouts(mission)
        self.agents = [lay.agent_id for lay in self.layouts]
        self.num_envs = num_envs or max(1, num_workers) * envs_per_worker
        self.parent_spin = spin if parent_spin is None else parent_spin
        self.on_event = on_event
        self.discarded = 0
        self.history = EpisodeHistory(self.num_envs, self.layouts)
        self._restarted = np.zeros(self.num_envs, dtype=bool)
        self._failures = 0
        num_lanes = max(1, num_workers) + (1 if local_share and num_workers else 0)
        size, extra = divmod(self.num_envs, min(num_lanes, self.num_envs))
        # the local lane (if any) is last, so every worker is dispatched before it steps
        self._lanes: list[EnvLane] = []
        try:
            for index in range(min(num_lanes, self.num_envs)):
                first = sum(lane.count for lane in self._lanes)
                count = size + (index < extra)
                self._lanes.append(self._open(first, count, not num_workers
                                              or index == num_workers))
        except LaneLostError as exc:
            self.close()
            raise WorkerError(str(exc)) from exc
        except BaseException:
            self.close()
            raise

    def _open(self, first: int, count: int, local: bool) -> EnvLane:
        specs = array_specs(self.layouts, count)
        if local:
            return LocalLane(self.mission, first, count, self.seed, specs)
        if self.backend == "ray":
            return RayLane(self.mission, first, count, self.seed, specs)
        return ProcessLane(self.mission, first, count, self.seed, specs, self.spin,
                           self.parent_spin, get_context(self.start_method))

    def _recover(self, index: int, why: str) -> None:
        """Replace a failed lane, its unfinished episodes discarded; past
        :data:`MAX_RESTARTS` restarts with no episode finished in between, stop."""
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

    def _run(self, command: Command) -> None:
        failed: dict[int, str] = {}
        for index, lane in enumerate(self._lanes):  # all started before any is awaited
            try:
                lane.submit(command)
            except LaneLostError as exc:
                failed[index] = str(exc)
        for index, lane in enumerate(self._lanes):
            try:
                if index not in failed:
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
        return self.history.snapshot(self._concat("episode"), list(self.gather("obs").values()),
                                     self._concat("run_ret"))

    def restore(self, state: InFlight) -> dict[Any, np.ndarray]:
        """Continue ``state``'s episodes: reset to them and replay their actions; return
        each agent's observations. Environments whose replay ends early or arrives at other
        observations (a non-deterministic environment) are one warning and run on."""
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
        other = lost | _rows_differ(state.returns, self._concat("run_ret"))
        for saved, now in zip(state.obs, obs.values(), strict=True):
            other |= _rows_differ(saved, now)
        if other.any():
            log.warning(
                "%d of %d environment(s) took another course when their episodes were "
                "replayed (is the environment deterministic?); resuming is not exact for "
                "them; training goes on", int(other.sum()), self.num_envs,
            )
        self.history = EpisodeHistory(self.num_envs, self.layouts, state)
        self.history.restart(lost)
        self._restarted[:] = False
        return obs

    def _write(self, key: str, values: np.ndarray) -> None:
        for lane in self._lanes:
            lane.arrays[key][:] = values[lane.first : lane.first + lane.count]

    def _concat(self, key: str) -> np.ndarray:
        return np.concatenate([lane.arrays[key] for lane in self._lanes])

    def gather(self, kind: str) -> dict[Any, np.ndarray]:
        """One ``(num_envs, ...)`` array per agent of ``kind`` (obs, final, rew, ...)."""
        if len(self._lanes) == 1:
            return {agent: self._lanes[0].arrays[_key(kind, i)].copy()
                    for i, agent in enumerate(self.agents)}
        return {agent: self._concat(_key(kind, i)) for i, agent in enumerate(self.agents)}

    def finished_episodes(self) -> list[tuple[int, list[float]]]:
        """(length, per-agent returns) of every episode that ended in the last step."""
        return [(int(lane.arrays["ep_len"][e]), [float(r) for r in lane.arrays["ep_ret"][e]])
                for lane in self._lanes for e in np.flatnonzero(lane.arrays["ep_done"])]

    def render(self) -> str | None:
        """The first in-process environment drawn as text, if it can draw itself."""
        return next((lane.render() for lane in self._lanes if lane.local), None)

    def reset_mask(self) -> np.ndarray:
        """Which environments started a new episode with the last step (autoreset, or a
        lane restarted)."""
        return self._concat("ep_done") | self._restarted

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


@functools.lru_cache(maxsize=1024)
def _key(kind: str, index: int) -> str:
    """``kind`` + agent index, e.g. ``obs0``: built once, not every step."""
    return f"{kind}{index}"
