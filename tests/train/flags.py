"""The run a ``parcat train`` command line describes, built as the command builds it."""

from __future__ import annotations

from pathlib import Path

from parcat.cli.train_cmd import train_command, train_config
from parcat.train.config import TrainConfig


def load(path: Path | None, *flags: str) -> TrainConfig:
    """The :class:`TrainConfig` of ``parcat train [-c path] flags...``: defaults < file < flags."""
    return train_config(train_command.parse([*(["-c", str(path)] if path else []), *flags]))
