"""``parcat train``: collect experience in environment workers, train one learner per agent."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.common import EXIT_INTERRUPTED, SummaryFormat, print_json, user_errors
from parcat.cli.flag_config import Settings, settings_command
from parcat.cli.render import stderr_console
from parcat.cli.stdout import user_prints_on_stderr
from parcat.cli.train_progress import epoch_progress
from parcat.core.errors import ConfigError
from parcat.core.settings import parse_overrides, split_learner_settings
from parcat.train.config import (
    LearningMode,
    LoggerKind,
    MetricsFormat,
    TrainConfig,
    load_train_config,
)
from parcat.train.run_dir import RunDirChoice, claim_run_dir
from parcat.train.runs import BEST
from parcat.train.trainer import Trainer, TrainReport

N = "N"


@dataclass(frozen=True)
class TrainSettings(Settings):
    """Everything ``parcat train`` is told (the flags given go on top of its YAML)."""

    mission: opts.Missions = None
    config: opts.Config = None
    set: opts.Overrides = None
    epochs: Annotated[int | None, typer.Option(
        metavar=N, help="Collect-then-learn rounds.")] = None
    steps_per_epoch: Annotated[int | None, typer.Option(
        metavar=N, help="Vector steps per epoch.")] = None
    jobs: opts.Jobs = None
    env_workers: Annotated[int | None, typer.Option(
        metavar=N, help="Environment worker processes (0: in-process; default: planned from "
        "the measured env step and free CPUs).")] = None
    envs_per_worker: Annotated[int | None, typer.Option(
        metavar=N, help="Environments per worker.")] = None
    mode: Annotated[LearningMode | None, typer.Option(help="sync (reference) or async.")] = None
    train_interval: Annotated[int | None, typer.Option(
        metavar=N, help="Async: train every N epochs.")] = None
    train_steps: Annotated[int | None, typer.Option(
        metavar=N, help="Gradient updates per agent per round.")] = None
    parallel_training: Annotated[bool | None, typer.Option(
        "--parallel-training/--no-parallel-training", help="Train agents concurrently.")] = None
    shared_learner: Annotated[bool | None, typer.Option(
        "--shared-learner/--independent", help="One learner for all agents.")] = None
    learner: Annotated[str | None, typer.Option(metavar="NAME", help=(
        "Learner: dqn, ppo, or module:Class (the YAML's learner.class)."))] = None
    seed: opts.Seed = None
    checkpoint_every: Annotated[int | None, typer.Option(
        metavar=N, help="Checkpoint every N epochs.")] = None
    run_dir: Annotated[str | None, opts.SHARED["output"].option(
        "DIR", aliases=("--run-dir",))] = None
    metrics_format: Annotated[MetricsFormat | None, typer.Option(
        help="The per-epoch metrics file's format.")] = None
    loggers: Annotated[list[LoggerKind] | None, typer.Option(
        "--logger", metavar="KIND", help="Where epoch metrics go (repeatable): jsonl, csv, "
        "tensorboard (RUN/tensorboard; pip install 'parcat\\[tensorboard]'), wandb. A metrics "
        "file is always written.")] = None
    init_from: Annotated[str | None, typer.Option(
        metavar="DIR", help="Start from this checkpoint's weights.")] = None
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue from the run directory's checkpoint.")] = False
    force: Annotated[bool, typer.Option(
        "--force", help="Replace the run already in -o DIR (what parcat wrote there is "
        "deleted first; other files stay).")] = False
    eval_episodes: Annotated[int | None, typer.Option(
        metavar=N, help="Greedy evaluation episodes at every checkpoint; the best checkpoint "
        "goes to RUN/best (0: none).")] = None
    render: Annotated[bool | None, typer.Option(
        help="Show one environment; runs in one process.")] = None
    backend: opts.Backend = None
    address: opts.Address = None
    format: opts.TableOrJson = SummaryFormat.TABLE
    progress: opts.Progress = True


@settings_command(TrainSettings, flag_keys=False)
def train_command(s: TrainSettings) -> None:
    """Train one independent learner per agent; checkpoints load with `parcat eval -p RUN`.

    -o DIR (also --run-dir): the run directory, default runs/<mission>. -c FILE: a train
    YAML (configs/train.yaml), the keys of parcat.train.config.TrainConfig. -m: one mission.
    """
    err = stderr_console()
    with user_errors():
        cfg = load_train_config(s.config, train_flags(s))
    with user_errors(), claim_run_dir(cfg, resume=s.resume, force=s.force) as choice:
        report, trainer = _train(choice, s.resume, s.progress, s.format, err)
    _show(report, trainer, s.format)
    if report.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


def train_flags(s: TrainSettings) -> dict[str, Any]:
    """The flags the command line gave, as keys of the train YAML (they go on top)."""
    flags = s.given_of(["set", *(f.name for f in fields(TrainConfig))])
    mission_sets, learner_sets = split_learner_settings(
        parse_overrides(flags.pop("set", None) or []))
    if "learner" in flags:
        learner_sets["class"] = flags.pop("learner")
    if "mission" in flags:
        flags["mission"] = opts.one_value(flags["mission"], "-m/--mission", "train")
    for key, value in (("overrides", mission_sets), ("learner", learner_sets)):
        if value:
            flags[key] = value
    return flags


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
               + (f"; the best: parcat eval -p {best}" if best.is_dir() else ""))


def _train(choice: RunDirChoice, resume: bool, progress: bool, fmt: SummaryFormat,
           err: Any) -> tuple[TrainReport, Trainer]:
    """Build the trainer in the claimed run directory and run it."""
    cfg = choice.config
    if cfg.render:
        err.print("--render: one environment shown; everything runs in this process")
    if resume and trainer_done(cfg):
        raise ConfigError(f"--resume: '{cfg.run_path}' already reached --epochs {cfg.epochs}; "
                          "raise --epochs to train on")
    with user_prints_on_stderr():
        trainer = Trainer(cfg, resume=resume,
                          on_frame=_frame_printer(err) if cfg.render else None)
    if choice.note:  # once the run has started: a refused one names no folder
        typer.echo(choice.note, err=True)
    if resume and not trainer.resumed:
        typer.echo(f"--resume: no checkpoint in '{cfg.run_path}' yet; starting from epoch 0",
                   err=True)
    if cfg.jobs is not None:
        for reason in trainer.plan.reasons:
            err.print(f"plan: {reason}", soft_wrap=True)
    with epoch_progress(cfg.epochs, trainer.start_epoch,
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
    """Whether the run directory's checkpoint already has ``cfg.epochs`` epochs."""
    from parcat.policies import checkpoint
    try:
        return int(checkpoint.read_manifest(cfg.run_path).get("epoch", 0)) >= cfg.epochs
    except Exception:
        return False  # no checkpoint: Trainer says so
