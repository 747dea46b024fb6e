"""``parcat eval --each`` and ``--cross``, and ``parcat rank``: run or read them and show
their tables (or JSON/CSV)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from parcat.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    OutputFormat,
    said_interrupted,
    write_csv,
)
from parcat.cli.stdout import user_prints_on_stderr
from parcat.core.jsontext import dumps
from parcat.eval.evaluate import EvalConfig
from parcat.eval.rating_model import RatingModel
from parcat.eval.ratings import ILLEGAL, SideRow
from parcat.eval.replacement import ReplacementResult, value_over_replacement
from parcat.eval.stats import Interval
from parcat.eval.tournament import (
    CrossResult,
    EachResult,
    cross_play,
    evaluate_each,
    plays_against,
)
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import PolicySpec


def tournament_episodes(kind: str, config: EvalConfig, against: PolicySpec | None) -> int:
    """How many episodes ``--each``, ``--cross`` or ``--candidate`` runs (for the progress
    bar; ``--precision`` adds more)."""
    if kind != "each":
        pairs = len(config.policies) ** 2 if kind == "cross" else len(config.policies) + 1
        return len(config.missions) * config.episodes * pairs
    return sum(2 if plays_against(m, against) else 1 for m in config.missions
               ) * config.episodes * len(config.policies)


def run_tournament(kind: str, config: EvalConfig, options: RunOptions, fmt: OutputFormat,
                   output: Path | None, on_result: Any, other: PolicySpec | None = None,
                   precision: tuple[float | None, int] = (None, 10_000),
                   rating: RatingModel = RatingModel.BRADLEY_TERRY) -> int:
    """Run ``--each`` (against ``other``), ``--cross`` (to ``precision``: ``--precision``,
    ``--max-episodes``; ranked by ``rating``) or ``--candidate`` (``other``), print it,
    write ``output`` (JSON); return the exit code."""
    result: EachResult | CrossResult | ReplacementResult
    with user_prints_on_stderr():
        if kind == "each":
            result = evaluate_each(config, options, on_result, config.seed, other)
        elif kind == "cross":
            result = cross_play(config, options, on_result, config.seed, *precision, rating)
        else:
            assert other is not None
            result = value_over_replacement(config, other, options, on_result, config.seed)
    # each/2: "runs" holds a list of documents per policy (two seats against an opponent)
    schemas = {"each": "parcat.each/2", "cross": "parcat.cross/1",
               "replacement": "parcat.replacement/1"}
    document = {"schema": schemas[kind], **result.to_document()}
    if output is not None:
        from parcat.core.atomic import write_text_atomically
        write_text_atomically(output, dumps(document, indent=1) + "\n")
    if fmt is OutputFormat.JSON:
        sys.stdout.write(dumps(document) + "\n")
    elif isinstance(result, EachResult):
        _each_out(result, fmt)
    elif isinstance(result, ReplacementResult):
        _replacement_out(result, fmt)
    else:
        _cross_out(result, fmt)
    if not isinstance(result, ReplacementResult):  # as eval prints its report's
        from parcat.cli.render import stderr_console
        for line in result.warnings:
            stderr_console().print(f"[yellow]warning[/yellow]: {line}", markup=True,
                                   highlight=False, soft_wrap=True)
    if result.interrupted:
        said_interrupted("interrupted: the results so far are shown above (and in --output, "
                         "if given)")
        return EXIT_INTERRUPTED
    return EXIT_FAILED if any(not e.ok for e in result.episodes) else EXIT_OK


def _iv(interval: Interval | None, digits: int = 3) -> str:
    if interval is None or math.isnan(interval.value):
        return "-"
    value, low, high = (round(v, digits) + 0.0 for v in vars(interval).values())  # no -0
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


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
    print("returns per agent: each episode's mean over the policy's agents", file=sys.stderr)
    if any(r.mission == "overall" for r in result.rows):
        print("overall: scores normalised per mission (0: the lowest episode of any policy "
              "there, 1: the highest)", file=sys.stderr)


def _replacement_out(result: ReplacementResult, fmt: OutputFormat) -> None:
    headers = ["mission", "replaced", "episodes", "pool [95% CI]",
               f"with {result.candidate} [95% CI]", "difference [95% CI]"]
    rows = [[r.mission, r.replaced, r.episodes, _iv(r.pool), _iv(r.with_candidate),
             _iv(r.difference)] for r in result.rows]
    if fmt is OutputFormat.CSV:
        write_csv(headers, rows)
        return
    from parcat.cli.render import list_table, stdout_console
    stdout_console().print(list_table(headers, rows))


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
                      "mean return per agent", highlight=False)
        console.print(list_table(
            ["row \\ column", *table.policies],
            [[name, *(f"{c.row.value:.3f} / {c.col.value:.3f}" for c in table.cells[i])]
             for i, name in enumerate(table.policies)]))
    show_ratings(result, fmt)


def show_ratings(result: CrossResult, fmt: OutputFormat) -> None:
    """The ratings and the per-side rows: tables, or one CSV of a row per policy and side."""
    if fmt is OutputFormat.JSON:
        document = result.to_document()
        keys = ("ratings_model", "ratings", "alpharank_model", "alpharank", "sides")
        sys.stdout.write(dumps({k: document[k] for k in keys if k in document}) + "\n")
        return
    if fmt is OutputFormat.CSV:
        _sides_csv(result)
        return
    from parcat.cli.render import list_table, stdout_console
    console = stdout_console()
    masses = result.rating is RatingModel.ALPHARANK
    for table in result.ranking:
        seat = "" if table.seat is None else f"; row side advantage {_iv(table.seat, 0)}"
        what = ("α-Rank mass" if masses else "Bradley–Terry ratings",
                "share of 1, 95% CI" if masses else "Elo points, mean 0, 95% CI")
        console.print(f"{table.mission}: {what[0]} from {table.kind} games ({what[1]}){seat}",
                      highlight=False)
        digits = 2 if masses else 0
        console.print(list_table(
            ["rank", "policy", f"{'mass' if masses else 'rating'} [95% CI]",
             "ahead of next [95% CI]", "P(best)", "games"],
            [[n + 1, r.policy, _iv(r.rating, digits), _iv(r.ahead, digits), f"{r.p_best:.2f}",
              r.games] for n, r in enumerate(table.ratings)]))
    for mission in dict.fromkeys(r.mission for r in result.sides):
        rows = [r for r in result.sides if r.mission == mission]
        names = _side_columns(rows)
        console.print(f"{mission}: per policy and side, against the other policies "
                      "(rates and means [95% CI])", highlight=False)
        console.print(list_table(["policy", "side", "episodes", *names],
                                 [[r.policy, r.side, r.episodes, *_side_values(r, names, True)]
                                  for r in rows]))


def _side_columns(rows: list[SideRow]) -> list[str]:
    outcomes = [k for k in ("win", "draw", "loss") if any(k in r.outcomes for r in rows)]
    illegal = [ILLEGAL] if any(r.illegal_moves is not None for r in rows) else []
    return [*outcomes, *illegal, *dict.fromkeys(k for r in rows for k in r.metrics)]


def _side_values(row: SideRow, names: list[str], text: bool) -> list[Any]:
    values: list[Any] = []
    for name in names:
        if name == ILLEGAL:
            values.append(row.illegal_moves)
            continue
        found = row.outcomes.get(name) or row.metrics.get(name)
        values += ([_iv(found)] if text else [math.nan] * 3 if found is None else
                   [found.value, found.low, found.high])
    return values


def _sides_csv(result: CrossResult) -> None:
    """One row per mission, policy and side, with the policy's rating (or α-Rank mass) on
    that mission."""
    names = _side_columns(result.sides)
    score = "mass" if result.rating is RatingModel.ALPHARANK else "rating"
    header = ["mission", "policy", score, f"{score}_low", f"{score}_high", "p_best", "side",
              "episodes"]
    for name in names:
        header += ([name.replace(" ", "_")] if name == ILLEGAL else
                   [name, f"{name}_low", f"{name}_high"])
    ratings = {(t.mission, r.policy): r for t in result.ranking for r in t.ratings}
    rows = []
    for row in result.sides:
        rating = ratings.get((row.mission, row.policy))
        rated = ([math.nan] * 4 if rating is None else
                 [rating.rating.value, rating.rating.low, rating.rating.high, rating.p_best])
        rows.append([row.mission, row.policy, *rated, row.side, row.episodes,
                     *_side_values(row, names, False)])
    write_csv(header, rows)

