"""``parcat compare A.json B.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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

    A and B are `parcat eval -o FILE.json` files; the figures are returns per agent. --seed:
    the bootstrap's.
    """
    with held_imports():  # here, not at the top: `parcat compare --help` needs none of them
        from parcat.cli.render import list_table, stdout_console
        from parcat.eval.compare import compare, load_scores
    with user_errors():
        policy = opts.one_value(policies, "-p/--policy", "compare") or "*"
        rows = compare(load_scores(a, policy), load_scores(b, policy), seed=seed or 0)
    if fmt is OutputFormat.JSON:
        print_json([r.to_dict() for r in rows])
        return
    if fmt is OutputFormat.CSV:
        write_csv(["mission", "episodes_a", "episodes_b", "mean_a", "mean_b", "iqm_a", "iqm_b",
                   "diff", "diff_low", "diff_high", "p_improvement", "p_low", "p_high"],
                  [(r.mission, r.episodes_a, r.episodes_b, r.mean_a, r.mean_b, r.iqm_a, r.iqm_b,
                    r.difference.value, r.difference.low, r.difference.high,
                    r.improvement.value, r.improvement.low, r.improvement.high) for r in rows])
        return
    table = list_table(
        ["mission", "episodes A/B", "mean A", "mean B", "IQM A", "IQM B", "B − A [95% CI]",
         "P(B > A) [95% CI]"],
        [[r.mission, f"{r.episodes_a}/{r.episodes_b}", f"{r.mean_a:.3f}", f"{r.mean_b:.3f}",
          f"{r.iqm_a:.3f}", f"{r.iqm_b:.3f}",
          f"{r.difference.value:+.3f} [{r.difference.low:+.3f}, {r.difference.high:+.3f}]",
          f"{r.improvement.value:.2f} [{r.improvement.low:.2f}, {r.improvement.high:.2f}]"]
         for r in rows],
    )
    stdout_console().print(table)
