"""The eval job: missions × episodes → tasks → executor → report."""

from __future__ import annotations

import contextlib
import math
import pickle
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import numpy as np

from parcat.core.errors import ConfigError, NoteWarning, PolicyError, WriteError
from parcat.core.limits import MAX_EPISODE_PARAMETERS, require_int
from parcat.core.output_paths import check_output_file, check_output_folder
from parcat.envs.missions import Mission, is_foreign, load_mission
from parcat.episode.probe import EnvCheck, check_in_a_worker
from parcat.episode.replay import claim_folder as claim_replay_folder
from parcat.episode.replay import file_name as replay_file_name
from parcat.episode.replay import write_index
from parcat.episode.results import EpisodeResult
from parcat.episode.rollout import EpisodeTask, TaskList
from parcat.eval.report import ALL_POLICIES, make_document, summarize
from parcat.eval.results_file import ResultsWriter, check_journal, load_finished
from parcat.ipc.process import SHUTTING_DOWN
from parcat.ipc.shm import remove_stale_blocks
from parcat.parallel.executors import make_executor
from parcat.parallel.planner import ExecutorKind, Plan
from parcat.parallel.run_options import RunOptions, plan_run
from parcat.policies.builtin import mlp_parameters
from parcat.policies.specs import PolicySpec, check_builds, check_weights, parse_policy_spec

