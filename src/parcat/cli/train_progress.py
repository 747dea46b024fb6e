"""``parcat train``'s progress: in a terminal a progress line and the latest epoch redrawn in
place (one :class:`rich.live.Live`); elsewhere (a log) one plain line per epoch, flushed."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from parcat.cli.render import bar_columns, number
from parcat.train.best import TOTAL, side_label
from parcat.train.epoch_stats import EpochStats

ShowEpoch = Callable[[EpochStats], None]


def interrupted_line(done: int, epochs: int, checkpoint: str, run: str) -> str:
    """What an interrupted run says on stderr: where it stopped and how to go on."""
    from parcat.policies.checkpoint import read_manifest
    try:
        kept = f"its checkpoint (epoch {int(read_manifest(checkpoint)['epoch'])}) is in {run}"
    except Exception:
        return (f"parcat: interrupted after epoch {done} of {epochs}; no checkpoint was "
                f"written yet: run the command again to start over")
    return (f"parcat: interrupted after epoch {done} of {epochs}; {kept}; to continue, run "
            f"the same command with -o {run} --resume")


def _per_agent(stats: EpochStats) -> list[tuple[str, str]]:
    """(agent, ``mean [min, max]``) for every agent."""
    return [(agent, f"{number(mean)} [{number(stats.reward_min.get(agent))}, "
                    f"{number(stats.reward_max.get(agent))}]")
            for agent, mean in stats.reward.items()]


def _evaluation(stats: EpochStats) -> list[tuple[str, str]]:
    """(label, value) of the greedy evaluation, when the epoch had one: per agent (a mean
    over the episodes), their sum over agents, and the best so far (``RUN/best``) of each
    side (:func:`best_line`)."""
    total = stats.eval_return.get(TOTAL, math.nan)
    if math.isnan(total):
        return []
    agents = [(f"eval {agent} (mean)", number(value))
              for agent, value in stats.eval_return.items() if agent != TOTAL]
    return [*agents, ("eval total (sum over agents)", number(total)),
            *((f"best {side} ({side_label(side)})", best_line(best))
              for side, best in stats.best.items())]


def best_line(best: Mapping[str, Any]) -> str:
    """``X at epoch N``, with ``, on M more episodes Y [95% CI low, high]`` where more
    episodes confirmed it (``-``: no best yet); ``best``: a side's in ``EpochStats.best``."""
    if not isinstance(best.get("return"), (int, float)) or math.isnan(best["return"]):
        return "-"
    more = best.get("mean")
    confirmed = "" if not isinstance(more, (int, float)) or math.isnan(more) else (
        f", on {int(best['episodes'])} more episodes {number(more)} [95% CI "
        f"{number(best['low'])}, {number(best['high'])}]")
    return f"{number(best['return'])} at epoch {int(best['epoch'])}{confirmed}"


def epoch_line(stats: EpochStats, epochs: int) -> str:
    """One epoch as one line of plain text."""
    rewards = " ".join(f"{agent}={text}" for agent, text in _per_agent(stats))
    losses = " ".join(f"{name}={number(loss, 4)}" for name, loss in stats.loss.items()) or "-"
    evaluation = "".join(f"; {label} {value}" for label, value in _evaluation(stats))
    return (f"epoch {stats.epoch}/{epochs} episodes {stats.episodes} reward {rewards} "
            f"length {number(stats.episode_length, 1)} steps {stats.total_env_steps} "
            f"epsilon {number(stats.epsilon)} loss {losses} "
            f"{stats.env_steps_per_s:.0f} steps/s time {stats.time_s:.1f}s{evaluation}")


def epoch_table(stats: EpochStats, epochs: int) -> Table:
    """The latest epoch's metrics, for the live display."""
    table = Table(title=f"epoch {stats.epoch}/{epochs}", title_justify="left",
                  show_header=False, box=None, padding=(0, 2))
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("episodes finished", str(stats.episodes))
    for agent, text in _per_agent(stats):
        table.add_row(f"return {agent}", Text(f"{text}  (mean [min, max])"))
    table.add_row("episode length", number(stats.episode_length, 1))
    table.add_row("env steps", f"{stats.total_env_steps:,} ({stats.env_steps_per_s:,.0f}/s)")
    table.add_row("epsilon", number(stats.epsilon))
    for name, loss in stats.loss.items():
        table.add_row(f"loss {name}", number(loss, 4))
    for label, value in _evaluation(stats):
        table.add_row(label, value)
    return table


@contextmanager
def epoch_progress(epochs: int, done: int, to_stderr: bool,
                   live: bool = True) -> Iterator[ShowEpoch]:
    """Show each epoch as it ends; yields the function the trainer calls with it.

    ``done``: epochs done before (a resumed run); ``to_stderr``: stdout holds ``-f json``'s
    document; without ``live`` the epochs are plain lines on stdout (none with ``to_stderr``).
    """
    if not live and to_stderr:
        yield lambda stats: None
        return
    # taken now: while the trainer runs, sys.stdout is stderr (user code's prints go there)
    stream = sys.stderr if to_stderr else sys.stdout
    console = Console(file=stream, highlight=False)
    if not live or not console.is_terminal:
        def write(stats: EpochStats) -> None:
            stream.write(epoch_line(stats, epochs) + "\n")
            stream.flush()

        yield write
        return
    progress = Progress(*bar_columns(), console=console)
    task = progress.add_task("epochs", total=epochs, completed=done)
    latest: list[Any] = [Text("the first epoch is collecting…")]
    with Live(console=console, get_renderable=lambda: Group(progress, latest[0]),
              refresh_per_second=4):
        def show(stats: EpochStats) -> None:
            latest[0] = epoch_table(stats, epochs)
            progress.advance(task)

        yield show
