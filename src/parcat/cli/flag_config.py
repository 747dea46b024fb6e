"""``-c FILE`` for ``eval`` and ``plan``: a YAML file whose keys are the command's flags.

A key is the flag's long name with ``_`` for ``-`` (``episodes``, ``parallel_policy``,
``replay_dir``), except the repeatable ``missions`` and ``policies`` (``-m``, ``-p``),
``set`` (``--set``: a mapping, or a list of ``KEY=VALUE``) and ``format`` (``-f``)::

    missions: [harvest, evade]
    policies: [greedy, random]
    episodes: 20
    seed: 7
    jobs: 4
    set: {agents: 8}
    output: results.json

The one precedence rule (:func:`parcat.core.settings.merge_settings`): defaults < the file <
flags given on the command line; ``set`` merges key by key (a ``--set`` flag wins over the
file's value of that key only). ``plan`` reads the file ``eval`` reads and skips the keys
only ``eval`` has (``output``, ``precision`` and the rest).
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError, brief, clip
from parcat.core.settings import merge_settings, parse_overrides, parse_settings

KEYS = {"missions": "missions", "policies": "policies", "set": "overrides", "format": "fmt"}
"""YAML key → parameter name where the two differ (or where the key is fixed by design)."""
EVAL_ONLY = ("output", "format", "precision", "max_episodes", "resume", "progress", "each",
             "cross", "replay_dir", "trace")
"""Keys of ``eval``'s file that ``plan`` skips."""
COMMAND_LINE_ONLY = ("trust_code",)
"""Flags a file cannot set: a file must not allow the code that files name."""
_FROM_COMMAND_LINE = ("COMMANDLINE", "ENVIRONMENT")


def key_of(name: str) -> str:
    """The YAML key of parameter ``name``."""
    return next((key for key, param in KEYS.items() if param == name), name)


def apply_config(path: Path, ctx: Any, values: dict[str, Any],
                 annotations: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the file's keys applied wherever no flag was given.

    Args:
        path: The ``-c`` file.
        ctx: The command's Click context (which parameters came from the command line).
        values: Every parameter's value as the command line (or its default) gave it.
        annotations: Every parameter's type, by name.

    Raises:
        ConfigError: an unreadable file, an unknown key (named, with the valid ones), a
            value of the wrong type (named, what arrived shown in brief, never the file).
    """
    from parcat.core.yamlfile import read_yaml_mapping

    label = f"--config '{path}'"
    data = read_yaml_mapping(path, label, ConfigError)
    valid = sorted(key_of(name) for name in values if name not in COMMAND_LINE_ONLY)
    merged = dict(values)
    for key, value in data.items():
        name = KEYS.get(str(key), str(key))
        if name in COMMAND_LINE_ONLY:
            raise ConfigError(f"{label}: key '{key}' is taken from the command line only "
                              f"(--{name.replace('_', '-')}): a file cannot allow code")
        if name not in values:
            if key in EVAL_ONLY:
                continue
            raise ConfigError(f"{label}: unknown key '{clip(str(key))}'; valid: "
                              f"{', '.join(valid)}")
        given = _given(ctx, name)
        if name == "overrides":
            from_file = _settings(label, value)
            from_flags = parse_overrides(values[name] or [])
            merged[name] = [f"{k}={_text(v)}" for k, v in
                            merge_settings(from_file, from_flags).items()]
        elif not given:
            merged[name] = _convert(label, key, value, annotations[name])
    return merged


def given_flags(ctx: Any) -> dict[str, Any]:
    """The command's parameters that the command line gave (not their defaults), by name:
    what goes on top of a ``-c`` file."""
    return {name: value for name, value in ctx.params.items() if _given(ctx, name)}


def _given(ctx: Any, name: str) -> bool:
    """Whether parameter ``name`` came from the command line (or its environment variable)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in _FROM_COMMAND_LINE


def _settings(label: str, value: Any) -> dict[str, Any]:
    """``set:`` as a mapping: given as one, or as a list of ``KEY=VALUE``."""
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{label}: key 'set' must be a mapping or a list of KEY=VALUE, "
                          f"got {brief(value)}")
    return parse_settings(items, lambda item: ConfigError(
        f"{label}: key 'set' expects KEY=VALUE items, got {brief(item)}"))


def _text(value: Any) -> str:
    """A setting's value as ``--set`` text that reads back as the same value (JSON is YAML)."""
    return json.dumps(value, default=str)


def _convert(label: str, key: str, value: Any, annotation: Any) -> Any:
    """``value`` as the parameter's Python type, or a one-line error naming the key."""
    kind = _bare(annotation)
    if typing.get_origin(kind) is list:
        items = value if isinstance(value, list) else [value]
        item_kind = typing.get_args(kind)[0]
        return [_convert(label, key, item, item_kind) for item in items]
    if value is None and _optional(annotation):
        return None
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        choices = [member.value for member in kind]
        if value not in choices:
            raise ConfigError(f"{label}: key '{key}' must be one of {', '.join(choices)}, got "
                              f"{brief(value)}")
        return kind(value)
    expected = {bool: "true or false", int: "an integer", float: "a number",
                str: "text", Path: "a path"}.get(kind)
    if expected is None:
        return value  # a type no flag of eval or plan has: the command checks it
    ok = (isinstance(value, bool) if kind is bool
          else isinstance(value, int) and not isinstance(value, bool) if kind is int
          else isinstance(value, int | float) and not isinstance(value, bool) if kind is float
          else isinstance(value, str))
    if not ok:
        raise ConfigError(f"{label}: key '{key}' must be {expected}, got {brief(value)}")
    return Path(value) if kind is Path else float(value) if kind is float else value


def _bare(annotation: Any) -> Any:
    """The type inside ``Annotated[...]``, without ``| None``."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kept = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kept[0]
    return annotation


def _optional(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return type(None) in typing.get_args(annotation)
