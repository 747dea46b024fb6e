"""Report-ready figures with matplotlib, in one style: each ``*_figure`` function returns a
``matplotlib.figure.Figure`` (for tests to inspect) and :func:`save_figure` writes it, the
format by the file's suffix (``.png``, ``.svg``, ``.pdf``).

Intervals are 95%: Student t for an evaluation's mean (as its table prints), a percentile
bootstrap for an IQM and across training runs (seeds), the file's own for ``--each``,
``--cross`` and bench.
"""

from __future__ import annotations

import functools
import math
import textwrap
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np

from parcat.core.errors import ConfigError

STYLE: dict[str, Any] = {
    "figure.dpi": 100, "savefig.dpi": 150, "font.size": 9, "axes.titlesize": 10,
    "axes.labelsize": 9, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
    "axes.spines.right": False, "legend.fontsize": 8, "legend.frameon": False,
    "svg.fonttype": "none",  # titles stay text in an SVG (searchable, and tests read them)
}
"""The one look of every figure parcat writes."""
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
SMOOTHING = 0.6
"""Weight of the past in a curve's smoothed line (TensorBoard's default slider)."""
BOOTSTRAP_REPS = 2000
F = TypeVar("F", bound=Callable[..., Any])


def styled(draw: F) -> F:
    """Draw inside :data:`STYLE` (matplotlib reads its settings as each artist is made)."""
    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import matplotlib
        with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
            return draw(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def check_matplotlib(path: Path, what: str) -> None:
    """``ConfigError`` naming the fix when matplotlib, needed to write ``path``, is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"writing '{path}' needs matplotlib: pip install 'parcat[plot]' (or "
                          f"pip install matplotlib); without -o the {what} is drawn in the "
                          "terminal") from exc


@styled
def save_figure(figure: Any, target: Path | BinaryIO, **options: Any) -> None:
    """Write ``figure`` to ``target`` (the format by its suffix, or ``format=``)."""
    figure.savefig(target, bbox_inches="tight", **options)


def new_figure(panels: int, width: float = 4.2, height: float = 3.2,
               columns: int = 3) -> tuple[Any, list[Any]]:
    """A figure of ``panels`` axes in rows of up to ``columns``."""
    from matplotlib.figure import Figure
    cols = min(panels, columns)
    rows = math.ceil(panels / cols)
    figure = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = figure.subplots(rows, cols, squeeze=False).ravel().tolist()
    for extra in axes[panels:]:
        figure.delaxes(extra)
    return figure, axes[:panels]


def integer_ticks(axis: Any) -> None:
    """Ticks only at whole numbers (steps, jobs, episodes)."""
    from matplotlib.ticker import MaxNLocator
    axis.set_major_locator(MaxNLocator(integer=True))


def wrapped(text: str, width: int = 60) -> str:
    """``text`` broken into lines that fit above a panel."""
    return "\n".join(textwrap.wrap(text, width))


@dataclass(frozen=True)
class Point:
    """One policy's statistic on one mission, with its 95% interval."""

    mission: str
    policy: str
    value: float
    low: float
    high: float
    episodes: int
    agents: tuple[str, ...] = ()
    """The agents the policy played (its label says whose returns these are)."""


@styled
def results_figure(points: Sequence[Point], statistic: str, title: str) -> Any:
    """One panel per mission: each policy's statistic with its 95% interval."""
    missions = list(dict.fromkeys(p.mission for p in points))
    figure, axes = new_figure(len(missions))
    for ax, mission in zip(axes, missions, strict=True):
        mine = [p for p in points if p.mission == mission]
        xs = range(len(mine))
        values = np.array([p.value for p in mine])
        errors = np.array([[p.value - p.low for p in mine], [p.high - p.value for p in mine]])
        for x, p, err in zip(xs, mine, errors.T, strict=True):
            ax.errorbar([x], [p.value], yerr=err.reshape(2, 1), fmt="o", capsize=4,
                        color=COLOURS[x % len(COLOURS)])
            ax.annotate(f"{p.value:.3g}\nn={p.episodes}", (x, p.value), xytext=(8, 0),
                        textcoords="offset points", va="center", fontsize=7)
        ax.set_xticks(list(xs), [_policy_label(p) for p in mine])
        ax.set_xlim(-0.6, len(mine) - 0.2)
        ax.set_title(mission)
        ax.set_ylabel(f"{statistic} return per agent (95% interval)")
        if not np.isfinite(values).any():
            ax.text(0.5, 0.5, "no finished episode", transform=ax.transAxes, ha="center")
    figure.suptitle(wrapped(title, 90))
    return figure


def _policy_label(point: Point) -> str:
    if not point.agents:
        return point.policy
    if len(point.agents) > 2:  # seats rotate between episodes: the count, not a tangle
        return f"{point.policy}\n({len(point.agents)} agents)"
    return f"{point.policy}\n({', '.join(point.agents)})"


@dataclass(frozen=True)
class Curve:
    """One series of a training curve: per epoch, against environment steps."""

    name: str
    steps: np.ndarray
    values: np.ndarray
    low: np.ndarray | None = None
    """The band's lower edge (the epoch's min return, or the bootstrap's)."""
    high: np.ndarray | None = None
    band: str = ""
    """What the band is, for the legend."""
    raw: bool = True
    """Whether ``values`` are one run's (drawn faint, with a smoothed line over them)."""


@dataclass(frozen=True)
class Marks:
    """What a training curve marks besides its series."""

    evaluation: Sequence[Curve] = ()
    """The greedy evaluation's return per agent, at the checkpoints."""
    best: Sequence[tuple[float, str]] = ()
    """The best checkpoint, or each side's: its environment step and what it is."""


@styled
def training_figure(curves: Sequence[Curve], field: str, title: str,
                    marks: Marks = Marks()) -> Any:
    """Curves against environment steps: faint raw values, a smoothed line, the band, the
    evaluation return and the best checkpoint."""
    figure, (ax,) = new_figure(1, 7.0, 4.2)
    for n, curve in enumerate(curves):
        colour = COLOURS[n % len(COLOURS)]
        known = np.isfinite(curve.values)  # epochs with a value (evaluations, finished
        steps = curve.steps[known]          # episodes) joined, not left as lone points
        if curve.low is not None and curve.high is not None:
            ax.fill_between(steps, curve.low[known], curve.high[known], color=colour,
                            alpha=0.15, linewidth=0, label=f"{curve.name} {curve.band}")
        if curve.raw:
            ax.plot(steps, curve.values[known], color=colour, alpha=0.35, linewidth=1)
            ax.plot(steps, smoothed(curve.values[known]), color=colour, linewidth=2,
                    label=f"{curve.name} (smoothed)")
        else:
            ax.plot(steps, curve.values[known], color=colour, linewidth=2, label=curve.name)
    for n, curve in enumerate(marks.evaluation):
        ax.plot(curve.steps, curve.values, "s--", color=COLOURS[n % len(COLOURS)],
                markersize=5, linewidth=1, label=f"{curve.name} evaluation return")
    for (step, label), style in zip(marks.best, [":", "-.", "--", (0, (1, 4))] * 4,
                                    strict=False):
        ax.axvline(step, color="k", linestyle=style, linewidth=1.2, label=label)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(field.replace("_", " ") + (" per agent" if field.startswith("reward") else ""))
    integer_ticks(ax.xaxis)
    values = np.concatenate([c.values for c in curves]) if curves else np.array([])
    finite = values[np.isfinite(values)]
    if finite.size and np.all(finite == np.round(finite)):
        integer_ticks(ax.yaxis)
        if finite.max() - finite.min() < 2:  # else the locator falls back to fractions
            ax.set_ylim(finite.min() - 1, finite.max() + 1)
    ax.set_title(wrapped(title, 90))
    ax.legend(loc="best")
    return figure


def smoothed(values: np.ndarray, weight: float = SMOOTHING) -> np.ndarray:
    """An exponential moving average, debiased at the start (TensorBoard's); NaN (an epoch
    with no finished episode) keeps the last value."""
    out = np.full(len(values), np.nan)
    average, total = 0.0, 0.0
    for i, v in enumerate(values):
        if math.isfinite(v):
            average = weight * average + (1 - weight) * v
            total = weight * total + (1 - weight)
        if total:
            out[i] = average / total
    return out


def across_runs(values: np.ndarray, statistic: str, seed: int = 0,
                reps: int = BOOTSTRAP_REPS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step, the statistic over runs (``values``: steps × runs) and its 95% percentile
    bootstrap interval (runs resampled with replacement)."""
    pick = np.random.default_rng(seed).integers(0, values.shape[1], (reps, values.shape[1]))
    samples = _statistic(values[:, pick], statistic)  # steps × reps
    with warnings.catch_warnings():  # a step no run finished an episode by stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanpercentile(samples, [2.5, 97.5], axis=1)
    return _statistic(values, statistic), low, high


def _statistic(values: np.ndarray, statistic: str) -> np.ndarray:
    """Mean or IQM over the last axis (NaN where every value is NaN)."""
    x = np.sort(values, axis=-1)  # NaN sort last
    if statistic == "iqm":
        cut = int(0.25 * x.shape[-1])
        x = x[..., cut: x.shape[-1] - cut]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmean(x, axis=-1))


@styled
def bench_figure(jobs: Sequence[int], speedups: Sequence[tuple[float, float, float]],
                 title: str, note: str) -> Any:
    """Measured speedup (median and range of repeats) per ``--jobs`` with ideal scaling."""
    figure, (ax,) = new_figure(1, 5.5, 4.0)
    median = np.array([s[0] for s in speedups])
    errors = np.array([[s[0] - s[1] for s in speedups], [s[2] - s[0] for s in speedups]])
    ax.plot(jobs, jobs, "--", color="#7f7f7f", label="ideal (speedup = jobs)")
    ax.errorbar(jobs, median, yerr=errors, fmt="o-", capsize=4, color=COLOURS[0],
                label="measured (median, range of repeats)")
    for x, y in zip(jobs, median, strict=True):
        ax.annotate(f"x{y:.2f}", (x, y), xytext=(6, -10), textcoords="offset points",
                    fontsize=7)
    ax.set_xticks(list(jobs))
    ax.set_xlabel("--jobs (worker processes)")
    ax.set_ylabel("speedup vs --jobs 1")
    ax.set_title(wrapped(title, 70))
    ax.text(0.0, -0.2, wrapped(note, 95), transform=ax.transAxes, fontsize=7, va="top")
    ax.legend(loc="upper left")
    return figure


@dataclass(frozen=True)
class CrossSide:
    """One side's view of a cross-play table."""

    name: str
    values: np.ndarray
    low: np.ndarray
    high: np.ndarray


@styled
def cross_figure(policies: Sequence[str], sides: Sequence[CrossSide], episodes: np.ndarray,
                 title: str) -> Any:
    """A heat map per side: each cell's mean return per agent, its 95% interval and its
    episodes; rows are the row side's policy, columns the column side's."""
    size = 1.6 + 1.1 * len(policies)
    figure, axes = new_figure(len(sides), size + 1.2, size, columns=2)
    for ax, side in zip(axes, sides, strict=True):
        image = ax.imshow(side.values, cmap="viridis")
        ticks = range(len(policies))
        ax.set_xticks(ticks, policies, rotation=30, ha="right")
        ax.set_yticks(ticks, policies)
        ax.grid(False)
        for (i, j), v in np.ndenumerate(side.values):
            text = "-" if math.isnan(v) else (f"{v:.2f}\n[{side.low[i, j]:.2f}, "
                                              f"{side.high[i, j]:.2f}]\nn={episodes[i, j]}")
            r, g, b, _ = image.cmap(image.norm(v))
            dark = 0.299 * r + 0.587 * g + 0.114 * b > 0.55  # a light cell: dark text
            ax.text(j, i, text, ha="center", va="center", fontsize=7,
                    color="k" if dark else "w")
        ax.set_xlabel("column side's policy")
        ax.set_ylabel("row side's policy")
        ax.set_title(wrapped(side.name, 45))
        bar = figure.colorbar(image, ax=ax, shrink=0.8)
        bar.set_label("mean return per agent")
    figure.suptitle(wrapped(title, 90))
    return figure


@dataclass(frozen=True)
class Trajectory:
    """Every agent's path in one episode: ``points`` of shape ``(T, N, 2)``."""

    episode: int
    points: np.ndarray


@styled
def trajectories_figure(paths: Sequence[Trajectory], agents: Sequence[str],
                        bounds: tuple[float, float], unit: str, title: str) -> Any:
    """One panel per episode: each agent's path from a hollow circle (start) to a filled one
    (end), on the arena's axes."""
    figure, axes = new_figure(len(paths), 3.6, 3.6, columns=4)
    for ax, path in zip(axes, paths, strict=True):
        for i, agent in enumerate(agents):
            xy, colour = path.points[:, i], COLOURS[i % len(COLOURS)]
            ax.plot(xy[:, 0], xy[:, 1], color=colour, linewidth=1.3, label=agent)
            ax.plot(*xy[0], "o", markerfacecolor="none", color=colour)
            ax.plot(*xy[-1], "o", color=colour)
        ax.set_xlim(*bounds)
        ax.set_ylim(*bounds)
        ax.set_aspect("equal")
        ax.set_title(f"episode {path.episode} ({len(path.points)} steps)")
        ax.set_xlabel(f"x ({unit})")
        ax.set_ylabel(f"y ({unit})")
    axes[0].legend(loc="upper right", title="o start, ● end", title_fontsize=7)
    figure.suptitle(wrapped(title, 100))
    return figure


def columns_of(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, list[float]]:
    """Per name, the per-row numbers of ``key`` (a number, or a dict of them by name; NaN
    where missing)."""
    series: dict[str, list[float]] = {}
    for n, row in enumerate(rows):
        value = row.get(key)
        items = value.items() if isinstance(value, dict) else [(key, value)]
        for name, v in items:
            number = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
            series.setdefault(name, [math.nan] * n).append(math.nan if number is None else number)
        for values in series.values():
            values.extend([math.nan] * (n + 1 - len(values)))
    return series
