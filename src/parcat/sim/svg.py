"""An SVG picture of a simulation's trajectories, written by hand (no plotting library).

Only environments whose recorded state holds every agent's position have a picture:
``evade`` and ``goal_tasks`` (positions first in ``state()``) and ``harvest`` (agent rows
and columns after the resource map). Each agent is one colour; each episode is a separate
polyline from a hollow circle (its start) to a filled one (its end).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import numpy as np

from parcat.core.atomic import write_text_atomically
from parcat.sim.record import SimRecord

SIZE = 560
MARGIN = 40
LEGEND_ROW = 18
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


def _positions_first(state: np.ndarray, agents: int, params: dict[str, Any]) -> np.ndarray:
    return state[:, : 2 * agents].reshape(len(state), agents, 2).astype(np.float64)


def _harvest(state: np.ndarray, agents: int, params: dict[str, Any]) -> np.ndarray:
    size = int(params.get("size", 16))
    cells = size * size
    rows = state[:, cells : cells + agents].astype(np.float64)
    cols = state[:, cells + agents : cells + 2 * agents].astype(np.float64)
    return np.stack([cols + 0.5, size - rows - 0.5], axis=-1)


EXTRACTORS: dict[str, Callable[[np.ndarray, int, dict[str, Any]], np.ndarray]] = {
    "parcat.envs.evade:EvadeEnv": _positions_first,
    "parcat.envs.goal_tasks:GoalTasksEnv": _positions_first,
    "parcat.envs.harvest:HarvestEnv": _harvest,
}


def trajectories(record: SimRecord) -> np.ndarray | None:
    """Every agent's ``(x, y)`` at every step, shape ``(T, N, 2)``; ``None`` if unknown."""
    extract = EXTRACTORS.get(str(record.meta.get("env", "")))
    state = record.arrays.get("state")
    if extract is None or state is None or not len(state):
        return None
    return extract(state, len(record.meta["agents"]), record.meta.get("mission_params", {}))


def write_svg(record: SimRecord, path: str | Path) -> bool:
    """Write the trajectories picture; ``False`` (nothing written) if the env has none."""
    points = trajectories(record)
    if points is None:
        return False
    write_text_atomically(path, render_svg(record, points))
    return True


def render_svg(record: SimRecord, points: np.ndarray) -> str:
    """The SVG document for ``points`` of shape ``(T, N, 2)``."""
    meta = record.meta
    agents = meta["agents"]
    low, high = _bounds(points, meta.get("mission_params", {}))
    scale = SIZE / max(high - low, 1e-9)

    def xy(p: np.ndarray) -> str:
        return f"{MARGIN + (p[0] - low) * scale:.1f},{MARGIN + (high - p[1]) * scale:.1f}"

    height = SIZE + 2 * MARGIN + LEGEND_ROW * len(agents)
    width = SIZE + 2 * MARGIN
    title = (f"{meta['mission']} · {meta['mode']} · {meta['steps']} steps · "
             f"period {meta['period_s'] * 1e3:g} ms · {len(meta['episodes'])} episode(s)")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
        f'<text x="{MARGIN}" y="{MARGIN - 14}">{escape(title)}</text>',
        f'<rect x="{MARGIN}" y="{MARGIN}" width="{SIZE}" height="{SIZE}" fill="none" '
        'stroke="#444"/>',
    ]
    episodes = record.arrays["episode"]
    for i in range(len(agents)):
        colour = COLOURS[i % len(COLOURS)]
        for episode in np.unique(episodes):
            path = points[episodes == episode, i]
            line = " ".join(xy(p) for p in path)
            parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" '
                         'stroke-width="1.5" stroke-opacity="0.8"/>')
            sx, sy = xy(path[0]).split(",")
            ex, ey = xy(path[-1]).split(",")
            parts.append(f'<circle cx="{sx}" cy="{sy}" r="4" fill="none" stroke="{colour}"/>')
            parts.append(f'<circle cx="{ex}" cy="{ey}" r="4" fill="{colour}"/>')
    for i, agent in enumerate(agents):
        y = SIZE + 2 * MARGIN + LEGEND_ROW * i - 4
        label = (f"{agent['agent']}: {agent['policy']}, {agent['kind']}, "
                 f"cycle {agent['cycle_time_s'] * 1e3:g} ms")
        parts.append(f'<rect x="{MARGIN}" y="{y - 9}" width="10" height="10" '
                     f'fill="{COLOURS[i % len(COLOURS)]}"/>')
        parts.append(f'<text x="{MARGIN + 16}" y="{y}">{escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _bounds(points: np.ndarray, params: dict[str, Any]) -> tuple[float, float]:
    """A square view: the arena when the mission has one, else the data with a margin."""
    if "arena" in params:
        return 0.0, float(params["arena"])
    finite = points[np.isfinite(points).all(axis=-1)]
    if not len(finite):
        return 0.0, 1.0
    low, high = float(finite.min()), float(finite.max())
    pad = 0.05 * max(high - low, 1e-9)
    return low - pad, high + pad
