"""``parcat bench``: run the benchmark suite, append to the history, compare, chart."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.charts import CHART_FORMATS, bar_chart
from parcat.cli.common import EXIT_FAILED, SummaryFormat, print_json, user_errors, wrote
from parcat.cli.lazy import held_imports
from parcat.core.output_paths import check_output_file, check_output_suffix

if TYPE_CHECKING:
    from parcat.eval.compare import BenchComparison


def bench_command(
    history: Annotated[Path, typer.Option(
        "--history", metavar="FILE", rich_help_panel=opts.OUTPUT,
        help="History file (JSON lines) the record is appended to.")
    ] = Path("bench/history.jsonl"),
    compare: Annotated[bool, typer.Option(
        "--compare", rich_help_panel=opts.RUN, help="Compare with the repeats of the latest "
        "(up to 5) comparable records; exit 1 when a figure is worse past --threshold and "
        "beyond the range of both sides' repeats (judged from 3 earlier records on).")] = False,
    threshold: Annotated[float, typer.Option(
        "--threshold", metavar="FRACTION", rich_help_panel=opts.RUN,
        help="How much worse a figure must get to count as a regression: 0.2 is 1.2 times "
        "worse (a time 1.2 times longer, a throughput 1.2 times lower).")] = 0.2,
    quick: Annotated[bool, typer.Option(
        "--quick", rich_help_panel=opts.RUN, help="Less work a repeat, shorter waits for a "
        "quiet machine (with --repeats 1: a smoke run).")] = False,
    repeats: Annotated[int | None, typer.Option(
        "--repeats", min=1, max=100, metavar="N", rich_help_panel=opts.RUN,
        help="Repeats of each measurement (default 5; a measurement past its time budget "
        "stops after 3). --repeats 1 --quick is a smoke run: it checks that the suite runs, "
        "its figures are not worth comparing.")] = None,
    max_jobs: Annotated[int | None, typer.Option(
        "--max-jobs", metavar="N", rich_help_panel=opts.RUN, help="Measure how eval speeds "
        "up with --jobs 1, 2, ... N (default: every CPU this process may use).")] = None,
    chart: Annotated[Path | None, opts.SHARED["output"].option(
        "FILE", aliases=("--chart",),
        more="A chart of the scaling: .svg, .png or .pdf (needs matplotlib).")] = None,
    fmt: opts.TableOrJson = SummaryFormat.TABLE,
    progress: opts.Progress = True,
) -> None:
    """Measure the fixed suite and append one record to the history.

    Exit codes: 0 measured, 1 --compare found a regression, 2 bad input.
    """
    with held_imports():  # here, not at the top: `parcat bench --help` needs none of them
        from parcat.bench.suite import MEASUREMENTS, append_record, read_history, run_suite
        from parcat.cli.render import progress_bar
        from parcat.eval.compare import check_threshold, compare_bench
    with user_errors():
        check_threshold(threshold)
        _check_outputs(history, chart)
        previous = read_history(history)
    with user_errors(), progress_bar(len(MEASUREMENTS), "bench", enabled=progress) as advance:
        record = run_suite(quick=quick, max_jobs=max_jobs, repeats=repeats,
                           on_measured=advance)
    append_record(history, record)
    comparison = compare_bench(previous, record, threshold) if compare else None
    _print(record, comparison, fmt)
    if chart is not None:
        from parcat.cli.plot_sources import bench_of
        from parcat.core.figures import save_figure
        save_figure(bench_of(record), chart)
        wrote(chart)
    if comparison is not None and comparison.regressions:
        raise typer.Exit(EXIT_FAILED)


def _print(record: dict[str, Any], comparison: BenchComparison | None,
           fmt: SummaryFormat) -> None:
    if fmt is SummaryFormat.JSON:
        print_json({"record": record,
                    "comparison": comparison.to_dict() if comparison else None,
                    "changes": [c.to_dict() for c in comparison.changes] if comparison else []})
        return
    _print_record(record)
    if comparison is not None:
        _print_comparison(comparison)


def _check_outputs(history: Path, chart: Path | None) -> None:
    """Both files may be written, and a chart drawn, before anything is measured."""
    check_output_file(history, "--history")
    if chart is not None:
        check_output_suffix(chart, "--output", CHART_FORMATS)
        check_output_file(chart, "--output")
        from parcat.core.figures import check_matplotlib
        check_matplotlib(chart, "chart")


def _scaling(record: dict[str, Any]) -> dict[int, float]:
    return {int(k.removeprefix("speedup_jobs_")): v["median"]
            for k, v in record["figures"].items() if k.startswith("speedup_jobs_")}


def _print_record(record: dict[str, Any]) -> None:
    from parcat.cli.render import list_table, stdout_console
    console = stdout_console()
    rows = [[name, f"{f['median']:,.3f}", f"{f['low']:,.3f} - {f['high']:,.3f}",
             f"{f['better']} is better", f["unit"]] for name, f in record["figures"].items()]
    console.print(list_table([f"figure (median of {record['repeats']})", "value", "range",
                              "direction", "unit"], rows))
    load = record["load"]
    typer.echo(f"load: other processes used {load['other_cpus']} CPUs on average; load "
               f"average {load['before']['loadavg'][:1]} -> {load['after']['loadavg'][:1]}; "
               f"{load['retried_repeats']} repeats measured again after load; machine speed "
               f"{load['speed'] or 0:,} reference loops/s")
    typer.echo("speedup vs --jobs")
    typer.echo(bar_chart({str(k): v for k, v in _scaling(record).items()}))


def _print_comparison(comparison: BenchComparison) -> None:
    from parcat.cli.render import list_table, stdout_console
    if comparison.incomparable is not None:
        typer.echo(f"nothing comparable: {comparison.incomparable}")
        return
    typer.echo(f"compared with {comparison.against}")
    stdout_console().print(list_table(
        ["figure", "previous (range)", "now (range)", "change", "worse by", "verdict"],
        [[c.figure, f"{c.previous:,.3f} ({c.previous_range[0]:,.3f} - "
          f"{c.previous_range[1]:,.3f})",
          f"{c.current:,.3f} ({c.current_range[0]:,.3f} - {c.current_range[1]:,.3f})",
          f"{c.change:+.1%}", f"x{c.worse_by:.2f}{'*' if c.relative else ''}",
          c.verdict.value.upper() if c.regression else c.verdict.value]
         for c in comparison.changes]))
    if any(c.relative for c in comparison.changes):
        typer.echo("* one process, timed in CPU time: judged relative to the machine's speed "
                   "(a reference loop timed beside each repeat)")
    for note in comparison.notes:
        typer.echo(f"note: {note}")
