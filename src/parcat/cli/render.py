"""Rendering for people: rich tables on a terminal, plain text otherwise; progress bars."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from parcat.eval.report import Summary


def stdout_console() -> Console:
    """Console for results: colour and boxes only on a terminal (elsewhere wide enough that
    no cell is cut)."""
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=200,
                                                       no_color=True)


def stderr_console() -> Console:
    """Console for progress, warnings and errors."""
    return Console(stderr=True, highlight=False)


def number(value: Any, digits: int = 3) -> str:
    """A figure for a table or a progress line; ``-`` for none (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def bar_columns() -> tuple[Any, ...]:
    """The columns of every progress bar: what, bar, done/total, elapsed, remaining."""
    # here: a run whose stderr is no terminal never draws one (rich.progress: ~15 ms)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn())


def _table(title: str | None = None, **options: Any) -> Table:
    """A table with boxes of plain ASCII off a terminal."""
    return Table(title=title, title_justify="left",
                 box=box.SIMPLE_HEAVY if sys.stdout.isatty() else box.ASCII2, **options)


def summary_table(summaries: Sequence[Summary], title: str | None = None) -> Table:
    """The per-mission, per-policy statistics as a table."""
    table = _table(title)
    sided = any(s.side for s in summaries)  # a mission whose agents have several roles
    for name in ("mission", "policy", *(("side",) if sided else ())):
        table.add_column(name)
    odd = any(s.non_finite for s in summaries)
    retried = any(s.retries for s in summaries)
    for name in ("episodes", "failed", *(("non-finite",) if odd else ()),
                 "mean", "std", "min", "max", "95% CI", *(("retries",) if retried else ())):
        table.add_column(name, justify="right")
    for s in summaries:
        ci = "-" if s.episodes == 0 else f"[{number(s.ci95_low)}, {number(s.ci95_high)}]"
        table.add_row(s.mission, s.policy, *((s.side,) if sided else ()), str(s.episodes),
                      str(s.failed),  # "*": all agents
                      *((str(s.non_finite),) if odd else ()), number(s.mean), number(s.std),
                      number(s.min), number(s.max), ci, *((str(s.retries),) if retried else ()),
                      style="bold" if s.policy == "*" else None)
    return table


def key_value_table(rows: Sequence[tuple[str, Any]], title: str | None = None) -> Table:
    """Two columns: a name and its value."""
    table = _table(title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(key, str(value))
    return table


def list_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A plain listing table."""
    table = _table()
    for header in headers:
        table.add_column(header)
    for row in rows:
        table.add_row(*(str(c) for c in row))
    return table


@contextmanager
def progress_bar(total: int, description: str, enabled: bool = True) -> Iterator[Any]:
    """A progress bar on stderr; yields ``advance(n=1)``. Silent when stderr is no terminal."""
    console = stderr_console()
    if not enabled or not console.is_terminal:
        yield lambda n=1: None
        return
    from rich.progress import Progress

    with Progress(*bar_columns(), console=console, transient=False) as progress:
        task_id = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task_id, n)


def terminal_picture(picture: Any, columns: int, rows: int = 10_000) -> str:
    """An RGB array as lines of ``▀`` in 24-bit colour that fit ``columns`` (and 80) by
    ``rows`` lines: each character shows two pixels, the upper as its colour, the lower as its
    background."""
    import numpy as np
    height, width = picture.shape[:2]
    cols = max(1, min(columns - 1, 80, width, rows * 2 * width // height))
    pixel_rows = max(2, round(height * cols / width / 2) * 2)
    ys = np.arange(pixel_rows) * height // pixel_rows
    xs = np.arange(cols) * width // cols
    small = picture[ys][:, xs]
    lines = []
    for top, bottom in zip(small[0::2], small[1::2], strict=True):
        cells = [f"\x1b[38;2;{a[0]};{a[1]};{a[2]}m\x1b[48;2;{b[0]};{b[1]};{b[2]}m▀"
                 for a, b in zip(top.tolist(), bottom.tolist(), strict=True)]
        lines.append("".join(cells) + "\x1b[0m")
    return "\n".join(lines)
