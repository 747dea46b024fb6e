"""``parcat train``: collect experience in environment workers, train one learner per agent."""

# No `from __future__ import annotations`: TrainSettings is made by make_dataclass, whose
# __init__ (which Typer reads) resolves no names, so every field type is an object.
import time
import typing
from collections.abc import Mapping
from dataclasses import field, fields, make_dataclass, replace
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
)
from parcat.cli.flag_config import Settings, set_mapping, settings_command
from parcat.cli.render import stderr_console
from parcat.cli.stdout import user_prints_on_stderr
from parcat.cli.train_progress import best_line, epoch_progress, interrupted_line
from parcat.core.errors import ConfigError, RunError, brief
from parcat.core.settings import LEARNER_PREFIX, parse_overrides, split_learner_settings
from parcat.train.best import TOTAL, read_best, side_label
from parcat.train.config import LoggerKind, TrainConfig
from parcat.train.run_dir import RunDirChoice, claim_run_dir, free_path
from parcat.train.runs import BEST
from parcat.train.seeds import (
    SeedRun,
    parse_seeds,
    run_seeds,
    schedule,
    seed_configs,
    split_jobs,
)
from parcat.train.selfplay import SelfPlayTrainer, make_trainer
from parcat.train.trainer import Trainer, TrainReport
from parcat.train.tuned import tuned_config

RENAMED = "learner updates per learner per epoch"
"""What ``train_steps``, the old name of ``gradient_steps``, counted."""
LAYOUT = frozenset({"jobs", "env_workers"})
"""Two ways to lay out a run: a flag given for either replaces the file's both keys."""


class _TrainFile(Settings):
    """How ``parcat train`` reads its ``-c`` file (its fields: TrainConfig's keys, and more)."""

    FILE_KEYS = ("overrides",)

    @classmethod
    def from_file(cls, label: str, data: dict[str, Any], values: Mapping[str, Any],
                  given: frozenset[str]) -> dict[str, Any]:
        """``overrides`` and ``learner``'s options go into ``set`` (``learner.KEY``), its
        class into ``learner``; ``--learner`` naming another class drops its options."""
        if "train_steps" in data:
            raise ConfigError(f"{label}: key 'train_steps' is now 'gradient_steps' ({RENAMED}); "
                              "rename it")
        if given & LAYOUT:
            data = {k: v for k, v in data.items() if k not in LAYOUT}
        if "epochs" in given:  # the budget the command line gives wins over the file's
            data.pop("total_steps", None)
        overrides, learner = (_mapping(label, key, data.pop(key, None))
                              for key in ("overrides", "learner"))
        name = learner.pop("class", None)
        if "learner" in given and values["learner"] != (name or "dqn"):
            learner = {}  # written for another learner
        elif name is not None:
            data["learner"] = name
        sets = {**overrides, **{LEARNER_PREFIX + k: v for k, v in learner.items()}}
        if sets:
            data["set"] = {**sets, **set_mapping(label, data.get("set") or {})}
        return data


    @classmethod
    def default_config(cls, values: Mapping[str, Any]) -> Path | None:
        """``-m MISSION`` alone: the shipped config tuned for it, if there is one."""
        missions = values.get("mission") or []
        return tuned_config(missions[0], values.get("learner")) if len(missions) == 1 else None


def _mapping(label: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping | None):
        raise ConfigError(f"{label}: key '{key}' must be a mapping, got {brief(value)}")
    return {str(k): v for k, v in (value or {}).items()}


CLI_FIELDS: dict[str, Any] = {
    "mission": Annotated[list[str] | None, opts.SHARED["mission"].option(
        more="One mission (default: goal_tasks).")],
    "seed": opts.Seed,
    "jobs": Annotated[int | None, opts.SHARED["jobs"].option(
        more="When given, the planner lays out --env-workers and --train-threads within it.")],
    "learner": Annotated[str | None, typer.Option(
        metavar="NAME", rich_help_panel=opts.RUN, help="Learner: dqn (the default), ppo, or "
        "module:Class (the YAML's learner.class).")],
    "run_dir": Annotated[str, opts.SHARED["output"].option(
        "DIR", aliases=("--run-dir",),
        more="A run directory (default: runs/MISSION): checkpoints, metrics, RUN/best.")],
    "loggers": Annotated[list[LoggerKind] | None, typer.Option(
        "--logger", metavar="KIND", rich_help_panel=opts.OUTPUT, help="Where epoch metrics "
        "go (repeatable): jsonl, csv, tensorboard (RUN/tensorboard; pip install "
        "'parcat\\[tensorboard]'), wandb. A metrics file is always written.")],
    "backend": opts.Backend,
    "address": opts.Address,
}
"""TrainConfig's keys whose flag is declared here: shared, or of another type or spelling
(the others' come from their fields' metadata)."""
NO_DEFAULT = ("mission", "learner", "loggers")
"""Flags whose value is another type than their key's: ``None`` until given (or in a file)."""
DECLS = {"shared_learner": ("--shared-learner/--independent",)}
PANELS = {**dict.fromkeys(("env_workers", "envs_per_worker", "mode", "train_interval",
                           "parallel_training", "train_threads"), opts.PARALLEL),
          **dict.fromkeys(("checkpoint_every", "metrics_format", "render"), opts.OUTPUT)}
