"""``parcat compare A.json B.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.common import OutputFormat, print_json, user_errors, write_csv
from parcat.cli.lazy import held_imports


def compare_command(
    a: Annotated[Path, typer.Argument(metavar="A", help="Baseline results JSON (A).")],
    b: Annotated[Path, typer.Argument(metavar="B", help="Candidate results JSON (B).")],
    policies: Annotated[list[str] | None, opts.SHARED["policy"].option(
        more="One: compare the agents it played in both files (default: all agents).")] = None,
    seed: opts.Seed = 0,
    fmt: opts.Format = OutputFormat.TABLE,
) -> None:
    """Difference B − A and P(B > A) per mission and overall, with bootstrap 95% intervals.

    A and B are `parcat eval -o FILE.json` files; the figures are returns per agent, a
    row per mission and overall. A mission whose sides differ has a return row per side
    instead, never one that mixes them, and stays out of overall: roles (evade (pursuer),
    evade (evader)) or a game's players (player_0, player_1). Then per mission and side,
    each other metric both files have: win/draw/loss rates and illegal moves where the game
    has a winner, and every number the environment reports (evade: captured, the capture
    rate; capture_step, the time to capture). -p SPEC: compare the agents that policy
    played in both files, and the sides it played (one -p; default *: all agents). --seed:
    the bootstrap's. JSON and CSV: a row each, with its side (* for all agents) and metric.
    A and B may also be folders of `parcat train --seeds` runs: each group's IQM of its
    runs' last greedy evaluation (mean per agent), with its 95% interval.
    """
    with held_imports():  # here, not at the top: `parcat compare --help` needs none of them
        from parcat.cli.render import list_table, stdout_console
        from parcat.eval.compare import compare_files
    if a.is_dir() and b.is_dir():
        _compare_seeds(a, b, seed or 0, fmt)
        return
    with user_errors():
        policy = opts.one_value(policies, "-p/--policy", "compare") or "*"
        rows = compare_files(a, b, policy, seed=seed or 0)
    if fmt is OutputFormat.JSON:
        print_json([r.to_dict() for r in rows])
        return
    if fmt is OutputFormat.CSV:
        write_csv(["mission", "side", "metric", "episodes_a", "episodes_b", "mean_a", "mean_b",
                   "iqm_a", "iqm_b", "diff", "diff_low", "diff_high", "p_improvement", "p_low",
                   "p_high"],
                  [(r.mission, r.side, r.metric, r.episodes_a, r.episodes_b, r.mean_a, r.mean_b,
                    r.iqm_a, r.iqm_b, r.difference.value, r.difference.low, r.difference.high,
                    r.improvement.value, r.improvement.low, r.improvement.high) for r in rows])
        return
    console = stdout_console()
    # every agent's return, or each side's where sides differ (evade: "evade (pursuer)")
    returns = [r for r in rows if r.metric == "return"]
    console.print(list_table(
        ["mission", "episodes A/B", "mean A", "mean B", "IQM A", "IQM B", "B − A [95% CI]",
         "P(B > A) [95% CI]"],
        [[r.mission if r.side == "*" else f"{r.mission} ({r.side})",
          f"{r.episodes_a}/{r.episodes_b}", f"{r.mean_a:.3f}", f"{r.mean_b:.3f}",
          f"{r.iqm_a:.3f}", f"{r.iqm_b:.3f}", _interval(r.difference, "+.3f"),
          _interval(r.improvement, ".2f")] for r in returns]))
    metrics = [r for r in rows if r not in returns]
    if metrics:
        console.print("per side: each metric's mean over the episodes that side played",
                      highlight=False)
        console.print(list_table(
            ["mission", "side", "metric", "episodes A/B", "mean A", "mean B", "B − A [95% CI]"],
            [[r.mission, r.side, r.metric, f"{r.episodes_a}/{r.episodes_b}", f"{r.mean_a:.3f}",
              f"{r.mean_b:.3f}", _interval(r.difference, "+.3f")] for r in metrics]))


def _compare_seeds(a: Path, b: Path, seed: int, fmt: OutputFormat) -> None:
    """Two folders of training runs (``--seeds``): their final scores, IQM and B − A."""
    from parcat.cli.render import list_table, stdout_console
    from parcat.eval.compare import compare_seeds
    from parcat.train.seeds import final_scores
    with user_errors():
        rows = compare_seeds(final_scores(a), final_scores(b), seed)
    if fmt is not OutputFormat.TABLE:
        print_json([r.to_dict() for r in rows])
        return
    stdout_console().print(list_table(
        ["mission", "seeds A/B", "IQM A [95% CI]", "IQM B [95% CI]", "B − A [95% CI]",
         "P(B > A) [95% CI]"],
        [[r.mission, f"{r.seeds_a}/{r.seeds_b}", _interval(r.iqm_a, ".3f"),
          _interval(r.iqm_b, ".3f"), _interval(r.difference, "+.3f"),
          _interval(r.improvement, ".2f")] for r in rows]))


def _interval(interval: Any, spec: str) -> str:
    return f"{interval.value:{spec}} [{interval.low:{spec}}, {interval.high:{spec}}]"
