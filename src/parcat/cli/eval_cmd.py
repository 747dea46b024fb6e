"""``parcat eval``: evaluate policies on missions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from parcat.cli import options as opts
from parcat.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    OutputFormat,
    print_json,
    user_errors,
)
from parcat.cli.render import progress_bar, stderr_console, stdout_console, summary_table
from parcat.errors import ConfigError
from parcat.evaluate import EvalReport, evaluate, evaluate_to_precision
from parcat.parallel.planner import ExecutorKind, PolicyStrategy
from parcat.report import summarize, summary_csv
from parcat.trace import write_trace


def eval_command(
    missions: opts.Missions,
    policies: opts.Policies = None,
    episodes: opts.Episodes = 10,
    seed: opts.Seed = 0,
    overrides: opts.Overrides = None,
    jobs: opts.Jobs = None,
    executor: opts.Executor = ExecutorKind.AUTO,
    parallel_policy: opts.ParallelPolicy = False,
    strategy: opts.Strategy = PolicyStrategy.AUTO,
    action_timeout_ms: opts.ActionTimeout = None,
    gpus: opts.Gpus = None,
    start_method: opts.StartMethod = None,
    retries: opts.Retries = 1,
    episode_timeout: opts.EpisodeTimeout = None,
    fail_fast: opts.FailFast = False,
    backend: opts.Backend = None,
    address: opts.Address = None,
    trace: opts.Trace = None,
    fmt: Annotated[
        OutputFormat | None,
        typer.Option("--format", "-f", help="stdout format (default: table)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write results here: .json (full) or .csv (summary)."),
    ] = None,
    precision: Annotated[
        float | None,
        typer.Option("--precision", help="Add episodes until each mission's 95% CI half-width "
                     "is below this."),
    ] = None,
    max_episodes: Annotated[
        int, typer.Option("--max-episodes", help="Cap for --precision.")
    ] = 10_000,
    resume: Annotated[
        bool, typer.Option("--resume", help="Keep the finished episodes in --output; run the rest.")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Progress bar on stderr.")] = True,
) -> None:
    """Evaluate policies on missions and print per-mission, per-policy statistics.

    Exit codes: 0 all episodes finished, 1 some episode failed, 2 bad input, 130 interrupted.
    """
    with user_errors():
        config, options = opts.build(
            missions, policies, episodes, seed, overrides, jobs, executor, parallel_policy,
            strategy, action_timeout_ms, gpus, start_method, trace is not None, retries,
            episode_timeout, fail_fast, backend, address,
        )
        if resume and output is None:
            raise ConfigError("--resume needs --output FILE (the file to continue)")
        if resume and precision is not None:
            raise ConfigError("--resume and --precision cannot be combined yet; rerun "
                              "--precision (its batches are deterministic)")
    total = len(config.missions) * config.episodes
    with user_errors(), progress_bar(total, "episodes", enabled=progress) as advance:
        if precision is not None:
            report = evaluate_to_precision(config, precision, options, max_episodes=max_episodes,
                                           on_result=lambda _: advance(), output=output)
        else:
            report = evaluate(config, options, on_result=lambda _: advance(), output=output,
                              resume=resume)
    if trace is not None:
        write_trace(trace, report.trace_events)
    show_report(report, fmt or OutputFormat.TABLE)
    raise typer.Exit(exit_code(report))


def show_report(report: EvalReport, fmt: OutputFormat) -> None:
    """Print the results on stdout and the failures on stderr."""
    if fmt is OutputFormat.JSON:
        print_json(report.to_document())
    elif fmt is OutputFormat.CSV:
        sys.stdout.write(summary_csv(summarize(report.episodes)))
    else:
        plan = report.plan
        where = "" if plan is None else (
            f" on {plan.episode_workers} {plan.executor.value} worker(s), agents "
            f"{plan.strategy.value}" + (f" x{plan.policy_workers}" if plan.policy_workers else "")
        )
        title = f"{len(report.episodes)} episodes in {report.elapsed_s:.2f} s{where}"
        stdout_console().print(summary_table(summarize(report.episodes), title=title))
    err = stderr_console()
    for episode in report.failed:
        assert episode.error is not None
        agent = f", agent {episode.error.agent}" if episode.error.agent else ""
        err.print(
            f"[red]failed[/red]: mission {episode.mission}, episode {episode.episode_index}"
            f"{agent} (seed {episode.seed}): {episode.error.type}: {episode.error.message}",
            markup=True,
            highlight=False,
        )
    if report.status == "interrupted":
        err.print("interrupted: the results so far are shown above (and in --output, if given)")


def exit_code(report: EvalReport) -> int:
    """0 when every episode finished, 1 when some failed, 130 when interrupted."""
    if report.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_FAILED if report.failed else EXIT_OK
