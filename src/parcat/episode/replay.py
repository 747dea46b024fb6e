"""Episode replays: what every agent saw, did and earned, one ``.npz`` file per episode.

``parcat eval --replay-dir DIR`` records each episode where it runs and writes it atomically
as ``DIR/<mission>-<episode:06d>.npz``, then ``DIR/index.json`` listing them; ``parcat replay
FILE`` plays one back by stepping the environment again from the seed and the actions
(:mod:`parcat.episode.playback`).

Format ``parcat-replay`` version 1 (``np.load(FILE)``; nothing is pickled):

- ``meta``: a 0-d string array holding JSON: ``format``, ``version``, ``mission``,
  ``env`` (the factory reference), ``params``, ``max_steps``, ``seed`` (the environment's
  reset seed), ``episode_index``, ``steps``, ``status``, ``turn_based``, ``agents``
  (ids as strings, in ``possible_agents`` order), ``policies`` (the policy each agent
  played), ``returns`` (per agent), ``observation_spaces``/``action_spaces`` (as text).
- Per agent ``i`` (its position in ``agents``), one row per step it acted in:
  ``step_i`` (int64, the environment step, from 0), ``obs_i`` (float32, the observation
  flattened with ``gymnasium.spaces.flatten``), ``act_i`` (the action: int64 for Discrete,
  the array for Box, else flattened float32), ``rew_i`` (float64, the reward that step
  paid the agent; in turn-based games, what ``last()`` showed at its turn, and on its last
  row also what it was paid after its last move (the game's end), so that an agent's rows
  add up to its return; an agent that never moved has no row, its return is in ``meta``).
- ``infos``: a 0-d string array of JSON, ``{step: {agent: info}}`` for the steps whose
  infos were not empty (values that JSON cannot hold are written as text).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import zipfile
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from parcat.core import jsontext, runlock
from parcat.core.atomic import write_atomically, write_text_atomically
from parcat.core.errors import OutputError, UsageError, brief, clip
from parcat.core.limits import (
    MAX_AGENTS,
    MAX_COUNT,
    MAX_EPISODE_STEPS,
    MAX_NAME_LENGTH,
    MAX_PATH_LENGTH,
    MAX_REPLAY_BYTES,
)

FORMAT = "parcat-replay"
VERSION = 1
INDEX = "index.json"


class ReplayError(UsageError):
    """A replay file that cannot be read (missing, damaged, another format or version)."""


def file_name(mission: str, episode_index: int) -> str:
    """The replay file of an episode, inside the replay folder."""
    return f"{mission}-{episode_index:06d}.npz"


@dataclass
class _Track:
    steps: list[int] = field(default_factory=list)
    obs: list[np.ndarray] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)


class ReplayRecorder:
    """Collects one episode as it is played, agents in ``possible_agents`` order."""

    def __init__(self, agents: list[Any], observation_spaces: list[gymnasium.Space[Any]],
                 action_spaces: list[gymnasium.Space[Any]]) -> None:
        self.agents = agents
        self.index = {agent: i for i, agent in enumerate(agents)}
        self.obs_spaces = observation_spaces
        self.act_spaces = action_spaces
        self.tracks = [_Track() for _ in agents]
        self.infos: dict[int, dict[str, Any]] = {}
        self.step = 0

    def acted(self, obs: dict[Any, Any], actions: dict[Any, Any]) -> None:
        """Record the observations the agents acted on and their actions."""
        for agent, action in actions.items():
            i = self.index[agent]
            track = self.tracks[i]
            track.steps.append(self.step)
            track.obs.append(_flat(self.obs_spaces[i], obs.get(agent)))
            track.actions.append(action)
            track.rewards.append(0.0)

    def wrap_step(self, step: Any) -> Any:
        """``env.step`` recording what each step paid."""
        def recorded(actions: Any) -> Any:
            result = step(actions)
            self._paid(result[1], result[4])
            return result
        return recorded

    def turn(self, agent: Any, reward: float) -> None:
        """A turn-based game's turn: ``agent`` acted, having been shown ``reward``."""
        self._paid({agent: reward})

    def settle(self, returns: dict[Any, float]) -> None:
        """A turn-based game's end: what each agent was paid after its last move (``last()``
        shows it once the game is over) goes to its last row, so its rows add up to its
        return (an agent that never moved has no row to hold it)."""
        for agent, total in returns.items():
            track = self.tracks[self.index[agent]] if agent in self.index else None
            if track is not None and track.rewards:
                track.rewards[-1] += float(total) - math.fsum(track.rewards)

    def _paid(self, rewards: dict[Any, float], infos: dict[Any, Any] | None = None) -> None:
        """Record what this step paid each agent that acted in it, and end the step."""
        for agent, reward in rewards.items():
            track = self.tracks[self.index[agent]]
            if track.steps and track.steps[-1] == self.step:
                track.rewards[-1] += float(reward)
        if shown := {str(a): info for a, info in (infos or {}).items() if info}:
            self.infos[self.step] = shown
        self.step += 1

    def save(self, path: Path, meta: dict[str, Any]) -> None:
        """Write the episode to ``path`` atomically (``meta`` completed with the format)."""
        arrays: dict[str, np.ndarray] = {}
        for i, track in enumerate(self.tracks):
            arrays[f"step_{i}"] = np.asarray(track.steps, dtype=np.int64)
            arrays[f"obs_{i}"] = (np.stack(track.obs) if track.obs else
                                  np.zeros((0, _flatdim(self.obs_spaces[i]) or 0), np.float32))
            arrays[f"act_{i}"] = _actions(self.act_spaces[i], track.actions)
            arrays[f"rew_{i}"] = np.asarray(track.rewards, dtype=np.float64)
        meta = {"format": FORMAT, "version": VERSION, **meta,
                "agents": [str(a) for a in self.agents],
                "observation_spaces": [str(s) for s in self.obs_spaces],
                "action_spaces": [str(s) for s in self.act_spaces]}
        arrays["meta"] = np.array(jsontext.dumps(meta, default=_text))
        arrays["infos"] = np.array(jsontext.dumps(self.infos, default=_text))
        write_atomically(path, lambda handle: np.savez_compressed(handle, **arrays))  # type: ignore[arg-type]


