"""``parcat eval --each`` and ``--cross``: run them and show their tables (or JSON/CSV)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from parcat.cli.common import EXIT_FAILED, EXIT_OK, OutputFormat, write_csv
from parcat.cli.stdout import user_prints_on_stderr
from parcat.core.jsontext import dumps
from parcat.eval.evaluate import EvalConfig
from parcat.eval.stats import Interval
from parcat.eval.tournament import CrossResult, EachResult, cross_play, evaluate_each
from parcat.parallel.run_options import RunOptions


def run_tournament(kind: str, config: EvalConfig, options: RunOptions, fmt: OutputFormat,
                   output: Path | None, on_result: Any) -> int:
    """Run ``--each`` or ``--cross``, print it, write ``output`` (JSON); return the exit code."""
    result: EachResult | CrossResult
    with user_prints_on_stderr():
        if kind == "each":
            result = evaluate_each(config, options, on_result, seed=config.seed)
        else:
            result = cross_play(config, options, on_result, seed=config.seed)
    document = {"schema": f"parcat.{kind}/1", **result.to_document()}
    if output is not None:
        from parcat.core.atomic import write_text_atomically
        write_text_atomically(output, dumps(document, indent=1) + "\n")
    if fmt is OutputFormat.JSON:
        sys.stdout.write(dumps(document) + "\n")
    elif isinstance(result, EachResult):
        _each_out(result, fmt)
    else:
        _cross_out(result, fmt)
    return EXIT_FAILED if any(not e.ok for e in result.episodes) else EXIT_OK


def _iv(interval: Interval | None, digits: int = 3) -> str:
    if interval is None or math.isnan(interval.value):
        return "-"
    return (f"{interval.value:.{digits}f} [{interval.low:.{digits}f}, "
            f"{interval.high:.{digits}f}]")


def _each_out(result: EachResult, fmt: OutputFormat) -> None:
    headers = ["mission", "policy", "episodes", "failed", "mean [95% CI]", "IQM [95% CI]",
               f"- {result.baseline} [95% CI]", f"P(> {result.baseline}) [95% CI]"]
    rows = [[r.mission, r.policy, r.episodes, r.failed, _iv(r.mean), _iv(r.iqm),
             _iv(r.difference), _iv(r.improvement, 2)] for r in result.rows]
    if fmt is OutputFormat.CSV:
        write_csv(headers, rows)
        return
    from parcat.cli.render import list_table, stdout_console
    stdout_console().print(list_table(headers, rows))
    if any(r.mission == "overall" for r in result.rows):
        print("overall: scores normalised per mission (0: the lowest episode of any policy "
              "there, 1: the highest)", file=sys.stderr)


def _cross_out(result: CrossResult, fmt: OutputFormat) -> None:
    rows_out: list[list[Any]] = []
    for table in result.tables:
        for i, name in enumerate(table.policies):
            for j, other in enumerate(table.policies):
                cell = table.cells[i][j]
                rows_out.append([table.mission, name, other, cell.episodes, _iv(cell.row),
                                 _iv(cell.col)])
    if fmt is OutputFormat.CSV:
        write_csv(["mission", "row policy", "column policy", "episodes", "row side [95% CI]",
              "column side [95% CI]"], rows_out)
        return
    from parcat.cli.render import list_table, stdout_console
    console = stdout_console()
    for table in result.tables:
        console.print(f"{table.mission}: rows play {', '.join(table.row_agents)}; columns "
                      f"play {', '.join(table.col_agents)}; cell: row side / column side "
                      "mean return", highlight=False)
        console.print(list_table(
            ["row \\ column", *table.policies],
            [[name, *(f"{c.row.value:.3f} / {c.col.value:.3f}" for c in table.cells[i])]
             for i, name in enumerate(table.policies)]))