"""The help panel of each flag made from a key of TrainConfig (default: what to run)."""
HELP = {
    "mode": "sync: collect experience, then train on it, in turn (the reference: a seed "
    "gives the same checkpoints whatever the layout); async: a learner process trains "
    "while collection goes on (pays only when training takes as long as collecting and a "
    "CPU is free for it).",
    "train_interval": "With --mode async: epochs of experience collected between two "
    "rounds of training (1: a round after every epoch).",
    "parallel_training": "Train the agents' learners at the same time, a thread each, "
    "instead of one after the other (pays with several agents and free CPUs).",
}
"""Help in a newcomer's words where TrainConfig's own is terse."""


def _derived() -> list[tuple[str, Any, Any]]:
    """A flag for every key of :class:`TrainConfig` but ``overrides`` (``--set``'s)."""
    hints, derived = typing.get_type_hints(TrainConfig), []
    for f in fields(TrainConfig):
        kind = CLI_FIELDS.get(f.name)
        if kind is None and "help" in f.metadata:
            kind = Annotated[hints[f.name], typer.Option(
                *DECLS.get(f.name, ()), metavar=f.metadata["metavar"],
                help=HELP.get(f.name, f.metadata["help"]),
                rich_help_panel=PANELS.get(f.name, opts.RUN))]
        if kind is not None:
            default = None if f.name in NO_DEFAULT else f.default
            derived.append((f.name, kind, field(default=default)))
    return derived


MORE_FIELDS = [
    ("config", Annotated[Path | None, opts.SHARED["config"].option(more=(
        "E.g. configs/cartpole-dqn.yaml: the flags' long names as keys, and overrides "
        "(the mission's parameters) and learner (class and options)."))], None),
    ("set", Annotated[list[str] | None, opts.SHARED["set"].option(
        more="learner.KEY=VALUE sets a learner option (e.g. learner.lr=0.001).")], None),
    ("resume", Annotated[bool, typer.Option(
        "--resume", rich_help_panel=opts.RUN,
        help="Continue from the run directory's checkpoint.")], False),
    ("force", Annotated[bool, typer.Option(
        "--force", rich_help_panel=opts.OUTPUT, help="Replace the run already in -o DIR "
        "(what parcat wrote there is deleted first; other files stay).")], False),
    ("seeds", Annotated[str | None, typer.Option(
        "--seeds", metavar="SEEDS", rich_help_panel=opts.PARALLEL, help="Train several seeds "
        "(0-4, 1,3,7) in parallel under one --jobs budget, one run each in RUN/seed-N (RUN: "
        "-o DIR, default runs/<mission>): as many seeds at a time as --jobs allows, its rest "
        "shared as their env workers.")],
     None),
    ("train_steps", Annotated[int | None, typer.Option(
        "--train-steps", metavar="N", hidden=True, help="Renamed --gradient-steps.")], None),
    ("format", opts.TableOrJson, SummaryFormat.TABLE),
    ("progress", opts.Progress, True),
]
"""The flags of ``parcat train`` that are no key of :class:`TrainConfig`."""
TrainSettings: type[Any] = make_dataclass(
    "TrainSettings", [*_derived(), *((n, t, field(default=d)) for n, t, d in MORE_FIELDS)],
    bases=(_TrainFile,), frozen=True)
TrainSettings.__doc__ = "Everything ``parcat train`` is told: TrainConfig's keys, and more."


