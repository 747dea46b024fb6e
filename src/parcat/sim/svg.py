"""A picture of a simulation's trajectories: one panel per episode, with matplotlib.

Only environments whose recorded state holds every agent's position have a picture:
``evade`` and ``goal_tasks`` (positions first in ``state()``, in arena units) and ``harvest``
(agent rows and columns after the resource map, in cells). Each agent is one colour, from a
hollow circle (its start) to a filled one (its end).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core.atomic import write_atomically
from parcat.core.errors import ConfigError
from parcat.core.figures import Trajectory, save_figure, trajectories_figure
from parcat.sim.record import SimRecord

log = logging.getLogger(__name__)
MAX_PANELS = 12
"""Episodes drawn at most (a long run's hundreds would make a poster, not a figure)."""
CREATOR = "parcat sim"
"""The SVG's ``dc:title`` of its creator: how a later run knows the file is its own."""


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


def unit_and_bounds(record: SimRecord, points: np.ndarray) -> tuple[str, tuple[float, float]]:
    """The positions' unit and a square view of ``points`` (the arena, or harvest's map)."""
    params = record.meta.get("mission_params", {})
    if EXTRACTORS.get(str(record.meta.get("env", ""))) is _harvest:
        return "cells", (0.0, float(params.get("size", 16)))
    return "arena units", _bounds(points, params)


def write_svg(record: SimRecord, path: str | Path) -> bool:
    """Write the trajectories picture; ``False`` (nothing written) if the env has none or
    matplotlib is not installed (said in a warning)."""
    if trajectories(record) is None:
        return False
    try:
        figure = trajectories_of(record)
    except ImportError:
        log.warning("no %s: drawing it needs matplotlib (pip install 'parcat[plot]')", path)
        return False
    write_atomically(path, lambda file: save_figure(
        figure, file, format="svg", metadata={"Creator": CREATOR, "Date": None}))
    return True


def trajectories_of(record: SimRecord, episode: int | None = None) -> Any:
    """The figure of ``record``'s trajectories: one panel per episode (only ``episode``
    if given); ``ConfigError`` when the mission records no positions or has no such
    episode."""
    points = trajectories(record)
    if points is None:
        raise ConfigError(f"mission '{record.meta.get('mission')}' records no positions: "
                          "only evade, goal_tasks and harvest have trajectories")
    numbers = record.arrays["episode"]
    known = [int(e) for e in np.unique(numbers)]
    if episode is not None and episode not in known:
        raise ConfigError(f"--episode {episode}: the record has episodes "
                          f"{', '.join(map(str, known))}")
    chosen = [episode] if episode is not None else known[:MAX_PANELS]
    paths = [Trajectory(e, points[numbers == e]) for e in chosen]
    unit, bounds = unit_and_bounds(record, points)
    meta = record.meta
    title = (f"{meta['mission']} simulation ({meta['mode']}, {meta['steps']} steps, period "
             f"{meta['period_s'] * 1e3:g} ms): agents' positions per episode")
    if len(chosen) < len(known) and episode is None:
        title += (f"; the first {MAX_PANELS} of {len(known)} episodes (parcat plot DIR "
                  "--episode N -o FILE draws another)")
    return trajectories_figure(paths, record.agent_ids, bounds, unit, title)


def is_ours(head: bytes) -> bool:
    """Whether an SVG's first kilobyte says :func:`write_svg` wrote it (or an earlier
    parcat, whose SVG was written by hand)."""
    return f"<dc:title>{CREATOR}</dc:title>".encode() in head or (
        head.startswith(b'<svg xmlns="http://www.w3.org/2000/svg" width="')
        and b'font-family="sans-serif" font-size="12">' in head.split(b"\n", 1)[0])


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
