"""Episode replays: what every agent saw, did and earned, one ``.npz`` file per episode.

``parcat eval --replay-dir DIR`` records each episode where it runs (this process or a
worker) and writes it atomically as ``DIR/<mission>-<episode:06d>.npz``; the run writes
``DIR/index.json`` listing them. ``parcat replay FILE`` plays one back.

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
  paid the agent; in turn-based games, what ``last()`` showed at its turn).
- ``infos``: a 0-d string array of JSON, ``{step: {agent: info}}`` for the steps whose
  infos were not empty (values that JSON cannot hold are written as text).

Environments are replayed from the seed and the actions where they are deterministic
(parcat's own are): :func:`frames` rebuilds the environment, steps it and draws every
step with ``env.render()``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from parcat.atomic import write_atomically, write_text_atomically
from parcat.errors import UsageError

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


class Recorder:
    """Collects one episode as it is played (see the module docstring for the format).

    Args:
        agents: The environment's ``possible_agents``.
        observation_spaces: Each agent's observation space, same order.
        action_spaces: Each agent's action space, same order.
    """

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
        """Record the observations the agents acted on and their actions (this step)."""
        for agent, action in actions.items():
            i = self.index[agent]
            track = self.tracks[i]
            track.steps.append(self.step)
            track.obs.append(_flat(self.obs_spaces[i], obs.get(agent)))
            track.actions.append(action)
            track.rewards.append(0.0)

    def paid(self, rewards: dict[Any, float], infos: dict[Any, Any] | None = None) -> None:
        """Record what this step paid each agent that acted in it, and end the step."""
        for agent, reward in rewards.items():
            track = self.tracks[self.index[agent]]
            if track.steps and track.steps[-1] == self.step:
                track.rewards[-1] += float(reward)
        if infos:
            shown = {str(a): info for a, info in infos.items() if info}
            if shown:
                self.infos[self.step] = shown
        self.step += 1

    def wrap_act(self, act: Any) -> Any:
        """``act`` recording what the agents saw and did."""
        def recorded(obs: dict[Any, Any], live: Any) -> dict[Any, Any]:
            actions = act(obs, live)
            self.acted(obs, actions)
            return actions
        return recorded

    def wrap_step(self, step: Any) -> Any:
        """``env.step`` recording what each step paid."""
        def recorded(actions: Any) -> Any:
            result = step(actions)
            self.paid(result[1], result[4])
            return result
        return recorded

    def turn(self, agent: Any, reward: float) -> None:
        """A turn-based game's turn: ``agent`` acted, having been shown ``reward``."""
        self.paid({agent: reward})

    def save(self, path: Path, meta: dict[str, Any]) -> None:
        """Write the episode to ``path`` atomically (``meta`` completed with the format)."""
        arrays: dict[str, np.ndarray] = {}
        for i, track in enumerate(self.tracks):
            arrays[f"step_{i}"] = np.asarray(track.steps, dtype=np.int64)
            dim = spaces.flatdim(self.obs_spaces[i]) if _flattenable(self.obs_spaces[i]) else 0
            arrays[f"obs_{i}"] = (np.stack(track.obs) if track.obs
                                  else np.zeros((0, dim), np.float32))
            arrays[f"act_{i}"] = _actions(self.act_spaces[i], track.actions)
            arrays[f"rew_{i}"] = np.asarray(track.rewards, dtype=np.float64)
        meta = {"format": FORMAT, "version": VERSION, **meta,
                "agents": [str(a) for a in self.agents],
                "observation_spaces": [str(s) for s in self.obs_spaces],
                "action_spaces": [str(s) for s in self.act_spaces]}
        arrays["meta"] = np.array(json.dumps(meta, default=_text))
        arrays["infos"] = np.array(json.dumps(self.infos, default=_text))
        write_atomically(path, lambda handle: np.savez_compressed(handle, **arrays))  # type: ignore[arg-type]


def _flattenable(space: gymnasium.Space[Any]) -> bool:
    try:
        spaces.flatdim(space)
    except (NotImplementedError, ValueError, TypeError):
        return False
    return True


def _flat(space: gymnasium.Space[Any], obs: Any) -> np.ndarray:
    if isinstance(space, spaces.Box):
        return np.asarray(obs, dtype=np.float32).reshape(-1)
    if obs is None or not _flattenable(space):
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