@settings_command(TrainSettings)
def train_command(s: Any) -> None:
    """Train one independent learner per agent; checkpoints load with `parcat eval -p RUN`.

    Exit codes: 0 trained, 1 the run failed, 2 bad input, 130 interrupted (the run resumes
    with --resume).
    """
    err = stderr_console()
    with user_errors():
        cfg = train_config(s)
        seeds = None if s.seeds is None else parse_seeds(s.seeds)
    if s.config is not None and "config" not in s.given:
        err.print(f"note: -m {cfg.mission}: using its tuned config {s.config} (its figures "
                  "are at its top; flags override its keys; -c FILE for another)",
                  soft_wrap=True)
    if seeds is not None:
        with user_errors():
            _train_seeds(cfg, seeds, s, err)
        return
    with user_errors(), claim_run_dir(cfg, resume=s.resume, force=s.force) as choice:
        report, trainer = _train(choice, s.resume, s.progress, s.format, err)
    _show(report, trainer, s.format)
    if report.interrupted:
        run = trainer.config
        said_interrupted(interrupted_line(trainer.start_epoch + len(report.epochs), run.epochs,
                                          report.checkpoint, str(run.run_path)))
        raise typer.Exit(EXIT_INTERRUPTED)


def train_config(s: Any) -> TrainConfig:
    """The run that :data:`TrainSettings` ``s`` describe (``--set``: mission parameters and
    ``learner.KEY`` learner options)."""
    if s.train_steps is not None:
        raise ConfigError(f"--train-steps is now --gradient-steps ({RENAMED})")
    overrides, learner = split_learner_settings(parse_overrides(s.set or []))
    if s.learner is not None:
        learner["class"] = s.learner
    keys = {f.name: getattr(s, f.name) for f in fields(TrainConfig) if f.name != "overrides"}
    return TrainConfig(**{**keys, "overrides": overrides, "learner": learner,
                          "loggers": tuple(s.loggers or ()),
                          "mission": opts.one_value(s.mission, "-m/--mission", "train")
                          or TrainConfig.mission})


def _train_seeds(cfg: TrainConfig, seeds: list[int], s: Any, err: Any) -> None:
    """``--seeds``: every seed a run of its own in ``RUN/seed-N``, several at a time."""
    if cfg.render:
        raise ConfigError("--render shows one run: give --seed N instead of --seeds")
    if s.resume and s.force:
        raise ConfigError("--resume and --force contradict each other: --resume continues "
                          "the runs, --force replaces them; give one")
    path = cfg.run_path if cfg.run_dir or s.resume or s.force else free_path(cfg.run_path)
    at_once, jobs_each = split_jobs(cfg.jobs, len(seeds))
    configs = seed_configs(replace(cfg, run_dir=str(path)), seeds, jobs_each)
    err.print(f"seeds {', '.join(map(str, seeds))}: one run each in {path}/seed-N, "
              f"{schedule(cfg.jobs, len(seeds))}", soft_wrap=True)
    flags = ["--resume"] * s.resume + ["--force"] * s.force
    runs = run_seeds(configs, at_once, flags,
                     on_start=lambda run: err.print(f"seed {run.seed}: training into {run.path}",
                                                    soft_wrap=True),
                     on_end=lambda run: _seed_done(run, s.format), cpus_each=jobs_each)
    if s.format is SummaryFormat.JSON:
        print_json({"runs": [{"seed": r.seed, "run_dir": str(r.path), "exit_code": r.code,
                              "seconds": round(r.seconds, 3), "error": r.last_error or None}
                             for r in runs]})
    failed = [r for r in runs if r.code != 0]
    if failed:
        first = failed[0]
        why = first.last_error.removeprefix("parcat: error: ") or f"exit code {first.code}"
        kind = ConfigError if all(r.code == 2 for r in failed) else RunError
        raise kind(f"{len(failed)} of {len(runs)} seeds failed; seed {first.seed} "
                   f"({first.path}): {why}")


def _seed_done(run: SeedRun, fmt: SummaryFormat) -> None:
    if run.code != 0 or fmt is SummaryFormat.JSON:
        return
    best = run.path / BEST
    typer.echo(f"seed {run.seed}: {run.path} ({run.seconds:.0f} s)"
               + (f"; the best{_best_score(best)}: {best}" if best.is_dir() else ""))


