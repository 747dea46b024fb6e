"""``parcat sim``: run a real-time simulation (or its sequential twin) and evaluate it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.common import (
    EXIT_INTERRUPTED,
    SummaryFormat,
    print_json,
    said_interrupted,
    user_errors,
    wrote,
)
from parcat.cli.flag_config import Settings, settings_command
from parcat.cli.render import (
    key_value_table,
    list_table,
    progress_bar,
    stderr_console,
    stdout_console,
)
from parcat.cli.stdout import user_prints_on_stderr
from parcat.core.settings import parse_overrides
from parcat.sim import SimMode, SimProgress, load_sim_config, run_sim, summarize
from parcat.sim.config import FLAG_KEYS, SimConfig


@dataclass(frozen=True)
class SimSettings(Settings):
    """Everything ``parcat sim`` is told (the flags given go on top of its YAML)."""

    config: Annotated[Path, opts.SHARED["config"].option(
        more="The simulation: mission, agents and their cycle_time, rate, iterations.")
    ] = Path("configs/sim.yaml")
    mode: Annotated[SimMode, typer.Option(
        "--mode", rich_help_panel=opts.RUN, help="parallel: every agent in its own process, "
        "in real time; sequential: one process, simulated time (the reference to compare "
        "with).")] = SimMode.PARALLEL
    fast: Annotated[bool, typer.Option(
        "--fast", rich_help_panel=opts.RUN, help="With --mode parallel: step the environment "
        "as fast as it goes instead of at the YAML's rate (agents keep their cycle_time).")
    ] = False
    iters: Annotated[int | None, typer.Option(
        "--iters", metavar="N", rich_help_panel=opts.RUN,
        help="Environment steps (default: the YAML's).")] = None
    seed: opts.Seed = None
    output: Annotated[str | None, opts.SHARED["output"].option("DIR", more=(
        "A folder: record.npz and summary.json ('': none; default: the YAML's)."))] = None
    render: Annotated[bool | None, typer.Option(
        "--render/--no-render", rich_help_panel=opts.OUTPUT, help="A live line a second on "
        "stderr, and trajectories.svg in the output folder (default: the YAML's).")] = None
    format: opts.TableOrJson = SummaryFormat.TABLE
    set: opts.Overrides = None
    progress: opts.Progress = True
    trust_code: opts.TrustCode = False


@settings_command(SimSettings, flag_keys=False)
def sim_command(s: SimSettings) -> None:
    """Simulate a mission in real time, each agent at its own cycle_time, and evaluate it.

    Exit codes: 0 done, 1 an agent or the environment failed, 2 bad input, 130 interrupted.
    """
    with user_errors():
        cfg = load_sim_config(s.config, parse_overrides(s.set or []), s.trust_code,
                              s.given_of(FLAG_KEYS))
    with user_errors(), _progress(cfg, s.mode, s.progress) as on_progress, \
            user_prints_on_stderr():
        record = run_sim(cfg, s.mode, fast=s.fast, on_progress=on_progress)
    summary = summarize(record)
    if s.format is SummaryFormat.JSON:
        print_json(summary)
    else:
        show_summary(summary, record.meta["wall_s"])
    if summary["interrupted"]:
        said_interrupted(f"interrupted after {summary['steps']} of {cfg.iters} steps")
        raise typer.Exit(EXIT_INTERRUPTED)


@contextmanager
def _progress(cfg: SimConfig, mode: SimMode,
              enabled: bool) -> Iterator[Callable[[SimProgress], None]]:
    """A live line per second with ``render``, else a progress bar."""
    if cfg.render:
        err = stderr_console()
        requested = 1.0 / cfg.period

        def line(p: SimProgress) -> None:
            err.print(f"sim {mode.value}: step {p.step}/{p.iters}  episode {p.episode}  "
                      f"{p.rate_hz:.1f} steps/s (requested {requested:.1f})", highlight=False)

        yield line
        return
    with progress_bar(cfg.iters, f"sim {mode.value}", enabled=enabled) as advance:
        done = [0]

        def bar(p: SimProgress) -> None:
            advance(p.step - done[0])
            done[0] = p.step

        yield bar


def show_summary(summary: dict[str, Any], wall_s: float) -> None:
    """Print the mission metrics, the environment's timing and the agents' latency."""
    console = stdout_console()
    fast = " (fast)" if summary["fast"] else ""
    console.print(f"{summary['mission']} · {summary['mode']}{fast} · {summary['steps']} steps "
                  f"in {wall_s:.2f} s", highlight=False)
    metrics = [(k, _fmt(v)) for k, v in summary["mission_metrics"].items()]
    console.print(key_value_table(metrics, title="mission"))
    env = summary["env"]
    console.print(key_value_table([
        ("rate steps/s (achieved of requested)",
         f"{_fmt(env['achieved_rate_hz'])} of {_fmt(env['requested_rate_hz'])}"),
        ("step interval ms (mean / p95 / max)",
         _slash(env, "interval_mean_ms", "interval_p95_ms", "interval_max_ms")),
        ("lateness ms (p95 / max)", _slash(env, "lateness_p95_ms", "lateness_max_ms")),
        ("step cost ms (mean)", _fmt(env["step_cost_mean_ms"])),
    ], title="environment"))
    agents = summary["agents"]
    # two tables of ~100 columns, not one of 170 that a 120-column terminal wraps cell by cell
    console.print(list_table(
        ["agent", "policy", "kind", "cycle ms (req / got)", "cycles", "missed",
         "default steps"],
        [[a["agent"], a["policy"], a["kind"],
          f"{_fmt(a['requested_cycle_s'], 1e3)} / {_fmt(a['achieved_cycle_s'], 1e3)}",
          a["cycles"], a["missed_cycles"], a["default_steps"]] for a in agents]))
    console.print(list_table(
        ["agent", "action age steps (mean / p95 / max)", "age ms (mean / p95)",
         "compute ms (mean / max)"],
        [[a["agent"], _slash(a, "age_steps_mean", "age_steps_p95", "age_steps_max"),
          _slash(a, "age_ms_mean", "age_ms_p95"), _slash(a, "compute_ms_mean", "compute_ms_max")]
         for a in agents]))
    for path in summary["files"] if not summary["interrupted"] else ():  # one line says it
        wrote(path)


def _slash(values: dict[str, Any], *keys: str) -> str:
    return " / ".join(_fmt(values[key]) for key in keys)


def _fmt(value: Any, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) or scale != 1.0:
        value = float(value) * scale
        return f"{value:.3f}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)
