"""Turn-based (PettingZoo AEC) environments: one agent acts at a time.

parcat walks ``agent_iter``, asks the acting agent's policy for one action on what ``last()``
shows it, and sums each agent's rewards as ``last()`` reports them (the reward accumulated
since that agent's previous turn, so every reward is counted once).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import gymnasium
import numpy as np


def is_turn_based(env: Any) -> bool:
    """Whether ``env`` has PettingZoo's AEC API (``agent_iter`` and ``last``)."""
    return callable(getattr(env, "agent_iter", None)) and callable(getattr(env, "last", None))


def play_turns(env: Any, totals: dict[Any, float], max_moves: int,
               on_move: Callable[[int], bool | None] | None = None,
               on_turn: Callable[[Any, float], None] | None = None,
               ) -> Generator[tuple[dict[Any, Any], list[Any]], dict[Any, Any], int]:
    """Play a reset AEC ``env`` to its end (or ``max_moves`` moves); return the moves made.

    A generator, so that whoever plays it decides where and how the moves are computed: it
    yields ``({agent: observation}, [agent])`` for each move and is sent the actions.

    Done agents are stepped with ``None``, as the API asks; a move is a live agent's action.
    At the move limit, each agent is credited what it has accumulated but not been shown.
    ``on_move(moves)`` runs after every move (true ends the game), ``on_turn(agent, reward
    shown)`` once the agent has moved.
    """
    moves = 0
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, _ = env.last()
        totals[agent] = totals.get(agent, 0.0) + float(reward)
        if terminated or truncated:
            env.step(None)
            continue
        if moves >= max_moves:
            _credit_unseen(env, totals, skip=agent)
            break
        actions = yield {agent: obs}, [agent]
        env.step(actions[agent])
        if on_turn is not None:
            on_turn(agent, float(reward))
        moves += 1
        if on_move is not None and on_move(moves):
            break
    return moves


def _credit_unseen(env: Any, totals: dict[Any, float], skip: Any) -> None:
    """Rewards other agents earned since their last turn (``last()`` shows them later)."""
    pending = getattr(getattr(env, "unwrapped", env), "_cumulative_rewards", None)
    if not isinstance(pending, dict):
        return
    for agent, reward in pending.items():
        if agent != skip:
            totals[agent] = totals.get(agent, 0.0) + float(reward)


MISREADS = ("TypeError", "AttributeError", "KeyError", "IndexError", "ValueError")
"""What a policy raises when it treats a dict observation as an array."""


def dict_observation_hint(space: Any) -> str:
    """Appended to a policy's failure when the agent observes a dict (a turn-based game's
    ``{observation, action_mask}``): how to read one; ``""`` for any other space."""
    if not isinstance(space, gymnasium.spaces.Dict):
        return ""
    keys = ", ".join(map(str, space.spaces))
    mask = (" and plays an action where obs['action_mask'] is 1"
            if "action_mask" in space.spaces else "")
    return (f" (this agent observes a dict of {keys}, not an array: a module:Class policy "
            f"reads obs['observation']{mask}; README: Turn-based games)")


def sample_legal(space: Any, obs: Any, seed: int) -> Any:
    """A seeded random action, among the legal ones where ``obs`` has an ``action_mask``."""
    space.seed(seed)
    mask = obs.get("action_mask") if isinstance(obs, dict) else None
    if mask is not None and np.asarray(mask).any():
        return space.sample(mask=np.asarray(mask, dtype=np.int8))
    return space.sample()
