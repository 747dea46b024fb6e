"""Charts: plain-text bars and lines on the terminal, SVG/PNG files with matplotlib."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from parcat.errors import ConfigError

WIDTH = 40


def bar_chart(values: Mapping[str, float], width: int = WIDTH) -> str:
    """One labelled bar per value, scaled to the largest."""
    if not values:
        return "(no data)"
    top = max(max(values.values()), 1e-12)
    label_width = max(len(k) for k in values)
    return "\n".join(
        f"{k.rjust(label_width)} | {'#' * max(1, round(v / top * width))} {v:.2f}"
        for k, v in values.items()
    )


def line_chart(series: Mapping[str, Sequence[float]], height: int = 12,
               width: int = 60) -> str:
    """Several series on one plain-text grid (one letter per series), with a legend."""
    clean = {k: [v for v in vs if v is not None and not math.isnan(v)] for k, vs in series.items()}
    points = [v for vs in clean.values() for v in vs]
    if not points:
        return "(no data)"
    low, high = min(points), max(points)
    span = (high - low) or 1.0
    grid = [[" "] * width for _ in range(height)]
    marks = "abcdefghijklmnopqrstuvwxyz"
    legend = []
    for n, (name, values) in enumerate(series.items()):
        mark = marks[n % len(marks)]
        legend.append(f"{mark} = {name}")
        count = max(len(values) - 1, 1)
        for i, v in enumerate(values):
            if v is None or math.isnan(v):
                continue
            x = round(i / count * (width - 1))
            y = height - 1 - round((v - low) / span * (height - 1))
            grid[y][x] = mark
    rows = [f"{high:10.3f} |" + "".join(grid[0])]
    rows += ["           |" + "".join(r) for r in grid[1:-1]]
    rows.append(f"{low:10.3f} |" + "".join(grid[-1]))
    return "\n".join([*rows, "            " + "-" * width, *legend])


def save_chart(path: Path, series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
               xlabel: str, ylabel: str) -> None:
    """Write a line chart with matplotlib (SVG or PNG by suffix).

    Raises:
        ConfigError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError(
            f"writing '{path}' needs matplotlib (pip install matplotlib); "
            "the terminal chart above has the same data"
        ) from exc
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
