"""Checking the values of a YAML configuration: one :class:`ConfigError` line per problem.

Every message starts with the file (or ``command line``) and names the key.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parcat.errors import ConfigError
from parcat.yamlfile import read_yaml_mapping


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """The mapping in a YAML file (empty for an empty file); ``what`` names the file's role."""
    return read_yaml_mapping(path, f"{what} '{show_path(path)}'", ConfigError)


def resolve_file(value: Any, base: Path, source: str, key: str) -> Path:
    """The existing file ``value`` names, relative to ``base`` (the naming file's folder)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: '{key}' must be a file path, got {value!r}")
    path = Path(value) if Path(value).is_absolute() else base / value
    if not path.is_file():
        raise ConfigError(f"{source}: '{key}': file '{show_path(path)}' does not exist")
    return path


def show_path(path: Path) -> str:
    """How messages show a path: normalised, relative if it was relative."""
    return os.path.normpath(path)


def check_keys(data: Mapping[str, Any], valid: tuple[str, ...], source: str,
               prefix: str) -> None:
    """Reject the first unknown key, suggesting the closest valid one."""
    unknown = [k for k in data if k not in valid]
    if not unknown:
        return
    key = str(unknown[0])
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
    raise ConfigError(
        f"{source}: unknown key '{prefix}{key}'{hint}; valid: {', '.join(sorted(valid))}"
    )


def check_seconds(value: Any, source: str, key: str) -> float:
    """A positive, finite number of seconds."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{source}: {_quote(key)} must be a positive number of seconds, "
                          f"got {value!r}")
    return float(value)


def check_int(value: Any, source: str, key: str, low: int) -> int:
    """An integer (not a bool) ``>= low``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{source}: {_quote(key)} must be an integer >= {low}, got {value!r}")
    return value


def check_bool(value: Any, source: str, key: str) -> bool:
    """``true`` or ``false``."""
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: '{key}' must be true or false, got {value!r}")
    return value


def _quote(key: str) -> str:
    return key if key.startswith(("agent ", "--")) else f"'{key}'"
