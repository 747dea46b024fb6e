"""What a mission measures besides the return, per side, for ``parcat compare``: win, draw
and loss rates and illegal moves where the game has a winner (:mod:`parcat.eval.ratings`'
rules), the side's own mean return where the agents have several roles (evade's pursuers
and evader score on different scales), and every number the environment reports
(``episode_stats``: evade's ``captured`` is the capture rate, ``capture_step`` the time to
capture).

A side is a role (agent ids without their trailing number: ``pursuer``, ``evader``); where
every agent has the same role, a game with a winner has a side per agent (``player_0``)
and any other mission one side, ``*``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from parcat.episode.results import AgentResult, EpisodeResult
from parcat.eval.ratings import has_winner, side_outcome, side_return
from parcat.eval.report import ALL_POLICIES, agent_role

Metrics = dict[tuple[str, str, str], list[float]]
"""Per (mission, side, metric), one value per finished episode."""


def side_metrics(episodes: Sequence[EpisodeResult], policy: str = ALL_POLICIES) -> Metrics:
    """Every finished episode's metrics on each side where ``policy`` played an agent
    (``*``: every side), in first-seen order; values that are not finite are left out."""
    missions: dict[str, list[EpisodeResult]] = {}
    for episode in episodes:
        if episode.ok and episode.agents:
            missions.setdefault(episode.mission, []).append(episode)
    found: Metrics = {}
    for mission, mine in missions.items():
        winner = has_winner(mine)
        for episode in mine:
            for side, agents in sides(episode.agents, winner).items():
                if policy != ALL_POLICIES and all(a.policy != policy for a in agents):
                    continue
                own = [a.agent_id for a in agents]
                values = _values(episode, own, winner, len(agents) < len(episode.agents))
                for name, value in values.items():
                    if math.isfinite(value):
                        found.setdefault((mission, side, name), []).append(value)
    return found


def sides(agents: Sequence[AgentResult], winner: bool) -> dict[str, list[AgentResult]]:
    """The agents of each side, by its name (module docstring)."""
    roles = [agent_role(a.agent_id) for a in agents]
    if len(set(roles)) == 1:
        roles = [a.agent_id for a in agents] if winner else [ALL_POLICIES] * len(agents)
    found: dict[str, list[AgentResult]] = {}
    for agent, role in zip(agents, roles, strict=True):
        found.setdefault(role, []).append(agent)
    return found


def _values(episode: EpisodeResult, own: list[str], winner: bool, split: bool
            ) -> dict[str, float]:
    others = [a.agent_id for a in episode.agents if a.agent_id not in own]
    values = side_outcome(episode, own, others) if winner else {}
    if split and not winner:
        values["return"] = side_return(episode, tuple(own))
    return {**values, **episode.stats}
