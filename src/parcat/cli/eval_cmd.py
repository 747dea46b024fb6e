"""``parcat eval``: evaluate policies on missions."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from parcat.cli import options as opts
from parcat.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    OutputFormat,
    said_interrupted,
    user_errors,
    wrote,
)
from parcat.cli.flag_config import settings_command
from parcat.cli.lazy import held_imports
from parcat.cli.stdout import user_prints_on_stderr
from parcat.core import runlock
from parcat.core.errors import ConfigError
from parcat.core.limits import require_int
from parcat.core.output_paths import check_output_file, check_output_folder, check_output_suffix
from parcat.eval.rating_model import RatingModel

if TYPE_CHECKING:
    from parcat.eval.evaluate import EvalConfig, EvalReport
    from parcat.parallel.planner import Plan
    from parcat.parallel.run_options import RunOptions
    from parcat.policies.specs import PolicySpec

OUTPUT_FORMATS = {".json": "the full results", ".csv": "the summary"}
"""What ``-o`` writes, by extension."""


@settings_command(opts.EvalSettings)
def eval_command(s: opts.EvalSettings) -> None:
    """Evaluate policies on missions and print per-mission, per-policy statistics.

    Exit codes: 0 all episodes finished, 1 some episode failed or had a non-finite
    return, 2 bad input, 130 interrupted.
    """
    with held_imports():  # here, not at the top: `parcat eval --help` needs none of them
        from parcat.cli.render import progress_bar
        from parcat.eval.evaluate import evaluate, evaluate_to_precision
    with user_errors():
        config, options = _checked(s)
        tournament = _tournament(s)
        lock = _lock(s.output)
    if tournament is not None:
        from parcat.cli.tournament_view import run_tournament, tournament_episodes
        with user_errors():
            against = _against(s, config)
            candidate = None if s.candidate is None else _candidate(s.candidate, s, config)
        total = tournament_episodes(tournament, config, against)
        with user_errors(), lock, progress_bar(total, "episodes", enabled=s.progress) as step:
            code = run_tournament(tournament, config, options, s.format, s.output,
                                  lambda _: step(), against or candidate,
                                  (s.precision, s.max_episodes), s.rating)
        if s.output is not None and code != EXIT_INTERRUPTED:
            wrote(s.output)
        raise typer.Exit(code)
    total = len(config.missions) * config.episodes
    with user_errors(), lock, progress_bar(total, "episodes", enabled=s.progress) as step, \
            user_prints_on_stderr():
        run: dict[str, Any] = {"on_result": lambda _: step(), "output": s.output,
                               "on_warning": _warn, "replay_dir": s.replay_dir,
                               "on_plan": _plan_notes()}
        report = evaluate(config, options, resume=s.resume, **run) if s.precision is None \
            else evaluate_to_precision(config, s.precision, options,
                                       max_episodes=s.max_episodes, **run)
    raise typer.Exit(_finish(report, s))


def _checked(s: opts.EvalSettings) -> tuple[EvalConfig, RunOptions]:
    """What runs, every flag checked before anything runs."""
    require_int("--max-episodes", s.max_episodes)
    if s.output is not None:
        check_output_suffix(s.output, "--output", OUTPUT_FORMATS)
    config, options = s.args(trace=s.trace).build(on_note=_note)
    if s.resume and s.output is None:
        raise ConfigError("--resume needs --output FILE (the file to continue)")
    if s.resume and s.precision is not None:
        raise ConfigError("--resume and --precision cannot be combined yet; rerun "
                          "--precision (its batches are deterministic)")
    if s.output is not None:
        check_output_file(s.output, "--output")
    if s.trace is not None:
        check_output_file(s.trace, "--trace")
    if s.replay_dir is not None:
        check_output_folder(s.replay_dir, "--replay-dir")
    return config, options


def _finish(report: EvalReport, s: opts.EvalSettings) -> int:
    from parcat.core.trace import write_trace
    write_failures = [] if report.write_error is None else [report.write_error]
    written = [(s.output, "")] if s.output is not None and not write_failures else []
    if s.replay_dir is not None:
        written.append((s.replay_dir, f"{len(report.episodes)} replays and index.json"))
    if s.trace is not None:
        try:
            write_trace(s.trace, report.trace_events)
            written.append((s.trace, ""))
        except OSError as exc:
            write_failures.append(f"could not write --trace '{s.trace}' ({exc.strerror})")
    show_report(report, s.format)
    for path, what in written if report.status != "interrupted" else ():  # its line says
        wrote(path, what)
    for failure in write_failures:
        # the results are on stdout above: only the file is missing
        print(f"parcat: error: {failure}", file=sys.stderr)
    return EXIT_FAILED if write_failures and exit_code(report) == EXIT_OK else exit_code(report)


def _lock(output: Path | None) -> contextlib.AbstractContextManager[object]:
    """One writer per results file: its lock, held until the run ends."""
    if output is None:
        return contextlib.nullcontext()
    return runlock.acquire(runlock.lock_beside(output), f"--output '{output}'",
                           "give another --output")


def _tournament(s: opts.EvalSettings) -> str | None:
    """``each``, ``cross``, ``replacement`` or ``None``; refuses what they cannot be combined
    with."""
    if s.against is not None and not s.each:
        raise ConfigError("--against SPEC is the opponent of --each: give --each too")
    if s.rating is not RatingModel.BRADLEY_TERRY and not s.cross:
        raise ConfigError(f"--rating {s.rating.value} ranks a --cross population: give "
                          "--cross too")
    flags = {"each": "--each", "cross": "--cross", "replacement": "--candidate"}
    kinds = [kind for kind, on in (("each", s.each), ("cross", s.cross),
                                   ("replacement", s.candidate is not None)) if on]
    if not kinds:
        return None
    if len(kinds) > 1:
        raise ConfigError(f"{' and '.join(flags[k] for k in kinds)} are different ways to "
                          "compare: give one")
    flag = flags[kinds[0]]
    for name in ("resume", "precision", "replay_dir", "trace"):
        if name == "precision" and s.cross:
            continue  # --cross spends episodes where the ranking is uncertain
        if getattr(s, name) is not None and getattr(s, name) is not False:
            raise ConfigError(f"{flag} cannot be combined with --{name.replace('_', '-')} yet")
    if s.output is not None and s.output.suffix.lower() != ".json":
        raise ConfigError(f"{flag} writes its results as JSON: give -o FILE.json")
    return kinds[0]


def _against(s: opts.EvalSettings, config: EvalConfig) -> PolicySpec | None:
    """``--against``'s opponent, checked on every mission; says which missions play one."""
    from parcat.eval.tournament import DEFAULT_AGAINST, check_each
    from parcat.policies.specs import parse_policy_spec
    against = None if s.against is None else parse_policy_spec(s.against, s.trust_code)
    duels = check_each(config, against) if s.each else []
    if duels:
        name = DEFAULT_AGAINST if against is None else against.name
        why = "turn-based: " if against is None else ""
        _note(f"parcat: note: {', '.join(m.name for m in duels)}: {why}--each plays every "
              f"policy against '{name}' in both seats on the same seeds, not against itself "
              "(--against SPEC names another)")
    return against


