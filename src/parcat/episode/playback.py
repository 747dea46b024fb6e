"""Playing a replay back: its environment rebuilt from the file, stepped with the recorded
actions (a turn-based game through the same :func:`~parcat.envs.turns.play_turns` loop that
recorded it), and drawn after every step with whatever ``render()`` gives: text for parcat's
own missions, an RGB picture for environments that render one (``render_mode="rgb_array"``).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from parcat.core.errors import MissionError, brief, clip
from parcat.core.imports import require_trusted
from parcat.envs.missions import builtin_code, close_env, make_env
from parcat.envs.turns import play_turns
from parcat.episode.replay import Replay, ReplayError

RENDER_MODES = ("rgb_array", "ansi")
"""What playback asks of environments from outside parcat, by preference (parcat's own draw
text whatever is asked)."""

Picture = str | np.ndarray | None
"""What an environment drew: text, an RGB array (height × width × 3, uint8), or nothing."""


@dataclass(frozen=True)
class Frame:
    """The environment after ``step`` steps of a replay (0: after the reset)."""

    step: int
    picture: Picture
    problems: tuple[str, ...] = ()
    """Where the environment disagreed with the recording at this step."""
    legend: dict[str, str] | None = None
    """What the characters of a text picture mean (the env's ``metadata["legend"]``)."""


def frames(replay: Replay, trust_code: bool = False) -> Generator[Frame, None, None]:
    """Rebuild the episode's environment, step it with the recorded actions and draw it.

    A replay is a file and its ``env`` names code, so it must be parcat's own unless
    ``trust_code``.

    Raises:
        UntrustedCodeError: the replay names an environment from outside parcat.
        MissionError: the environment cannot be rebuilt.
        ReplayError: the replay and the environment disagree, or the environment fails.
    """
    meta = replay.meta
    require_trusted(meta["env"], builtin_code()[0], trust_code, replay.source)
    env = _make(replay)
    try:
        agents = list(env.possible_agents)
        if [str(a) for a in agents] != replay.agents:
            raise ReplayError(f"{replay.source}: the environment has agents "
                              f"{brief([str(a) for a in agents])}, the replay "
                              f"{brief(replay.agents)}; it is damaged or from another parcat")
        legend = _legend(env)
        try:
            env.reset(seed=meta["seed"])
        except Exception as exc:  # the environment's own error
            raise _failed(replay, "reset", exc) from exc
        play = _turns if meta.get("turn_based") else _steps
        for step, problems in play(env, replay, agents):
            yield Frame(step, _render(env, replay), tuple(problems), legend)
    finally:
        close_env(env)


def _make(replay: Replay) -> Any:
    """The replay's environment, asked for a picture (RGB, else text) if it is from outside
    parcat and takes a ``render_mode``; one that takes none is built as recorded."""
    meta = replay.meta
    if meta["env"] not in builtin_code()[0]:
        # a picture needs no window: pygame-based envs would look for a display (and SDL
        # print its complaints on stderr)
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        for mode in RENDER_MODES:
            with contextlib.suppress(MissionError):
                return make_env(meta["env"], {**meta["params"], "render_mode": mode},
                                meta["mission"])
    return make_env(meta["env"], meta["params"], meta["mission"])


def _legend(env: Any) -> dict[str, str] | None:
    metadata = getattr(env, "metadata", None)
    legend = metadata.get("legend") if isinstance(metadata, dict) else None
    return {str(k): str(v) for k, v in legend.items()} if isinstance(legend, dict) else None


def _steps(env: Any, replay: Replay, agents: list[Any]) -> Iterator[tuple[int, list[str]]]:
    """A parallel env stepped with every step's recorded actions; what each step paid that
    differs from the recording is a problem."""
    act_spaces = [env.action_space(a) for a in agents]
    yield 0, []
    for step in range(replay.meta["steps"]):
        if not env.agents:
            yield step, [f"the episode ended after {step} steps, recorded "
                         f"{replay.meta['steps']}"]
            return
        chosen = replay.actions_at(step, act_spaces)
        try:
            _, rewards, _, _, _ = env.step({agents[i]: a for i, a in chosen.items()})
        except Exception as exc:  # the environment's own error, at this step
            raise _failed(replay, f"step {step}", exc) from exc
        yield step + 1, [
            f"agent '{agents[i]}' earned {rewards.get(agents[i], 0.0)!r}, recorded {r!r}"
            for i, r in replay.rewards_at(step).items()
            if not math.isclose(float(rewards.get(agents[i], 0.0)), r, abs_tol=1e-6)]


def _turns(env: Any, replay: Replay, agents: list[Any]) -> Iterator[tuple[int, list[str]]]:
    """A turn-based game played by the loop that recorded it, each move the replay's; the
    agents' returns that differ from the recording are a problem of the last move."""
    act_spaces = [env.action_space(a) for a in agents]
    seat = {agent: i for i, agent in enumerate(agents)}
    totals: dict[Any, float] = {}
    game = play_turns(env, totals, replay.meta["steps"])
    yield 0, []
    move, request = 0, _advance(game, None, replay, 0)
    while request is not None:
        agent = request[1][0]
        chosen = replay.actions_at(move, act_spaces)
        if seat[agent] not in chosen:
            yield move, [f"agent '{agent}' was to move at move {move}; the replay has "
                         f"{brief([replay.agents[i] for i in chosen])}"]
            return
        request = _advance(game, {agent: chosen[seat[agent]]}, replay, move)
        move += 1
        yield move, [] if request is not None else [
            f"agent '{agent}' earned {totals.get(agent, 0.0)!r} in all, recorded {r!r}"
            for agent, r in zip(agents, replay.meta["returns"], strict=True)
            if r is not None and not math.isclose(totals.get(agent, 0.0), r, abs_tol=1e-6)]


def _advance(game: Any, actions: dict[Any, Any] | None, replay: Replay,
             move: int) -> Any:
    """The game's next request after ``actions`` (None: it is over)."""
    try:
        return next(game) if actions is None else game.send(actions)
    except StopIteration:
        return None
    except Exception as exc:  # the environment's own error, at this move
        raise _failed(replay, f"move {move}", exc) from exc


def _render(env: Any, replay: Replay) -> Picture:
    """What the environment draws now: text, an RGB array, or None (it draws nothing)."""
    render = getattr(env, "render", None)
    try:
        picture = render() if callable(render) else None
    except Exception as exc:  # the environment's own error
        raise _failed(replay, "render", exc) from exc
    if picture is None or isinstance(picture, str):
        return picture
    array = np.asarray(picture)
    if array.ndim != 3 or array.shape[2] not in (3, 4) or array.dtype.kind not in "biuf":
        return None
    return np.ascontiguousarray(np.clip(array[..., :3], 0, 255), dtype=np.uint8)


def _failed(replay: Replay, where: str, exc: Exception) -> ReplayError:
    return ReplayError(f"{replay.source}: the environment failed at {where} "
                       f"({type(exc).__name__}: {clip(str(exc), 200)}); the replay's "
                       "parameters or actions do not fit it")
