"""Charts on the terminal: plain-text bars, lines and matrices (files: core/figures.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

WIDTH = 40
CHART_FORMATS = {".svg": "an SVG image", ".png": "a PNG image", ".pdf": "a PDF"}
"""What a chart written with ``-o`` can be, by extension (matplotlib writes each)."""


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


def matrix_text(labels: Sequence[str], values: Sequence[Sequence[float]],
                shades: str = " .:-=+*#%@") -> str:
    """A matrix as text: each cell's value and a shade from lowest to highest."""
    flat = [v for row in values for v in row if not math.isnan(v)]
    low, high = (min(flat), max(flat)) if flat else (0.0, 1.0)
    span = (high - low) or 1.0
    width = max(9, *(len(label) for label in labels))
    lines = [" " * width + " | " + " ".join(label[:width].rjust(width) for label in labels)]
    for label, row in zip(labels, values, strict=True):
        cells = []
        for v in row:
            shade = "?" if math.isnan(v) else shades[round((v - low) / span * (len(shades) - 1))]
            cells.append(f"{shade * 2}{v:>{width - 2}.3f}" if not math.isnan(v)
                         else "-".rjust(width))
        lines.append(label[:width].rjust(width) + " | " + " ".join(cells))
    return "\n".join(lines)
