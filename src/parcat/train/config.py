"""``parcat train`` configuration: :class:`TrainConfig`, the keys of ``configs/train.yaml``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError, brief
from parcat.core.limits import MAX_COUNT, MAX_TRAIN_ENVS, MAX_WORKERS
from parcat.core.raycluster import Backend
from parcat.envs.missions import GYMNASIUM_PREFIX
from parcat.train.recipes import check_learner_options


class LearningMode(str, enum.Enum):
    """When learning happens relative to collection (``--mode``)."""

    SYNC = "sync"
    ASYNC = "async"


class MetricsFormat(str, enum.Enum):
    """The file the per-epoch metrics go to (``--metrics-format``)."""

    JSONL = "jsonl"
    CSV = "csv"


class LoggerKind(str, enum.Enum):
    """Where the per-epoch metrics go (``--logger``, repeatable)."""

    JSONL = "jsonl"
    CSV = "csv"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"


def _flag(default: Any, help: str, metavar: str | None = "N") -> Any:
    """A field that is a flag of ``parcat train`` too (``help``: its help text)."""
    return field(default=default, metadata={"help": help, "metavar": metavar})


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs: every field is a YAML key of ``-c FILE``, and every
    field with help text in its metadata is a flag of the same name (CleanRL's ``Args``)."""

    mission: str = "goal_tasks"
    """Mission name or YAML path."""
    overrides: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Mission parameter overrides (``--set KEY=VALUE``)."""
    epochs: int = _flag(20, "Collect-then-learn rounds (derived from --total-steps when it "
                        "is given).")
    total_steps: int | None = _flag(None, "Environment steps across all environments: the "
                                    "run's budget; epochs = total-steps / (steps-per-epoch x "
                                    "environments), rounded up (default: --epochs).")
    steps_per_epoch: int = _flag(100, "Vector steps per epoch (every environment steps this "
                                 "many times).")
    jobs: int | None = None
    """Worker budget the planner splits (:func:`parcat.train.plan.plan_training`) when
    ``env_workers`` is not given."""
    env_workers: int | None = _flag(None, "Environment worker processes (0: in-process; "
                                    "default: planned from the measured env step and free "
                                    "CPUs).")
    envs_per_worker: int = _flag(4, "Environments per worker (a planned layout steps this "
                                 "times max(1, workers) wherever they run).")
    mode: LearningMode = _flag(  # noqa: RUF009 (a field(): ruff knows no enum is immutable)
        LearningMode.SYNC, "sync: collect, then train (the reference); async: a learner "
        "process trains while collection continues.", None)
    train_interval: int = _flag(1, "Async: train every N epochs.")
    gradient_steps: int = _flag(50, "Learner updates per learner per epoch (async: per "
                                "round): DQN one gradient update on a replay batch each, PPO "
                                "one training on the round's rollout (so 1).")
    parallel_training: bool = _flag(False, "Train the agents concurrently (threads).", None)
    train_threads: int = _flag(0, "Threads for --parallel-training (0: one per learner; "
                               "--jobs plans it).")
    shared_learner: bool = _flag(False, "One learner on the pooled experience of all agents.",
                                 None)
    learner: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """``class`` (``dqn``, the default, ``ppo`` or ``module:Class``; ``--learner``) and that
    class's options."""
    seed: int = 0
    checkpoint_every: int = _flag(5, "Checkpoint every N epochs (and at the end).")
    run_dir: str = ""
    """Where checkpoints and metrics go (default ``runs/<mission>``)."""
    metrics_format: MetricsFormat = _flag(  # noqa: RUF009 (as mode)
        MetricsFormat.JSONL, "The per-epoch metrics file's format.", None)
    loggers: tuple[LoggerKind, ...] = ()
    """Where epoch metrics go besides the metrics file (``--logger``)."""
    init_from: str = _flag("", "Start from this checkpoint's weights (a run directory).",
                           "DIR")
    eval_episodes: int = _flag(20, "Greedy evaluation episodes at every checkpoint (the same "
                               "set each time); the checkpoint with the highest mean return "
                               "summed over agents goes to RUN/best (one per side where "
                               "the agents have several roles; 0: none).")
    best_episodes: int = _flag(0, "Greedy episodes of their own that confirm a candidate for "
                               "RUN/best (a checkpoint at least as good on --eval-episodes), "
                               "the best's mean shown with a bootstrap 95% interval (0: "
                               "--eval-episodes alone choose).")
    render: bool = _flag(False, "Show one environment; runs in one process.", None)
    pool_size: int = _flag(10, "Self-play (a turn-based game): past selves kept as opponents "
                           "(0: the learner only ever plays itself).")
    pool_every: int = _flag(5, "Self-play: epochs between two past selves joining the pool "
                            "(the oldest leaves a full pool).")
    monte_carlo: bool = _flag(False, "Self-play: each move learns from the game's discounted "
                              "outcome (Monte Carlo), not from the next turn's estimate.", None)
    negamax: bool = _flag(False, "Self-play of a two-seat game rewarded at its end: each "
                          "move learns from what the opponent's best reply is worth to the "
                          "opponent, negated (negamax Q-learning).", None)
    mirror: bool = _flag(False, "Self-play: learn every move twice, the board mirrored left "
                         "to right too (games whose moves are the board's columns).", None)
    pool_share: float = _flag(0.5, "Self-play: the share of games played against a past "
                              "self from the pool (the rest: the learner in every seat).", "P")
    backend: Backend = Backend.LOCAL
    address: str = ""
    """Ray cluster address with ``backend: ray`` (empty: start a local cluster)."""

    def __post_init__(self) -> None:
        for name, words in (("mode", LearningMode), ("backend", Backend),
                            ("metrics_format", MetricsFormat)):  # the YAML's words too
            try:
                object.__setattr__(self, name, words(getattr(self, name)))
            except ValueError:
                raise ConfigError(f"{name} must be {' or '.join(k.value for k in words)}, got "
                                  f"{getattr(self, name)!r}") from None
        self._check_numbers()
        object.__setattr__(self, "loggers", _logger_kinds(self.loggers))
        types: tuple[tuple[tuple[str, ...], type, str], ...] = (
                (("overrides", "learner"), Mapping, "a mapping of keys to values"),
                (("parallel_training", "shared_learner", "render", "monte_carlo",
                  "negamax", "mirror"), bool,
                 "true or false"),
                (("mission", "run_dir", "init_from", "address"), str, "a string"))
        for names, kind, expected in types:
            for name in names:
                if not isinstance(getattr(self, name), kind):
                    raise ConfigError(f"{name} must be {expected}, got "
                                      f"{brief(getattr(self, name))}")
        check_learner_options(self.learner)
        if self.render:  # rendering shows one local env: everything in this process
            object.__setattr__(self, "env_workers", 0)
            object.__setattr__(self, "mode", LearningMode.SYNC)

    def _check_numbers(self) -> None:
        for name, low, high in (("epochs", 1, MAX_COUNT), ("steps_per_epoch", 1, MAX_COUNT),
                                ("train_interval", 1, MAX_COUNT),
                                ("checkpoint_every", 1, MAX_COUNT),
                                ("envs_per_worker", 1, MAX_TRAIN_ENVS),
                                ("gradient_steps", 0, MAX_COUNT),
                                ("eval_episodes", 0, MAX_COUNT), ("total_steps", 1, MAX_COUNT),
                                ("best_episodes", 0, MAX_COUNT),
                                ("seed", 0, None), ("train_threads", 0, MAX_WORKERS),
                                ("env_workers", 0, MAX_WORKERS), ("jobs", 1, MAX_WORKERS),
                                ("pool_size", 0, MAX_COUNT), ("pool_every", 1, MAX_COUNT)):
            value = getattr(self, name)
            if value is None and name in ("env_workers", "jobs", "total_steps"):
                continue
            ok = isinstance(value, int) and not isinstance(value, bool)
            if not ok or value < low or (high is not None and value > high):
                bounds = f">= {low}" if high is None else f"between {low} and {high:,}"
                raise ConfigError(f"{name} must be an integer {bounds}, got {brief(value)}")
        share = self.pool_share
        if not isinstance(share, int | float) or isinstance(share, bool) or not 0 <= share <= 1:
            raise ConfigError(f"pool_share must be a number in [0, 1], got {brief(share)}")
        envs = max(1, self.env_workers or 0) * self.envs_per_worker
        if envs > MAX_TRAIN_ENVS:
            raise ConfigError(
                f"env_workers ({self.env_workers}) times envs_per_worker ({self.envs_per_worker}) "
                f"is {envs:,} environments, more than the limit of {MAX_TRAIN_ENVS:,}; lower either"
            )

    def with_epochs_for(self, num_envs: int) -> TrainConfig:
        """This config with ``epochs`` derived from ``total_steps`` for ``num_envs``
        environments (unchanged without ``total_steps``)."""
        if self.total_steps is None:
            return self
        per_epoch = self.steps_per_epoch * num_envs
        return replace(self, epochs=max(1, -(-self.total_steps // per_epoch)))

    @property
    def run_path(self) -> Path:
        """The run directory (default ``runs/<mission>``: ``runs/CartPole-v1`` for
        ``gymnasium:CartPole-v1``)."""
        name = self.mission.removeprefix(GYMNASIUM_PREFIX)
        return Path(self.run_dir or f"runs/{Path(name).stem if name else 'run'}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the checkpoint manifest."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**data, "mode": self.mode.value, "backend": self.backend.value,
                "metrics_format": self.metrics_format.value,
                "loggers": [kind.value for kind in self.loggers],
                "overrides": dict(self.overrides), "learner": dict(self.learner)}


def _logger_kinds(value: Any) -> tuple[LoggerKind, ...]:
    """``loggers`` as a tuple of kinds, each once, in the order given."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise ConfigError(f"loggers must be a list of jsonl, csv, tensorboard or wandb, "
                          f"got {brief(value)}")
    for item in value:
        if item not in tuple(LoggerKind):
            raise ConfigError(f"loggers: expected jsonl, csv, tensorboard or wandb, got "
                              f"{brief(item)}")
    return tuple(dict.fromkeys(LoggerKind(item) for item in value))
