"""``parcat train``: collect experience in environment workers, train one learner per agent."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.common import EXIT_INTERRUPTED, SummaryFormat, print_json, user_errors
from parcat.cli.render import stderr_console
from parcat.cli.stdout import user_prints_on_stderr
from parcat.cli.train_progress import epoch_progress
from parcat.core.errors import ConfigError
from parcat.core.settings import parse_overrides, split_learner_settings
from parcat.train.config import LearningMode, LoggerKind, MetricsFormat, load_train_config
from parcat.train.run_dir import RunDirChoice, claim_run_dir
from parcat.train.runs import BEST
from parcat.train.trainer import Trainer, TrainReport

EpochsOpt = Annotated[
    int | None, typer.Option("--epochs", metavar="N", help="Collect-then-learn rounds.")
]
StepsPerEpochOpt = Annotated[
    int | None, typer.Option("--steps-per-epoch", metavar="N", help="Vector steps per epoch.")
]
EnvWorkersOpt = Annotated[
    int | None, typer.Option("--env-workers", metavar="N", help="Environment worker processes "
                             "(0: in-process; default: planned from the measured env step and "
                             "free CPUs).")
]
EnvsPerWorkerOpt = Annotated[
    int | None, typer.Option("--envs-per-worker", metavar="N", help="Environments per worker.")
]
ModeOpt = Annotated[LearningMode | None, typer.Option(help="sync (reference) or async.")]
TrainIntervalOpt = Annotated[
    int | None, typer.Option("--train-interval", metavar="N", help="Async: train every N epochs.")
]
TrainStepsOpt = Annotated[
    int | None, typer.Option("--train-steps", metavar="N",
                             help="Gradient updates per agent per round.")
]
ParallelTrainingOpt = Annotated[
    bool | None,
    typer.Option("--parallel-training/--no-parallel-training", help="Train agents concurrently."),
]
SharedLearnerOpt = Annotated[
    bool | None, typer.Option("--shared-learner/--independent", help="One learner for all agents.")
]
LearnerOpt = Annotated[
    str | None, typer.Option("--learner", metavar="NAME", help="Learner: dqn, ppo, or module:Class "
                             "(the YAML's learner.class).")
]
CheckpointEveryOpt = Annotated[
    int | None, typer.Option("--checkpoint-every", metavar="N", help="Checkpoint every N epochs.")
]
RunDirOpt = Annotated[str | None, opts.SHARED["output"].option("DIR", aliases=("--run-dir",))]
MetricsFormatOpt = Annotated[
    MetricsFormat | None, typer.Option(help="The per-epoch metrics file's format.")
]
LoggerOpt = Annotated[
    list[LoggerKind] | None,
    typer.Option("--logger", metavar="KIND", help="Where epoch metrics go (repeatable): jsonl, "
                 "csv, tensorboard (RUN/tensorboard; pip install 'parcat\\[tensorboard]'), wandb. "
                 "A metrics file is always written."),
]
InitFromOpt = Annotated[
    str | None, typer.Option("--init-from", metavar="DIR",
                             help="Start from this checkpoint's weights.")
]
ResumeOpt = Annotated[
    bool, typer.Option("--resume", help="Continue from the run directory's checkpoint.")
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Replace the run already in -o DIR (what parcat wrote "
                       "there is deleted first; other files stay).")
]
EvalEpisodesOpt = Annotated[
    int | None, typer.Option("--eval-episodes", metavar="N", help="Greedy evaluation episodes "
                             "at every checkpoint; the best checkpoint goes to RUN/best (0: "
                             "none).")
]
RenderOpt = Annotated[
    bool | None, typer.Option("--render", help="Show one environment; runs in one process.")
]


def train_command(
    missions: opts.Missions = None,
    config: opts.Config = None,
    overrides: opts.Overrides = None,
    epochs: EpochsOpt = None,
    steps_per_epoch: StepsPerEpochOpt = None,
    jobs: opts.Jobs = None,
    env_workers: EnvWorkersOpt = None,
    envs_per_worker: EnvsPerWorkerOpt = None,
    mode: ModeOpt = None,
    train_interval: TrainIntervalOpt = None,
    train_steps: TrainStepsOpt = None,
    parallel_training: ParallelTrainingOpt = None,
    shared_learner: SharedLearnerOpt = None,
    learner: LearnerOpt = None,
    seed: opts.Seed = None,
    checkpoint_every: CheckpointEveryOpt = None,
    run_dir: RunDirOpt = None,
    metrics_format: MetricsFormatOpt = None,
    logger: LoggerOpt = None,
    init_from: InitFromOpt = None,
    resume: ResumeOpt = False,
    force: ForceOpt = False,
    eval_episodes: EvalEpisodesOpt = None,
    render: RenderOpt = None,
    backend: opts.Backend = None,
    address: opts.Address = None,
    fmt: opts.TableOrJson = SummaryFormat.TABLE,
    progress: opts.Progress = True,
) -> None:
    """Train one independent learner per agent; checkpoints load with `parcat eval -p RUN`.

    -o DIR (also --run-dir): the run directory, default runs/<mission>. -c FILE: a train
    YAML (configs/train.yaml), the keys of parcat.train.config.TrainConfig. -m: one mission.
    """
    err = stderr_console()
    with user_errors():
        mission = opts.one_value(missions, "-m/--mission", "train")
        mission_sets, learner_sets = split_learner_settings(parse_overrides(overrides or []))
        flags: dict[str, Any] = {
            "mission": mission, "overrides": mission_sets or None,
            "learner": {**learner_sets, **({"class": learner} if learner is not None else {})}
            or None,
            "epochs": epochs, "steps_per_epoch": steps_per_epoch, "jobs": jobs,
            "env_workers": env_workers, "envs_per_worker": envs_per_worker, "mode": mode,
            "train_interval": train_interval, "train_steps": train_steps,
            "parallel_training": parallel_training, "shared_learner": shared_learner,
            "seed": seed, "checkpoint_every": checkpoint_every, "run_dir": run_dir,
            "metrics_format": metrics_format, "loggers": tuple(logger) if logger else None,
            "init_from": init_from, "render": render, "eval_episodes": eval_episodes,
            "backend": backend, "address": address,
        }
        cfg = load_train_config(config, flags)
    with user_errors(), claim_run_dir(cfg, resume=resume, force=force) as choice:
        report, trainer = _train(choice, resume, progress, fmt, err)
    if fmt is SummaryFormat.JSON:
        print_json(
            {
                "checkpoint": report.checkpoint,
                "interrupted": report.interrupted,
                "plan": {"env_workers": trainer.plan.env_workers,
                         "num_envs": trainer.plan.num_envs, "spin": trainer.plan.spin,
                         "reasons": list(trainer.plan.reasons)},
                "epochs": [s.to_dict() for s in report.epochs],
            }
        )
    else:
        best = Path(report.checkpoint) / BEST
        typer.echo(
            f"checkpoint: {report.checkpoint}\n"
            f"evaluate it: parcat eval -p {report.checkpoint} (its mission and parameters come "
            "from the run)" + (f"; the best: parcat eval -p {best}" if best.is_dir() else "")
        )
    if report.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


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