def _candidate(text: str, s: opts.EvalSettings, config: EvalConfig) -> PolicySpec:
    """``--candidate``'s policy, built for every mission before anything runs."""
    from parcat.eval.evaluate import check_policies
    from parcat.policies.specs import parse_policy_spec
    candidate = parse_policy_spec(text, s.trust_code)
    check_policies(replace(config, policies=(candidate,)))
    return candidate


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _plan_notes() -> Callable[[Plan], None]:
    """Says on stderr, once each, where a plan differs from what the flags asked."""
    said: set[str] = set()

    def say(plan: Plan) -> None:
        for note in plan.notes:
            if note not in said:
                said.add(note)
                print(f"parcat: note: {note}", file=sys.stderr)
    return say


def _warn(message: str) -> None:
    from parcat.cli.render import stderr_console
    stderr_console().print(f"[yellow]warning[/yellow]: {message}", markup=True, highlight=False,
                           soft_wrap=True)


def show_report(report: EvalReport, fmt: OutputFormat) -> None:
    """Print the results on stdout and the failures on stderr."""
    from parcat.cli.render import stderr_console, stdout_console, summary_table
    from parcat.eval.report import dumps_document, summarize, summary_csv
    if fmt is OutputFormat.JSON:
        sys.stdout.write(dumps_document(report.to_document()))
    elif fmt is OutputFormat.CSV:
        sys.stdout.write(summary_csv(summarize(report.episodes)))
    else:
        title = header(report)
        stdout_console().print(summary_table(summarize(report.episodes), title=title))
    err = stderr_console()
    for episode in report.failed:
        assert episode.error is not None
        agent = f", agent {episode.error.agent}" if episode.error.agent else ""
        err.print(f"[red]failed[/red]: mission {episode.mission}, episode "
                  f"{episode.episode_index}{agent} (seed {episode.seed}): {episode.error.type}: "
                  f"{episode.error.message}", markup=True, highlight=False)
    for warning in report.warnings:
        err.print(f"[yellow]warning[/yellow]: {warning}", markup=True, highlight=False)
    if report.status == "interrupted":
        said_interrupted("interrupted: the results so far are shown above (and in --output, "
                         "if given)")


def header(report: EvalReport) -> str:
    """The results table's title: how many episodes of what, how long, where they ran (the
    workers that came up, not the plan's), and that the figures are returns per agent."""
    count, missions = len(report.episodes), report.config.missions
    what = missions[0].name if len(missions) == 1 else f"{len(missions)} missions"
    found = (f" ({report.resumed} found in --output, {count - report.resumed} run now)"
             if report.resumed else "")
    return (f"{count} episode{'' if count == 1 else 's'} of {what}{found} in "
            f"{report.elapsed_s:.2f} s{_where(report)}; returns per agent")


def _where(report: EvalReport) -> str:
    """Where the episodes ran, in words: ``, one at a time in this process``."""
    plan = report.plan
    if plan is None:
        return ""
    at_once = "one at a time" if plan.episodes_per_worker == 1 else \
        f"{plan.episodes_per_worker} at a time"
    kind, workers = plan.executor.value, report.worker_processes
    if kind == "ray":
        where = f" on {plan.episode_workers} Ray worker(s), {at_once} each"
    elif kind == "thread":
        where = f" on {plan.episode_workers} threads of this process"
    elif workers:
        here = " and in this process" if plan.local_lane else ""
        where = f" on {workers} worker process{'es' if workers > 1 else ''}{here}, {at_once} each"
    else:
        where = f", {at_once} in this process"
    if plan.policy_workers:
        where += f"; agents' actions by {plan.policy_workers} {plan.strategy.value} worker(s)"
    return where


def exit_code(report: EvalReport) -> int:
    """0: every episode finished with finite returns; 1: some did not; 130: interrupted."""
    if report.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_FAILED if report.failed or report.non_finite else EXIT_OK
