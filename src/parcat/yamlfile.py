"""Reading YAML files that must hold a mapping, with one-line errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from parcat.errors import UsageError


def read_yaml_mapping(path: Path, label: str, error: type[UsageError]) -> dict[str, Any]:
    """The mapping in a YAML file (empty for an empty file).

    Args:
        path: The file.
        label: How messages name it, e.g. ``"mission file 'x.yaml'"``.
        error: The error class to raise (``MissionError``, ``ConfigError``, ...).

    Raises:
        UsageError: (as ``error``) a missing or unreadable file, invalid YAML with its line,
            or a document that is not a mapping.
    """
    try:
        loaded = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise error(f"{label} does not exist") from None
    except OSError as exc:
        raise error(f"{label}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise error(f"{label}{where}: invalid YAML ({problem})") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise error(f"{label}: expected a mapping of keys, got {type(loaded).__name__}")
    return loaded