ResultCallback = Callable[[EpisodeResult], None]
PlanCallback = Callable[[Plan], None]


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate; built by the CLI or by user code."""

    missions: tuple[Mission, ...]
    """Missions to play, in order; names must be unique."""
    policies: tuple[PolicySpec, ...]
    """Policy specs assigned to agents by weight."""
    episodes: int = 10
    seed: int = 0
    """Base seed: every episode's seeds derive from it."""

    def __post_init__(self) -> None:
        if not self.missions:
            raise ConfigError("at least one mission is needed (-m NAME)")
        _require_unique("mission", [m.name for m in self.missions])
        if not self.policies:
            raise ConfigError("at least one policy is needed (-p NAME)")
        _require_unique("policy", [p.name for p in self.policies])
        check_weights(self.policies)
        require_int("--episodes", self.episodes, high=None)
        require_int("--seed", self.seed, 0, None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready ``config`` section of the results document."""
        return {
            "missions": [{"name": m.name, "env": m.env, "params": dict(m.params),
                          "max_steps": m.max_steps} for m in self.missions],
            "policies": [{"name": p.name, "target": p.target, "kwargs": dict(p.kwargs),
                          "weight": p.weight} for p in self.policies],
            "episodes": self.episodes,
            "seed": self.seed,
        }


def _require_unique(kind: str, names: list[str]) -> None:
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{kind} '{duplicates[0]}' is given more than once")


@dataclass
class EvalReport:
    """The outcome of an eval run, in task order."""

    config: EvalConfig
    episodes: list[EpisodeResult] = field(default_factory=list)
    status: str = "complete"
    """``complete``, ``failed`` (some episode failed) or ``interrupted``."""
    options: RunOptions = field(default_factory=RunOptions)
    plan: Plan | None = None
    started: str = ""
    """ISO-8601 start time."""
    elapsed_s: float = 0.0
    trace_events: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, EnvCheck] = field(default_factory=dict)
    """What the start-of-run check found about each mission's environment."""
    results: dict[int, EpisodeResult] = field(default_factory=dict)
    """Finished episodes by their position among the run's tasks (while it runs)."""
    write_error: str | None = None
    """Why the results file could not be written at the end (the results are complete)."""
    worker_processes: int = 0
    """Worker processes that came up (the plan's may not: a short run ends before them)."""
    resumed: int = 0
    """Finished episodes ``resume`` found in the results file (not run again)."""
    _clock: float = field(default=0.0, repr=False)
    _document: tuple[Any, dict[str, Any]] | None = field(default=None, repr=False)

    def update(self, status: str) -> None:
        """Bring ``episodes``, ``elapsed_s`` and ``status`` up to date."""
        self.episodes = [self.results[i] for i in sorted(self.results)]
        self.elapsed_s = time.perf_counter() - self._clock if self._clock else 0.0
        self.status = status

    def snapshot(self, status: str) -> dict[str, Any]:
        """:meth:`update`, then the JSON document."""
        self.update(status)
        return self.to_document()

    @property
    def warnings(self) -> list[str]:
        """One line per mission whose results are not reproducible."""
        lines = unreproducible(self.checks)
        odd = Counter(e.mission for e in self.episodes if e.warnings)
        lines += [f"mission '{name}': {count} episode(s) with non-finite returns or odd "
                  "observations (see \"warnings\" in the results); non-finite returns are "
                  "left out of the statistics (column non_finite)"
                  for name, count in odd.items()]
        return lines

    @property
    def non_finite(self) -> list[EpisodeResult]:
        """Finished episodes where some agent's return is NaN or infinite."""
        return [e for e in self.episodes
                if e.ok and not all(math.isfinite(a.reward) for a in e.agents)]

    @property
    def failed(self) -> list[EpisodeResult]:
        """Episodes that did not finish cleanly."""
        return [e for e in self.episodes if not e.ok]

    def to_document(self) -> dict[str, Any]:
        """The JSON results document (a new dict each call; made once per state: the
        results file and the JSON on stdout share it)."""
        key = (id(self.episodes), len(self.episodes), self.status, self.elapsed_s)
        if self._document is None or self._document[0] != key:
            timing = {"started": self.started, "elapsed_s": self.elapsed_s}
            execution = self.options.to_dict()
            if self.plan is not None:
                execution["plan"] = plan_to_dict(self.plan)
            self._document = (key, make_document(
                self.config.to_dict(), self.episodes, self.status, timing, execution,
                {name: check.to_dict() for name, check in self.checks.items()},
            ))
        return dict(self._document[1])


def unreproducible(checks: Mapping[str, EnvCheck]) -> list[str]:
    """One warning line per mission whose environment ignores its seed."""
    return [f"mission '{name}': {check.note}; its results are not reproducible"
            for name, check in checks.items() if check.reproducible is False]


def make_config(missions: Sequence[str], policies: Sequence[str], episodes: int = 10,
                seed: int = 0, overrides: dict[str, Any] | None = None,
                trust_code: bool = False) -> EvalConfig:
    """Build and validate an :class:`EvalConfig` from names and specs, as the CLI does."""
    loaded = tuple(load_mission(m, overrides) for m in missions)
    specs = tuple(parse_policy_spec(p, trust_code) for p in policies)
    config = EvalConfig(loaded, specs, episodes, seed)
    check_policies(config)
    return config


def check_policies(config: EvalConfig) -> None:
    """Build every policy once for every agent of every mission, before any episode runs
    (in a worker when some policy is from outside parcat).

    Raises:
        PolicyError: a policy cannot be built for some agent, or an episode's networks
            would be too big together.
        WorkerError: a policy's constructor ended its process, crashed or hung.
    """
    mlps = [spec for spec in config.policies if spec.target == "mlp"]
    for mission in config.missions:
        # checked before any is built: each agent gets its own network
        try:
            total = sum(max((mlp_parameters(agent, **spec.kwargs) for spec in mlps), default=0)
                        for agent in mission.agents())
        except PolicyError as exc:
            raise PolicyError(f"{exc} (mission '{mission.name}')") from exc
        if total > MAX_EPISODE_PARAMETERS:
            raise PolicyError(
                f"mlp: the {len(mission.agents())} agents of mission '{mission.name}' would have "
                f"{total:,} network parameters together, more than the limit of "
                f"{MAX_EPISODE_PARAMETERS:,}; use a smaller width or depth")
    for mission in config.missions:
        try:
            check_builds([(spec, mission, agent) for agent in mission.agents()
                          for spec in config.policies])
        except PolicyError as exc:
            raise PolicyError(f"{exc} (mission '{mission.name}')") from exc


def make_tasks(config: EvalConfig, replay_dir: Path | None = None,
               seating: tuple[int, ...] | None = None) -> TaskList:
    """Missions × episodes, made as they are asked for (:class:`TaskList`)."""
    return TaskList(config.missions, config.policies, config.seed, config.episodes,
                    replay_dir=None if replay_dir is None else str(replay_dir), seating=seating)


def write_replay_index(folder: Path, episodes: Sequence[EpisodeResult]) -> None:
    """``folder/index.json``: every episode of the run whose replay file is there."""
    write_index(folder, [
        {"file": name, "mission": result.mission, "episode_index": result.episode_index,
         "seed": result.seed, "steps": result.steps, "status": result.status.value,
         "returns": {a.agent_id: a.reward for a in result.agents}}
        for result in episodes
        if (folder / (name := replay_file_name(result.mission, result.episode_index))).is_file()])


def unpicklable(config: EvalConfig) -> str | None:
    """The first mission or policy of ``config`` that cannot be sent to another process
    (named, with why), or ``None``."""
    named: list[tuple[str, Any]] = [(f"mission '{m.name}'", m) for m in config.missions]
    named += [(f"policy '{p.name}'", p) for p in config.policies]
    for name, value in named:
        try:
            pickle.dumps(value)
        except Exception as exc:  # whatever pickling user objects raises
            return f"{name} cannot be sent to worker processes ({type(exc).__name__}: {exc})"
    return None


def inline_if_unpicklable(config: EvalConfig, options: RunOptions,
                          on_warning: Callable[[str], None] | None = None) -> RunOptions:
    """``options``, or, when a mission or policy cannot be pickled, options that run
    everything in this process, with one warning naming it."""
    if options.executor is ExecutorKind.INLINE and not options.parallel_policy:
        return options
    why = unpicklable(config)
    if why is None:
        return options
    message = f"{why}: running every episode inline in this process"
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    if on_warning is not None:
        on_warning(message)
    return replace(options, jobs=1, executor=ExecutorKind.INLINE, parallel_policy=False,
                   address=None)  # an action deadline still holds: policy threads here


class StopRun(Exception):
    """Raised from a result callback to end a run early (``--fail-fast``)."""


def evaluate(config: EvalConfig, options: RunOptions | None = None,
             on_result: ResultCallback | None = None, on_plan: PlanCallback | None = None,
             output: Path | None = None, resume: bool = False,
             keep: dict[tuple[str, int], EpisodeResult] | None = None,
             on_warning: Callable[[str], None] | None = None, replay_dir: Path | None = None,
             seating: tuple[int, ...] | None = None) -> EvalReport:
    """Run every episode of ``config`` where ``options`` and the planner say.

    Args:
        options: Where and how (jobs, executor, agent-level strategy); never the results.
        on_result: Called with each episode's result as it finishes.
        output: Results file, rewritten as episodes finish and at the end.
        resume: Keep the finished episodes already in ``output`` and run only the rest.
        keep: Episodes already run (by ``(mission, episode_index)``); only the rest run.
        on_warning: Told when a write of ``output`` failed mid-run and will be retried.
        replay_dir: Record every episode into this folder, with an ``index.json``.
        seating: The policy index of each agent; default: drawn by weight per episode.

    Raises:
        OutputError: ``output`` or ``replay_dir`` cannot be written (before anything runs).
    """
    options = inline_if_unpicklable(config, options or RunOptions(), on_warning)
    remove_stale_blocks()
    with _claim_outputs(config, output, replay_dir):
        report = EvalReport(config, options=options)
        try:  # parcat's own environments are checked by its tests
            report.checks = {m.name: check_in_a_worker(m, options.start_method_name,
                                                       options.episode_timeout_s)
                             if is_foreign(m) else EnvCheck(True, False, "")
                             for m in config.missions}
        except KeyboardInterrupt:
            if replay_dir is not None:  # the folder is this run's: its index says so
                write_replay_index(replay_dir, [])
            raise
        tasks = make_tasks(config, replay_dir, seating)
        leaky = {name for name, check in report.checks.items() if check.leaks_state}
        tasks = tasks.with_missions([  # a reset that leaks state: a fresh env per episode
            replace(m, fresh_env=True) if m.name in leaky and m.fresh_env is None else m
            for m in tasks.missions])
        done = load_finished(output, config.to_dict(), tasks) if output and resume else {}
        report.resumed = len(done)
        todo = _still_to_run(report, tasks, {**done, **(keep or {})})
        if output and resume:  # said before the run, so a long one shows what it skips
            warnings.warn(f"--resume: {len(done)} finished episode(s) found in {output}; "
                          f"{len(todo)} to run", NoteWarning, stacklevel=2)
        return _run(report, options, tasks, todo, on_result, on_plan, output, resume,
                    on_warning, replay_dir)


def _run(report: EvalReport, options: RunOptions, tasks: TaskList, todo: Sequence[int],
         on_result: ResultCallback | None, on_plan: PlanCallback | None, output: Path | None,
         resume: bool, on_warning: Callable[[str], None] | None, replay_dir: Path | None,
         ) -> EvalReport:
    """Plan and run the episodes ``todo`` of ``tasks``, writing the outputs."""
    config = report.config
    report.plan = plan_run(config.missions, config.policies, len(todo), options)
    if on_plan is not None:
        on_plan(report.plan)
    writer = None if output is None else ResultsWriter(
        output, report.snapshot, config.to_dict(), resume=resume, on_warning=on_warning)
    report.started = datetime.now(timezone.utc).isoformat()
    report._clock = time.perf_counter()

    def finished(index: int, result: EpisodeResult) -> None:
        report.results[int(todo[index])] = result
        if on_result is not None:
            on_result(result)
        if writer is not None:
            writer.episode_finished(result)
        if options.fail_fast and not result.ok:
            raise StopRun

    status = _execute(report.plan, tasks.subset(todo), finished, report)
    _close(report, status, replay_dir, writer)
    return report


def _claim_outputs(config: EvalConfig, output: Path | None,
                   replay_dir: Path | None) -> contextlib.AbstractContextManager[object]:
    """Refuse bad output paths before anything runs, when they cost nothing; hold the
    replay folder's lock until the run ends (one run records into it at a time)."""
    if output is not None:
        check_output_file(output, "--output")
        check_journal(output)
    if replay_dir is None:
        return contextlib.nullcontext()
    check_output_folder(replay_dir, "--replay-dir")
    return claim_replay_folder(replay_dir, [m.name for m in config.missions], config.episodes)


def _still_to_run(report: EvalReport, tasks: TaskList,
                  done: dict[tuple[str, int], EpisodeResult]) -> Sequence[int]:
    """Put the episodes already run into ``report``; the positions of the rest."""
    for key, result in done.items():
        if (position := tasks.position(key)) is not None:
            report.results[position] = result
    if not report.results:
        return range(len(tasks))
    return cast(Sequence[int], np.array(
        [i for i in range(len(tasks)) if i not in report.results], np.int64))


def _close(report: EvalReport, status: str, replay_dir: Path | None,
           writer: ResultsWriter | None) -> None:
    """The run's final status, replay index and results file."""
    report.update(status)
    if status == "complete" and report.failed:
        report.status = "failed"
    if replay_dir is not None:
        write_replay_index(replay_dir, report.episodes)
    if writer is not None:
        try:
            writer.finish(report.status)
        except WriteError as exc:
            report.write_error = str(exc)


def _execute(
    plan: Plan, tasks: Sequence[EpisodeTask],
    finished: Callable[[int, EpisodeResult], None], report: EvalReport,
) -> str:
    """Run the tasks; return ``complete``, ``failed`` (stopped early) or ``interrupted``."""
    executor = make_executor(plan)
    status = "complete"
    try:
        executor.run(tasks, finished)
    except StopRun:
        status = "failed"
    except KeyboardInterrupt:
        SHUTTING_DOWN.set()
        status = "interrupted"
    finally:
        started = len(getattr(executor, "worker_pids", list)())
        report.worker_processes = max(report.worker_processes, started)
        executor.close(force=status != "complete")
        report.trace_events = executor.trace_events()
    return status


def evaluate_to_precision(config: EvalConfig, precision: float, options: RunOptions | None = None,
                          batch: int | None = None, max_episodes: int = 10_000,
                          on_result: ResultCallback | None = None, output: Path | None = None,
                          on_warning: Callable[[str], None] | None = None,
                          replay_dir: Path | None = None,
                          on_plan: PlanCallback | None = None) -> EvalReport:
    """Add episodes in batches until every mission's 95% CI half-width is below ``precision``.

    The first batch is ``config.episodes``; each further one adds ``batch`` (default: the
    same number) to every mission. Batches are fixed and episodes seeded by index, so the
    stopping point and the results are deterministic for a seed.
    """
    if not precision > 0:
        raise ConfigError(f"--precision must be > 0, got {precision}")
    step = batch or config.episodes
    kept: dict[tuple[str, int], EpisodeResult] = {}
    episodes, began, started = config.episodes, time.perf_counter(), ""
    while True:
        current = replace(config, episodes=episodes)
        report = evaluate(current, options, on_result, on_plan, output=output, keep=kept,
                          on_warning=on_warning, replay_dir=replay_dir)
        started = started or report.started
        kept = {(e.mission, e.episode_index): e for e in report.episodes}
        wide = [s.mission for s in summarize(report.episodes) if s.policy == ALL_POLICIES
                and not (s.episodes > 1 and (s.ci95_high - s.ci95_low) / 2 < precision)]
        if not wide or episodes >= max_episodes or report.status != "complete":
            # the whole run, every batch, not the last one
            report.started, report.elapsed_s = started, time.perf_counter() - began
            return report
        episodes = min(max_episodes, episodes + step)


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """JSON-ready plan (``parcat plan --format json`` and results' ``execution.plan``)."""
    return {
        "jobs": plan.jobs,
        "executor": plan.executor.value,
        "episode_workers": plan.episode_workers,
        "episodes_per_worker": plan.episodes_per_worker,
        "lockstep": plan.lockstep,
        "concurrency": plan.concurrency,
        "strategy": plan.strategy.value,
        "policy_workers": plan.policy_workers,
        "busy_processes": plan.busy_processes,
        "blas_threads": plan.blas_threads,
        "spin": plan.spin,
        "gpus": list(plan.gpus),
        "local_lane": plan.local_lane,
        "free_cpus": plan.free_cpus,
        "reasons": list(plan.reasons),
        "notes": list(plan.notes),
    }
