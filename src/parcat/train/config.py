"""``parcat train`` configuration: a YAML file (``configs/train.yaml``) with flags on top."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError, brief, clip
from parcat.core.limits import MAX_COUNT, MAX_TRAIN_ENVS, MAX_WORKERS
from parcat.core.raycluster import Backend
from parcat.core.settings import merge_settings
from parcat.core.yamlfile import read_yaml_mapping
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


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; every field is a YAML key and a flag."""

    mission: str = "goal_tasks"
    """Mission name or YAML path."""
    overrides: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Mission parameter overrides (``--set KEY=VALUE``)."""
    epochs: int = 20
    """Collect-then-learn rounds."""
    steps_per_epoch: int = 100
    """Vector steps per epoch (every environment steps this many times)."""
    jobs: int | None = None
    """Worker budget the planner splits between environment workers and training
    (:func:`parcat.train.plan.plan_training`); used when ``env_workers`` is not given."""
    env_workers: int | None = None
    """Environment worker processes; 0 steps the environments in the trainer's process;
    ``None``: planned from the environment's measured step and the free CPUs (within
    ``jobs``), in-process unless workers pay."""
    envs_per_worker: int = 4
    """Environments per worker (or in-process when ``env_workers`` is 0). A planned layout
    steps ``envs_per_worker`` times ``max(1, workers jobs leaves)`` environments wherever
    they run, so the measurement never changes the results."""
    mode: LearningMode = LearningMode.SYNC
    """``sync``: collect, then train (the reference); ``async``: a learner process trains
    on each round's transitions while collection continues."""
    train_interval: int = 1
    """Async mode: train every this many epochs."""
    train_steps: int = 50
    """Gradient updates per agent per training round."""
    parallel_training: bool = False
    """Train the agents concurrently (threads; numpy releases the GIL in its kernels)."""
    train_threads: int = 0
    """Threads for ``parallel_training``; 0 means one per learner (``jobs`` plans it)."""
    shared_learner: bool = False
    """One learner on the pooled experience of all agents instead of one per agent."""
    learner: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The learner: ``class`` (a built-in name, ``dqn`` or ``ppo``, or ``module:Class``;
    default ``dqn``; ``--learner``) and its options (``parcat.train.dqn.DQNConfig``,
    ``parcat.train.ppo_config.PPOConfig``, or the class's own)."""
    seed: int = 0
    """Seeds environments, tasks, exploration and initial weights."""
    checkpoint_every: int = 5
    """Write a checkpoint every this many epochs (and at the end)."""
    run_dir: str = ""
    """Where checkpoints and metrics go (default ``runs/<mission>``)."""
    metrics_format: MetricsFormat = MetricsFormat.JSONL
    """``metrics.jsonl`` or ``metrics.csv`` in the run directory."""
    loggers: tuple[LoggerKind, ...] = ()
    """Where epoch metrics go: ``jsonl``/``csv`` files (default: ``metrics_format``'s; one
    is always written, ``parcat plot`` and ``--resume`` read it), ``tensorboard`` event
    files in ``RUN/tensorboard``, ``wandb`` (when installed)."""
    init_from: str = ""
    """Start from the weights of this checkpoint (a run directory)."""
    eval_episodes: int = 10
    """Greedy evaluation episodes at every checkpoint (seeded from ``seed`` on their own
    stream, the same set every time); the checkpoint with the best mean return is kept in
    ``RUN/best``. 0: no evaluation, no ``best``."""
    render: bool = False
    """Show one environment in the terminal; runs everything in one process."""
    backend: Backend = Backend.LOCAL
    """``local`` environment worker processes, or ``ray`` actors on a Ray cluster."""
    address: str = ""
    """Ray cluster address with ``backend: ray`` (empty: start a local cluster)."""

    def __post_init__(self) -> None:
        # accept the YAML's words too: TrainConfig(mode="async")
        for name, kind in (("mode", LearningMode), ("backend", Backend),
                           ("metrics_format", MetricsFormat)):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, kind(value))
            except ValueError:
                valid = " or ".join(k.value for k in kind)
                raise ConfigError(f"{name} must be {valid}, got {value!r}") from None
        self._check_numbers()
        object.__setattr__(self, "loggers", _logger_kinds(self.loggers))
        for name in ("overrides", "learner"):
            if not isinstance(getattr(self, name), Mapping):
                raise ConfigError(f"{name} must be a mapping of keys to values, "
                                  f"got {brief(getattr(self, name))}")
        for name in ("parallel_training", "shared_learner", "render"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {brief(getattr(self, name))}")
        for name in ("mission", "run_dir", "init_from", "address"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name} must be a string, got {brief(getattr(self, name))}")
        check_learner_options(self.learner)  # the learner's own checks, before any run
        if self.render:  # rendering shows one local env: everything in this process
            object.__setattr__(self, "env_workers", 0)
            object.__setattr__(self, "mode", LearningMode.SYNC)

    def _check_numbers(self) -> None:
        """Every count within its range (:mod:`parcat.core.limits`), before anything starts."""
        for name in ("epochs", "steps_per_epoch", "train_interval", "checkpoint_every"):
            _require_int(name, getattr(self, name), 1, MAX_COUNT)
        _require_int("envs_per_worker", self.envs_per_worker, 1, MAX_TRAIN_ENVS)
        _require_int("train_steps", self.train_steps, 0, MAX_COUNT)
        _require_int("eval_episodes", self.eval_episodes, 0, MAX_COUNT)
        _require_int("seed", self.seed, 0)
        _require_int("train_threads", self.train_threads, 0, MAX_WORKERS)
        _require_int("env_workers", self.env_workers, 0, MAX_WORKERS, optional=True)
        _require_int("jobs", self.jobs, 1, MAX_WORKERS, optional=True)
        envs = max(1, self.env_workers or 0) * self.envs_per_worker
        if envs > MAX_TRAIN_ENVS:
            raise ConfigError(
                f"env_workers ({self.env_workers}) times envs_per_worker ({self.envs_per_worker}) "
                f"is {envs:,} environments, more than the limit of {MAX_TRAIN_ENVS:,}; lower either"
            )

    @property
    def run_path(self) -> Path:
        """The run directory (default ``runs/<mission>``; ``runs/CartPole-v1`` for
        ``gymnasium:CartPole-v1``)."""
        name = self.mission.removeprefix(GYMNASIUM_PREFIX)
        return Path(self.run_dir or f"runs/{Path(name).stem if name else 'run'}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the checkpoint manifest."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("mode", "backend", "metrics_format"):
            data[name] = getattr(self, name).value
        data["loggers"] = [kind.value for kind in self.loggers]
        data["overrides"] = dict(self.overrides)
        data["learner"] = dict(self.learner)
        return data


def _learner_class(options: Mapping[str, Any]) -> Any:
    return options.get("class")


def _logger_kinds(value: Any) -> tuple[LoggerKind, ...]:
    """``loggers`` as a tuple of kinds, each once, in the order given."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise ConfigError(f"loggers must be a list of jsonl, csv, tensorboard or wandb, "
                          f"got {brief(value)}")
    kinds: list[LoggerKind] = []
    for item in value:
        try:
            kind = LoggerKind(item)
        except ValueError:
            raise ConfigError(f"loggers: expected jsonl, csv, tensorboard or wandb, got "
                              f"{brief(item)}") from None
        if kind not in kinds:
            kinds.append(kind)
    return tuple(kinds)


def _require_int(
    name: str, value: Any, low: int, high: int | None = None, optional: bool = False
) -> None:
    if optional and value is None:
        return
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high:,}"
        raise ConfigError(f"{name} must be an integer {bounds}, got {brief(value)}")


LAYOUT_KEYS = frozenset({"jobs", "env_workers"})
NESTED_KEYS = ("overrides", "learner")
"""Mappings a flag changes key by key rather than replacing."""


def load_train_config(path: str | Path | None, flags: Mapping[str, Any]) -> TrainConfig:
    """Read a train YAML file (optional) and apply flags that were given (not ``None``).

    The precedence rule of :func:`parcat.core.settings.merge_settings`: built-in defaults <
    the file < flags (``overrides`` and ``learner`` key by key, so ``--set
    learner.lr=0.01`` changes one learner key of the file's); ``jobs`` or
    ``env_workers`` given as a flag replaces the file's layout, both keys.

    Raises:
        ConfigError: unreadable YAML, an unknown key (named, with the valid ones), a bad value.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = read_yaml_mapping(Path(path), f"config file '{path}'", ConfigError)
        valid = {f.name for f in fields(TrainConfig)}
        unknown = sorted(str(key) for key in set(data) - valid)
        if unknown:
            known = ", ".join(sorted(valid))
            raise ConfigError(f"config file '{path}': unknown key '{clip(unknown[0])}'; "
                              f"valid: {known}")
    given = {k: v for k, v in flags.items() if v is not None}
    if given.keys() & LAYOUT_KEYS:
        # jobs and env_workers are two ways to lay out the run: flags give it whole
        for key in LAYOUT_KEYS:
            data.pop(key, None)
    learner = given.get("learner")
    if isinstance(learner, Mapping) and isinstance(data.get("learner"), Mapping) and \
            _learner_class(learner) not in (None, _learner_class(data["learner"]) or "dqn"):
        # --learner names another learner: the file's options were written for its own
        data.pop("learner")
    # --set / --set learner.KEY / --learner add to (and win over) the file's mappings
    data = merge_settings(data, given, nested=NESTED_KEYS)
    try:
        return replace(TrainConfig(), **data)
    except TypeError as exc:
        raise ConfigError(f"train config: {clip(str(exc), 200)}") from exc
