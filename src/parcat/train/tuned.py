"""Tuned settings per task, in the manner of rl-zoo's ``hyperparams/``: the train configs
shipped in ``configs/`` (a source checkout, as ``pip install -e .`` leaves it).

``parcat train -m MISSION`` without ``-c`` uses the shipped config written for that
mission, if one is (its ``mission`` key the same, no mission ``overrides``, and its learner
the ``--learner`` given, if any); flags still override its keys. Each such file states, at
its top, the figure it reaches over seeds and the command that measured it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError
from parcat.core.yamlfile import read_yaml_mapping

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
"""Where the shipped configs are (none in an installed wheel: no tuned config then)."""


def tuned_config(mission: str, learner: str | None = None,
                 folder: Path = CONFIGS) -> Path | None:
    """The shipped config tuned for ``mission`` (with ``learner``, if given), or ``None``."""
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.yaml")):
        try:
            data: dict[str, Any] = read_yaml_mapping(path, str(path), ConfigError)
        except ConfigError:
            continue  # a file of the user's in configs/ that is no train config
        options = data.get("learner") or {}
        written_for = options.get("class", "dqn") if isinstance(options, dict) else None
        if (data.get("mission") == mission and not data.get("overrides")
                and (learner is None or written_for == learner)):
            return path
    return None