def _flatdim(space: gymnasium.Space[Any]) -> int | None:
    try:
        return spaces.flatdim(space)
    except (NotImplementedError, ValueError, TypeError):
        return None


def _flat(space: gymnasium.Space[Any], obs: Any) -> np.ndarray:
    if isinstance(space, spaces.Box):
        return np.asarray(obs, dtype=np.float32).reshape(-1)
    if obs is None or _flatdim(space) is None:
        return np.zeros(0, np.float32)
    return np.asarray(spaces.flatten(space, obs), dtype=np.float32)


def _actions(space: gymnasium.Space[Any], actions: list[Any]) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return np.asarray([int(a) for a in actions], dtype=np.int64)
    if isinstance(space, spaces.Box):
        shape = (len(actions), *space.shape)
        return np.asarray(actions, dtype=space.dtype).reshape(shape)
    flat = [_flat(space, a) for a in actions]
    return np.stack(flat) if flat else np.zeros((0, 0), np.float32)


def _text(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return repr(value)


# -- reading ---------------------------------------------------------------------------------

_ARRAYS = ("step", "obs", "act", "rew")
_NUMBERS = "biuf"  # numpy kinds: bool, int, unsigned, float
_SEED_LIMIT = 2**64


@dataclass(frozen=True)
class Replay:
    """One episode read back from a replay file (checked by :func:`read`)."""

    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]
    infos: dict[str, Any]
    source: str = "replay"
    """How messages name the file."""

    @property
    def agents(self) -> list[str]:
        """Agent ids as text, in ``possible_agents`` order."""
        return list(self.meta["agents"])

    def _row(self, i: int, step: int) -> int | None:
        steps = self.arrays[f"step_{i}"]  # increasing: read checked it
        row = int(np.searchsorted(steps, step))
        return row if row < len(steps) and steps[row] == step else None

    def actions_at(self, step: int, action_spaces: list[gymnasium.Space[Any]]) -> dict[int, Any]:
        """Each acting agent's action at ``step`` (by agent position), as the env takes it."""
        found: dict[int, Any] = {}
        for i, space in enumerate(action_spaces):
            row = self._row(i, step)
            if row is None:
                continue
            action = self.arrays[f"act_{i}"][row]
            try:
                if isinstance(space, spaces.Discrete):
                    action = int(action)
                elif isinstance(space, spaces.Box):
                    action = np.asarray(action, dtype=space.dtype)
                else:
                    action = spaces.unflatten(space, action)
                valid = space.contains(action)
            except (TypeError, ValueError, IndexError, OverflowError):
                valid = False
            if not valid:
                raise ReplayError(f"{self.source} is damaged: the action of agent "
                                  f"'{clip(self.agents[i])}' at step {step} is not in its "
                                  f"action space {clip(str(space))}")
            found[i] = action
        return found

    def rewards_at(self, step: int) -> dict[int, float]:
        """What ``step`` paid each agent that acted in it (by agent position)."""
        rows = {i: self._row(i, step) for i in range(len(self.agents))}
        return {i: float(self.arrays[f"rew_{i}"][row]) for i, row in rows.items()
                if row is not None}


