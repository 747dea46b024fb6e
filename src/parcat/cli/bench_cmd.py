"""``parcat bench``: run the benchmark suite, append to the history, compare, chart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parcat.cli.charts import bar_chart, save_chart
from parcat.cli.common import EXIT_FAILED, OutputFormat, print_json, user_errors
from parcat.cli.lazy import held_imports
from parcat.outputs import check_output_file


def bench_command(
    history: Annotated[Path, typer.Option(help="History file (JSON lines).")] = Path(
        "bench/history.jsonl"
    ),
    compare: Annotated[
        bool, typer.Option("--compare", help="Compare with the previous record; exit 1 on a "
                           "regression past --threshold.")
    ] = False,
    threshold: Annotated[float, typer.Option(help="Relative change that counts as a "
                                             "regression.")] = 0.2,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer repeats (smoke runs).")] = False,
    max_jobs: Annotated[int | None, typer.Option(help="Scale episodes over --jobs 1..N.")] = None,
    chart: Annotated[Path | None, typer.Option(help="Write the scaling chart (SVG/PNG, needs "
                                               "matplotlib).")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f")] = OutputFormat.TABLE,
) -> None:
    """Measure the fixed suite and append one record to the history."""
    with held_imports():  # here, not at the top: `parcat bench --help` needs none of them
        from parcat.bench import append_record, compare_records, read_history, run_suite
        from parcat.cli.render import list_table, stdout_console
    with user_errors():
        check_output_file(history, "--history")
        if chart is not None:
            check_output_file(chart, "--chart")
        previous = read_history(history)
    record = run_suite(quick=quick, max_jobs=max_jobs)
    append_record(history, record)
    # compare like with like: the same suite version, run length and machine size
    alike = [r for r in previous if r.get("suite_version") == record["suite_version"]
             and r.get("quick") == record["quick"]
             and r.get("machine", {}).get("cpus") == record["machine"]["cpus"]]
    changes = compare_records(alike[-1], record, threshold) if alike and compare else []
    if fmt is OutputFormat.JSON:
        print_json({"record": record, "changes": [vars(c) for c in changes]})
    else:
        figures = record["figures"]
        rows = [[k, f"{v:,.3f}"] for k, v in figures.items()]
        stdout_console().print(list_table(["figure", "value"], rows))
        scaling = {k.removeprefix("speedup_jobs_"): v for k, v in figures.items()
                   if k.startswith("speedup_jobs_")}
        typer.echo("speedup vs --jobs")
        typer.echo(bar_chart(scaling))
        if changes:
            stdout_console().print(list_table(
                ["figure", "previous", "now", "change", "regression"],
                [[c.figure, f"{c.previous:,.3f}", f"{c.current:,.3f}", f"{c.relative:+.1%}",
                  "YES" if c.regression else ""] for c in changes]))
    if chart is not None:
        with user_errors():
            scaling_x = [int(k.removeprefix("speedup_jobs_")) for k in record["figures"]
                         if k.startswith("speedup_jobs_")]
            save_chart(chart, {"speedup": ([float(x) for x in scaling_x],
                                           [record["figures"][f"speedup_jobs_{x}"]
                                            for x in scaling_x])},
                       "--jobs", "speedup vs 1 job")
    if any(c.regression for c in changes):
        raise typer.Exit(EXIT_FAILED)