def _show(report: TrainReport, trainer: Trainer, fmt: SummaryFormat) -> None:
    """Print where the checkpoint is (and the plan and epochs with ``-f json``)."""
    plan = trainer.plan
    if fmt is SummaryFormat.JSON:
        print_json({"checkpoint": report.checkpoint, "interrupted": report.interrupted,
                    "plan": {"env_workers": plan.env_workers, "num_envs": plan.num_envs,
                             "spin": plan.spin, "reasons": list(plan.reasons)},
                    "epochs": [s.to_dict() for s in report.epochs]})
        return
    best = Path(report.checkpoint) / BEST
    typer.echo(f"checkpoint: {report.checkpoint}\nevaluate it: parcat eval -p "
               f"{report.checkpoint} (its mission and parameters come from the run)"
               + (f"; the best{_best_score(best)}: parcat eval -p {best}" if best.is_dir()
                  else ""))


def _best_score(best: Path) -> str:
    """`` (epoch N, greedy eval total X summed over agents)`` from ``best``'s manifest; with
    sides, each side's: `` (greedy eval on M episodes: pursuer (mean per agent) X at epoch N;
    evader ...)``."""
    from parcat.policies import checkpoint
    try:
        manifest = checkpoint.read_manifest(best)
        episodes = manifest.get("eval_episodes", "?")
        sides = manifest.get("sides") or {}
        if set(sides) - {TOTAL}:
            scores = [f"{side} ({side_label(side)}) {best_line(entry.record())}"
                      for side, entry in read_best(best.parent, sides).items()]
            return f" (greedy eval on {episodes} episodes: {'; '.join(scores)})"
        total = float(manifest["eval_return"][TOTAL])
        confirmed = manifest.get("best_return")
        more = "" if not isinstance(confirmed, dict) else (
            f"; on {confirmed['episodes']} more {confirmed['mean']:.4g} [95% CI "
            f"{confirmed['low']:.4g}, {confirmed['high']:.4g}]")
        return (f" (epoch {manifest['epoch']}, greedy eval total {total:.4g} summed over "
                f"agents on {episodes} episodes{more})")
    except Exception:
        return ""  # an older or damaged best: eval -p says what is wrong


def _train(choice: RunDirChoice, resume: bool, progress: bool, fmt: SummaryFormat,
           err: Any) -> tuple[TrainReport, Trainer]:
    """Build the trainer in the claimed run directory and run it."""
    cfg = choice.config
    if resume and trainer_done(cfg):
        budget = ("--epochs", cfg.epochs) if cfg.total_steps is None else ("--total-steps",
                                                                          cfg.total_steps)
        raise ConfigError(f"--resume: '{cfg.run_path}' already reached {budget[0]} "
                          f"{budget[1]}; raise {budget[0]} to train on")
    with user_prints_on_stderr():
        trainer = make_trainer(cfg, resume=resume,
                               on_frame=_frame_printer(err) if cfg.render else None)
    if cfg.render:  # once built: a refused run is one line
        err.print("--render: one environment shown; everything runs in this process")
    if choice.note:  # once the run has started: a refused one names no folder
        typer.echo(choice.note, err=True)
    if resume and not trainer.resumed:
        typer.echo(f"--resume: no checkpoint in '{cfg.run_path}' yet; starting from epoch 0",
                   err=True)
    if isinstance(trainer, SelfPlayTrainer):
        err.print(f"note: {cfg.mission} is turn-based: one network learns every seat by "
                  "self-play, against itself and a pool of its past selves", soft_wrap=True)
    if cfg.jobs is not None:
        for reason in trainer.plan.reasons:
            err.print(f"plan: {reason}", soft_wrap=True)
    with epoch_progress(trainer.config.epochs, trainer.start_epoch,
                        to_stderr=fmt is SummaryFormat.JSON, live=progress) as show:
        trainer.on_epoch = show
        with user_prints_on_stderr():
            return trainer.run(), trainer


def _frame_printer(console: Any) -> Any:
    """Redraw the rendered environment on stderr, at most 20 times a second."""
    last = [0.0]

    def show(frame: str) -> None:
        now = time.monotonic()
        if now - last[0] < 0.05:
            return
        last[0] = now
        console.file.write("\x1b[H\x1b[J" + frame + "\n")
        console.file.flush()

    return show


def trainer_done(cfg: Any) -> bool:
    """Whether the run directory's checkpoint already has ``cfg.epochs`` epochs (or
    ``cfg.total_steps`` environment steps)."""
    from parcat.policies import checkpoint
    try:
        manifest = checkpoint.read_manifest(cfg.run_path)
        if cfg.total_steps is not None:
            return int(manifest.get("env_steps", 0)) >= cfg.total_steps
        return int(manifest.get("epoch", 0)) >= cfg.epochs
    except Exception:
        return False  # no checkpoint: Trainer says so