def read(path: str | Path) -> Replay:
    """Read a replay file, and check its shape, types and sizes before anything uses it
    (``ReplayError``: missing, no replay, another version, too large or damaged)."""
    path = Path(path)
    source = f"replay '{clip(str(path), 200)}'"
    if not path.is_file():
        raise ReplayError(f"replay '{path}' does not exist or is not a file; replays are the "
                          f"*.npz files in a --replay-dir folder (listed in its {INDEX})")
    arrays = _load_arrays(path, source)
    meta = _json(arrays.pop("meta", None), source, "meta")
    infos = _json(arrays.pop("infos", np.array("{}")), source, "infos")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ReplayError(f"'{path}' is not a {FORMAT} file")
    if meta.get("version") != VERSION:
        raise ReplayError(f"replay '{path}' is format version {brief(meta.get('version'))}; "
                          f"this parcat reads version {VERSION}")
    if not isinstance(infos, dict):
        raise ReplayError(f"{source} is damaged: 'infos' is no JSON object")
    _check_meta(meta, source)
    _check_arrays(meta, arrays, source)
    return Replay(meta, arrays, infos, source)


def _load_arrays(path: Path, source: str) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
        if unpacked > MAX_REPLAY_BYTES:
            raise ReplayError(f"{source} unpacks to {unpacked:,} bytes, more than a replay's "
                              f"limit of {MAX_REPLAY_BYTES:,}; it is damaged or no parcat replay")
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ReplayError:
        raise
    except Exception as exc:  # whatever a damaged archive makes zipfile or numpy raise
        raise ReplayError(f"{source} cannot be read ({type(exc).__name__}); it is damaged or "
                          "not a parcat replay") from exc


def _json(array: Any, source: str, key: str) -> Any:
    if not isinstance(array, np.ndarray) or array.shape != () or array.dtype.kind != "U":
        raise ReplayError(f"{source} is damaged or not a parcat replay: no '{key}' text")
    try:
        return json.loads(str(array))
    except (ValueError, RecursionError) as exc:  # bad JSON, a huge integer, deep nesting
        raise ReplayError(f"{source} is damaged: '{key}' is not JSON parcat can read "
                          f"({type(exc).__name__})") from None


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_meta(meta: dict[str, Any], source: str) -> None:
    agents = meta.get("agents")
    if not isinstance(agents, list):
        agents = [None]  # fails the check below
    count = len(agents)
    checks: list[tuple[str, bool, str]] = [
        ("mission", isinstance(meta.get("mission"), str)
         and 0 < len(meta["mission"]) <= MAX_NAME_LENGTH, f"a name of 1 to {MAX_NAME_LENGTH} "
         "characters"),
        ("env", isinstance(meta.get("env"), str) and 0 < len(meta["env"]) <= MAX_PATH_LENGTH,
         "a 'module:callable' reference"),
        ("params", isinstance(meta.get("params"), dict), "an object"),
        ("seed", _is_int(meta.get("seed"), 0, _SEED_LIMIT - 1),
         "an integer from 0 to 2**64 - 1"),
        ("episode_index", _is_int(meta.get("episode_index"), 0, MAX_COUNT),
         f"an integer from 0 to {MAX_COUNT:,}"),
        ("steps", _is_int(meta.get("steps"), 0, MAX_EPISODE_STEPS),
         f"an integer from 0 to {MAX_EPISODE_STEPS:,}"),
        ("turn_based", isinstance(meta.get("turn_based", False), bool), "true or false"),
        ("agents", 0 < count <= MAX_AGENTS and all(isinstance(a, str) for a in agents),
         f"a list of 1 to {MAX_AGENTS:,} agent names"),
        ("returns", isinstance(meta.get("returns"), list) and len(meta["returns"]) == count
         and all(_is_number(r) for r in meta["returns"]), "a number for every agent"),
    ]
    for key, valid, expected in checks:
        if not valid:
            raise ReplayError(f"{source} is damaged: meta '{key}' must be {expected}, got "
                              f"{brief(meta.get(key))}")


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _check_arrays(meta: dict[str, Any], arrays: dict[str, np.ndarray], source: str) -> None:
    """Every agent's rows: increasing steps, one observation, action and reward each."""
    recorded = 0
    for i, agent in enumerate(meta["agents"]):
        missing = [f"{name}_{i}" for name in _ARRAYS if f"{name}_{i}" not in arrays]
        if missing:
            raise ReplayError(f"{source} is damaged: array '{missing[0]}' is missing")
        found = {name: arrays[f"{name}_{i}"] for name in _ARRAYS}
        steps = found["step"]
        rows = len(steps) if steps.ndim == 1 and steps.dtype.kind in "iu" else -1
        for name, array in found.items():
            if (array.dtype.kind not in _NUMBERS or array.ndim < 1 or len(array) != rows
                    or (name in ("step", "rew") and array.ndim != 1)):
                raise ReplayError(f"{source} is damaged: array '{name}_{i}' (agent "
                                  f"'{clip(agent)}') has shape {array.shape} and type "
                                  f"{array.dtype}, not one number row per step it acted")
        if rows and (steps[0] < 0 or (np.diff(steps) <= 0).any()):
            raise ReplayError(f"{source} is damaged: array 'step_{i}' (agent '{clip(agent)}') "
                              "is not increasing steps from 0")
        if rows:
            recorded = max(recorded, int(steps[-1]) + 1)
    if meta["steps"] > recorded:
        raise ReplayError(f"{source} is damaged: meta 'steps' is {meta['steps']:,}, but actions "
                          f"are recorded for {recorded:,} steps")