@dataclass(frozen=True)
class Replay:
    """One episode read back from a replay file."""

    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]
    infos: dict[str, Any]

    @property
    def agents(self) -> list[str]:
        """Agent ids as text, in ``possible_agents`` order."""
        return list(self.meta["agents"])

    def actions_at(self, step: int, action_spaces: list[gymnasium.Space[Any]]) -> dict[int, Any]:
        """Each acting agent's action at ``step`` (by agent position), as the env takes it."""
        found: dict[int, Any] = {}
        for i, space in enumerate(action_spaces):
            rows = np.flatnonzero(self.arrays[f"step_{i}"] == step)
            if len(rows):
                action = self.arrays[f"act_{i}"][rows[0]]
                if isinstance(space, spaces.Discrete):
                    found[i] = int(action)
                elif isinstance(space, spaces.Box):
                    found[i] = np.asarray(action, dtype=space.dtype)
                else:
                    found[i] = spaces.unflatten(space, action)
        return found

    def rewards_at(self, step: int) -> dict[int, float]:
        """What ``step`` paid each agent that acted in it (by agent position)."""
        found = {}
        for i in range(len(self.agents)):
            rows = np.flatnonzero(self.arrays[f"step_{i}"] == step)
            if len(rows):
                found[i] = float(self.arrays[f"rew_{i}"][rows[0]])
        return found


def read(path: str | Path) -> Replay:
    """Read a replay file.

    Raises:
        ReplayError: the file is missing, not a replay, or of another format version.
    """
    path = Path(path)
    if not path.is_file():
        raise ReplayError(f"replay '{path}' does not exist or is not a file; replays are the "
                          f"*.npz files in a --replay-dir folder (listed in its {INDEX})")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
        meta = json.loads(str(arrays.pop("meta")))
        infos = json.loads(str(arrays.pop("infos", np.array("{}"))))
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise ReplayError(f"replay '{path}' cannot be read ({type(exc).__name__}); "
                          "it is damaged or not a parcat replay") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ReplayError(f"'{path}' is not a {FORMAT} file")
    if meta.get("version") != VERSION:
        raise ReplayError(f"replay '{path}' is format version {meta.get('version')!r}; this "
                          f"parcat reads version {VERSION}")
    return Replay(meta, arrays, infos)


def write_index(folder: Path, entries: list[dict[str, Any]]) -> None:
    """Write ``folder/index.json`` (atomically): the format and one entry per episode."""
    document = {"format": FORMAT, "version": VERSION, "episodes": entries}
    write_text_atomically(folder / INDEX, json.dumps(document, indent=1) + "\n")


def frames(replay: Replay) -> Iterator[tuple[int, str, list[str]]]:
    """Rebuild the episode's environment, step it with the recorded actions and draw it.

    Yields ``(step, frame, problems)``: the frame after ``step`` steps (step 0: after the
    reset) and what disagreed with the recording there (rewards of a non-deterministic env).

    Raises:
        ReplayError: the environment cannot be rebuilt, draws no text, or is turn-based.
    """
    from parcat.missions import close_env, make_env

    meta = replay.meta
    if meta.get("turn_based"):
        raise ReplayError("playing back turn-based games is not supported; read the replay's "
                          "arrays with numpy (see parcat/replay.py for the format)")
    env: Any = make_env(meta["env"], meta["params"], meta["mission"])
    try:
        env.reset(seed=meta["seed"])
        render = getattr(env, "render", None)
        first = render() if callable(render) else None
        if not isinstance(first, str):
            raise ReplayError(f"mission '{meta['mission']}' cannot draw itself as text; read "
                              "the replay's arrays with numpy (see parcat/replay.py)")
        yield 0, first, []
        agents = list(env.possible_agents)
        act_spaces = [env.action_space(a) for a in agents]
        for step in range(meta["steps"]):
            chosen = replay.actions_at(step, act_spaces)
            _, rewards, _, _, _ = env.step({agents[i]: a for i, a in chosen.items()})
            problems = [
                f"agent '{agents[i]}' earned {rewards.get(agents[i], 0.0)!r}, recorded {r!r}"
                for i, r in replay.rewards_at(step).items()
                if not math.isclose(float(rewards.get(agents[i], 0.0)), r, abs_tol=1e-6)
            ]
            yield step + 1, str(env.render()), problems
    finally:
        close_env(env)
