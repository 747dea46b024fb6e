"""Checking the values of a YAML configuration: one :class:`ConfigError` line per problem.

Every message starts with the file (or ``command line``) and names the key, but never echoes
what a file holds (a config may name any file, ``/etc/shadow`` included): unknown keys are
named by their position, bad values by their kind (``got text``), and other modules' messages
are :func:`redact`-ed. Values typed on the command line are shown as they are.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError, did_you_mean
from parcat.core.yamlfile import read_yaml_mapping


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """The mapping in a YAML file (empty for an empty file); ``what`` names the file's role."""
    return read_yaml_mapping(path, f"{what} '{show_path(path)}'", ConfigError)


def resolve_file(value: Any, base: Path, source: str, key: str) -> Path:
    """The existing file ``value`` names, relative to ``base`` (the naming file's folder)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: '{key}' must be a file path, got {describe(value)}")
    path = Path(value) if Path(value).is_absolute() else base / value
    if not path.is_file():
        raise ConfigError(f"{source}: '{key}': file '{show_path(path)}' does not exist")
    return path


def show_path(path: Path) -> str:
    """How messages show a path: normalised, relative if it was relative."""
    return os.path.normpath(path)


def check_keys(data: Mapping[Any, Any], valid: tuple[str, ...], source: str,
               prefix: str) -> None:
    """Reject the first unknown key, by its position, suggesting the closest valid one."""
    for position, key in enumerate(data, 1):
        if key not in valid:
            scope = f" of '{prefix[:-1]}'" if prefix else ""
            hint = did_you_mean(key, valid, prefix)
            raise ConfigError(f"{source}: unknown key #{position}{scope}{hint}; "
                              f"valid: {', '.join(sorted(valid))}")


def check_parameters(layer: Mapping[Any, Any], known: tuple[str, ...], where: str,
                     mission: str) -> None:
    """Reject a file's unknown mission parameter by its position (its name is the file's)."""
    for position, key in enumerate(layer, 1):
        if key not in known:
            raise ConfigError(f"{where}: key #{position} is no parameter of mission '{mission}'"
                              f"{did_you_mean(key, known)}; known: {', '.join(sorted(set(known)))}")


def check_seconds(value: Any, source: str, key: str, least: float, most: float) -> float:
    """A finite number of seconds from ``least`` to ``most``."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not least <= value <= most:
        raise ConfigError(f"{source}: {_quote(key)} must be a number of seconds from "
                          f"{least:g} to {most:g}, got {_shown(value, source, least, most)}")
    return float(value)


def check_int(value: Any, source: str, key: str, low: int, high: int | None = None) -> int:
    """An integer (not a bool) ``>= low`` (and ``<= high``)."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"from {low} to {high:,}"
        raise ConfigError(f"{source}: {_quote(key)} must be an integer {bounds}, "
                          f"got {_shown(value, source, low, high)}")
    return int(value)


def check_bool(value: Any, source: str, key: str) -> bool:
    """``true`` or ``false``."""
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: '{key}' must be true or false, got {describe(value)}")
    return value


def describe(value: Any) -> str:
    """What kind of value arrived, without its content: ``text``, ``a list``, ``0``..."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return "0" if value == 0 else ("a negative integer" if value < 0 else "an integer")
    if isinstance(value, float):
        if not math.isfinite(value):
            return "an infinite number" if math.isinf(value) else "NaN"
        return "0" if value == 0 else ("a negative number" if value < 0 else "a number")
    if isinstance(value, str):
        return "empty text" if not value else "text"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def redact(message: str, values: Iterable[Any]) -> str:
    """``message`` (of another parcat module) with a file's ``values`` replaced by ``...``:
    text where it is quoted, numbers where they stand alone."""
    texts: set[str] = set()
    numbers: set[str] = set()
    for value in _scalars(values):
        if isinstance(value, str) and value:
            texts.add(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            numbers.update({repr(value), str(value)})
    for text in sorted(texts, key=len, reverse=True):
        for quote in ("'", '"'):
            message = message.replace(f"{quote}{text}{quote}", "'...'")
    for number in sorted(numbers, key=len, reverse=True):
        message = re.sub(rf"(?<![\w.]){re.escape(number)}(?![\w.])", "...", message)
    return message


def _scalars(values: Iterable[Any]) -> Iterator[Any]:
    """Every scalar in ``values``, nested mappings (keys too) and lists included (the YAML
    reader caps their depth)."""
    for value in values:
        if isinstance(value, Mapping):
            yield from _scalars([*value.keys(), *value.values()])
        elif isinstance(value, list | tuple):
            yield from _scalars(value)
        else:
            yield value


def spec_parts(text: str) -> list[str]:
    """A policy spec and every piece of it another module's message may quote."""
    return [text, text.strip(), *(p.strip() for p in re.split(r"[,:@=]", text))]


def _shown(value: Any, source: str, low: float, high: float | None) -> str:
    """The value itself when typed on the command line, else its kind (and on which side of
    the range a number fell)."""
    if source == COMMAND_LINE:
        return repr(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        if high is not None and value > high:
            return "a larger number"
        if 0 < value < low:
            return "a smaller number"
    return describe(value)


def _quote(key: str) -> str:
    return key if key.startswith(("agent ", "--")) else f"'{key}'"


COMMAND_LINE = "command line"
"""The ``source`` of values given as flags (shown in messages: they are no file's)."""
