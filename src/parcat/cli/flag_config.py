"""One way to build a command's settings: defaults < the ``-c`` file < flags given.

A command's settings are a frozen :class:`Settings` dataclass whose fields are its flags,
each written once (its ``Annotated`` type carries its ``typer.Option``); the command is
built from it (:class:`SettingsCommand`) through Typer, and Click tells which flags the
command line gave (:attr:`Settings.given`). For ``eval`` and ``plan`` the file's keys are
the flags' long names with ``_`` for ``-``, except ``missions`` and ``policies`` (``-m``,
``-p``), ``set`` (a mapping, or a list of ``KEY=VALUE``) and ``format`` (``-f``)::

    missions: [harvest, evade]
    episodes: 20
    set: {agents: 8}
    output: results.json

``set`` merges key by key (:func:`parcat.core.settings.merge_settings`); ``plan`` skips the
keys only ``eval`` has. ``train`` and ``sim`` read YAML files of their own keys and put
the flags given on top.
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from parcat.cli.common import user_errors
from parcat.core.errors import ConfigError, brief, clip

KEYS = {"missions": "missions", "policies": "policies", "set": "overrides", "format": "fmt"}
"""YAML key → parameter name where the two differ (or where the key is fixed by design)."""
EVAL_ONLY = ("output", "format", "precision", "max_episodes", "resume", "progress", "each",
             "cross", "replay_dir", "trace")
"""Keys of ``eval``'s file that ``plan`` skips."""
COMMAND_LINE_ONLY = ("trust_code",)
"""Flags a file cannot set: a file must not allow the code that files name."""
_FROM_COMMAND_LINE = ("COMMANDLINE", "ENVIRONMENT")


@dataclass(frozen=True)
class Settings:
    """The base of a command's settings: a frozen dataclass whose fields are its flags."""

    given: frozenset[str] = field(default=frozenset(), init=False, compare=False)
    """The fields given: on the command line, those it gave (not defaults), which go on top
    of a file; made in Python, every field."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "given", frozenset(f.name for f in fields(self) if f.init))


@dataclass(frozen=True)
class SettingsCommand:
    """A command that builds its :class:`Settings` once and gives them to :attr:`run`."""

    settings: type[Settings]
    """The command's settings."""
    run: Callable[[Any], Any]
    """What the command does with them; its docstring is the command's help."""
    flag_keys: bool = True
    """The ``-c`` file's keys are the flags' names (``eval``, ``plan``); else ``run`` reads
    the file itself (train's and sim's YAML have keys of their own)."""

    def command(self, name: str) -> Any:
        """This command as Click's, named ``name``."""
        holder = typer.Typer(add_completion=False)
        holder.command(name, cls=_SettingsClick, help=inspect.getdoc(self.run))(self.settings)
        command: Any = typer.main.get_group(holder).commands[name]
        command.spec = self
        return command


def settings_command(settings: type[Settings], flag_keys: bool = True
                     ) -> Callable[[Callable[[Any], Any]], SettingsCommand]:
    """Decorate a command's function, which takes one ``settings`` object."""
    return lambda run: SettingsCommand(settings, run, flag_keys)


class _SettingsClick(TyperCommand):
    """Click's command for a :class:`SettingsCommand`: the file applied, then the run."""

    spec: SettingsCommand

    def invoke(self, ctx: Any) -> Any:
        given = frozenset(name for name in ctx.params if _given(ctx, name))
        with user_errors():
            if self.spec.flag_keys and ctx.params.get("config") is not None:
                types = typing.get_type_hints(self.spec.settings, include_extras=True)
                flags = {k: v for k, v in ctx.params.items() if k != "config"}
                path = ctx.params["config"]
                ctx.params = {**apply_config(path, ctx, flags, types), "config": path}
            settings = super().invoke(ctx)  # the settings' own checks: one line, exit 2
        object.__setattr__(settings, "given", given)  # once, before anyone reads it
        return self.spec.run(settings)


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
    from parcat.core.settings import merge_settings, parse_overrides  # yaml: not for --help
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


def _given(ctx: Any, name: str) -> bool:
    """Whether parameter ``name`` came from the command line (or its environment variable)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in _FROM_COMMAND_LINE


def _settings(label: str, value: Any) -> dict[str, Any]:
    """``set:`` as a mapping: given as one, or as a list of ``KEY=VALUE``."""
    from parcat.core.settings import parse_settings

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