def claim_folder(folder: Path, missions: Collection[str], episodes: int) -> runlock.RunLock:
    """Hold the run lock of ``folder`` (one run records there at a time), and refuse,
    before anything runs, an ``index.json`` or replay file the run would write over that is
    not parcat's: parcat replaces its own earlier replays, never the user's files.

    Raises:
        RunLockedError: another parcat process records into ``folder``.
        OutputError: a file of that name is not parcat's.
    """
    lock = runlock.acquire(folder / runlock.LOCK_FILE, f"--replay-dir '{folder}'",
                           "give another --replay-dir")
    try:
        for path, ours in _would_replace(folder, set(missions), episodes):
            if not ours(path):
                raise OutputError(f"--replay-dir '{folder}': '{path.name}' there is not "
                                  f"parcat's ({FORMAT}) and the run would replace it; move "
                                  "it away or give another --replay-dir")
    except BaseException:
        lock.release()
        raise
    return lock


def _would_replace(folder: Path, missions: set[str], episodes: int
                   ) -> Iterator[tuple[Path, Callable[[Path], bool]]]:
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name == INDEX:
                yield Path(entry.path), _is_index
                continue
            mission, _, index = entry.name.removesuffix(".npz").rpartition("-")
            if (entry.name.endswith(".npz") and mission in missions and index.isdigit()
                    and int(index) < episodes and file_name(mission, int(index)) == entry.name):
                yield Path(entry.path), is_replay


def _is_index(path: Path) -> bool:
    return _names_format(path, lambda: json.loads(path.read_bytes()))


def is_replay(path: Path) -> bool:
    """Whether ``path`` is a regular file whose ``meta`` names parcat's replay format."""
    def meta() -> Any:
        with np.load(path, allow_pickle=False) as data:
            return json.loads(str(data["meta"][()]))
    return _names_format(path, meta)


def _names_format(path: Path, read: Callable[[], Any]) -> bool:
    """Whether ``path`` is a regular file whose JSON ``read`` gives names parcat's format."""
    with contextlib.suppress(Exception):  # whatever a foreign file makes json/zipfile/numpy raise
        if stat.S_ISREG(path.lstat().st_mode):
            document = read()
            return isinstance(document, dict) and document.get("format") == FORMAT
    return False


def write_index(folder: Path, entries: list[dict[str, Any]]) -> None:
    """Write ``folder/index.json`` atomically: the format and one entry per episode."""
    document = {"format": FORMAT, "version": VERSION, "episodes": entries}
    write_text_atomically(folder / INDEX, jsontext.dumps(document, indent=1) + "\n")
