"""One way to build a command's settings: defaults < the ``-c`` file < flags given.

A command's settings are a frozen :class:`Settings` dataclass whose fields are its flags,
each written once (its ``Annotated`` type carries its ``typer.Option``); Typer builds the
command from it (:class:`SettingsCommand`) and Click tells which flags the command line gave
(:attr:`Settings.given`). For ``eval`` and ``plan`` the file's keys are the fields' names
(``set``: a mapping, or a list of ``KEY=VALUE``, merged key by key with ``--set``); a command
whose file says some things its own way (train's ``overrides``) turns them into the flags'
(:meth:`Settings.from_file`). ``sim``'s file is the simulation itself: it hands the flags
given to its reader.
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand

from parcat.cli.common import user_errors
from parcat.core.errors import ConfigError, brief, clip

COMMAND_LINE_ONLY = ("trust_code",)
"""Flags a file cannot set: a file must not allow the code that files name."""
_EXPECTED = {bool: "true or false", int: "an integer", float: "a number", str: "text",
             Path: "a path"}


@dataclass(frozen=True)
class Settings:
    """The base of a command's settings: a frozen dataclass whose fields are its flags."""

    given: frozenset[str] = field(default=frozenset(), init=False, compare=False)
    """The fields the command line gave (on top of a file); made in Python, every field."""
    FILE_KEYS: ClassVar[tuple[str, ...]] = ()
    """Keys of the ``-c`` file that are no field (:meth:`from_file` turns them into fields)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "given", frozenset(f.name for f in fields(self) if f.init))

    def given_of(self, names: Iterable[str]) -> dict[str, Any]:
        """The fields among ``names`` that were given, by name (to go on top of a file)."""
        return {name: getattr(self, name) for name in names if name in self.given}

    @classmethod
    def from_file(cls, label: str, data: dict[str, Any], values: Mapping[str, Any],
                  given: frozenset[str]) -> dict[str, Any]:
        """The ``-c`` file's keys as fields (``values``: the command line's, ``given`` by it)."""
        return data

    @classmethod
    def default_config(cls, values: Mapping[str, Any]) -> Path | None:
        """The ``-c`` file to read when none is given (``values``: the command line's)."""
        return None


@dataclass(frozen=True)
class SettingsCommand:
    """A command that builds its :class:`Settings` once and gives them to :attr:`run`."""

    settings: type[Settings]
    run: Callable[[Any], Any]
    """What the command does with them; its docstring is the command's help."""
    flag_keys: bool = True
    """The ``-c`` file's keys are the fields' names; else ``run`` reads the file itself."""
    skips: type[Settings] | None = None
    """Settings whose fields the file may hold and this command skips (``plan``: eval's)."""

    def command(self, name: str) -> Any:
        """This command as Click's, named ``name``."""
        holder = typer.Typer(add_completion=False)
        holder.command(name, cls=_SettingsClick, help=inspect.getdoc(self.run))(self.settings)
        command: Any = typer.main.get_group(holder).commands[name]
        command.spec = self
        return command

    def parse(self, args: list[str]) -> Any:
        """The settings the command line ``args`` make, without running the command."""
        command = self.command("parcat")
        with command.make_context("parcat", list(args)) as ctx:
            return command.settings(ctx)


def settings_command(settings: type[Settings], flag_keys: bool = True,
                     skips: type[Settings] | None = None
                     ) -> Callable[[Callable[[Any], Any]], SettingsCommand]:
    """Decorate a command's function, which takes one ``settings`` object."""
    return lambda run: SettingsCommand(settings, run, flag_keys, skips)


class _SettingsClick(TyperCommand):
    """Click's command for a :class:`SettingsCommand`: the file applied, then the run."""

    spec: SettingsCommand

    def invoke(self, ctx: Any) -> Any:
        with user_errors():
            settings = self.settings(ctx)
        return self.spec.run(settings)

    def settings(self, ctx: Any) -> Settings:
        """Defaults < the ``-c`` file < the flags given, checked by the settings once."""
        given = frozenset(name for name in ctx.params if _given(ctx, name))
        path = ctx.params.get("config")
        if path is None:
            path = self.spec.settings.default_config(ctx.params)
        if self.spec.flag_keys and path is not None:
            ctx.params = {**apply_config(path, ctx, self.spec, given), "config": path}
        settings: Settings = super().invoke(ctx)
        object.__setattr__(settings, "given", given)  # once, before anyone reads it
        return settings


def apply_config(path: Path, ctx: Any, spec: SettingsCommand,
                 given: frozenset[str]) -> dict[str, Any]:
    """The command line's values with the file's keys applied wherever no flag was given.

    Raises:
        ConfigError: an unreadable file, an unknown key (named, with the valid ones), a
            value of the wrong type (named, what arrived shown in brief, never the file).
    """
    from parcat.core.settings import merge_settings, parse_overrides  # yaml: not for --help
    from parcat.core.yamlfile import read_yaml_mapping
    label = f"--config '{path}'"
    data = {str(k): v for k, v in read_yaml_mapping(path, label, ConfigError).items()}
    values = {k: v for k, v in ctx.params.items() if k != "config"}
    skipped = {f.name for f in fields(spec.skips)} - values.keys() if spec.skips else set()
    valid = sorted({*values, *spec.settings.FILE_KEYS} - set(COMMAND_LINE_ONLY))
    for name in data:
        if name in COMMAND_LINE_ONLY:
            raise ConfigError(f"{label}: key '{name}' is taken from the command line only "
                              f"(--{name.replace('_', '-')}): a file cannot allow code")
        if name not in valid and name not in skipped:
            raise ConfigError(f"{label}: unknown key '{clip(name)}'; valid: {', '.join(valid)}")
    data = spec.settings.from_file(label, {k: v for k, v in data.items() if k not in skipped},
                                   values, given)
    annotations = typing.get_type_hints(spec.settings, include_extras=True)
    for name, value in data.items():
        if name == "set":
            merged = merge_settings(set_mapping(label, value),
                                    parse_overrides(values[name] or []))
            values[name] = [f"{k}={json.dumps(v, default=str)}" for k, v in merged.items()]
        elif name not in given:
            values[name] = _convert(label, name, value, annotations[name])
    return values


def _given(ctx: Any, name: str) -> bool:
    """Whether parameter ``name`` came from the command line (or its environment variable)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def set_mapping(label: str, value: Any) -> dict[str, Any]:
    """A file's ``set:`` as a mapping: given as one, or as a list of ``KEY=VALUE``."""
    from parcat.core.settings import parse_settings
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{label}: key 'set' must be a mapping or a list of KEY=VALUE, "
                          f"got {brief(value)}")
    return parse_settings(items, lambda item: ConfigError(
        f"{label}: key 'set' expects KEY=VALUE items, got {brief(item)}"))


def _convert(label: str, key: str, value: Any, annotation: Any) -> Any:
    """``value`` as the parameter's Python type, or a one-line error naming the key."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    kind, optional = annotation, type(None) in typing.get_args(annotation)
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if typing.get_origin(kind) is list:
        items = value if isinstance(value, list) else [value]
        return [_convert(label, key, item, typing.get_args(kind)[0]) for item in items]
    if value is None and optional:
        return None
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        choices = [member.value for member in kind]
        if value not in choices:
            raise ConfigError(f"{label}: key '{key}' must be one of {', '.join(choices)}, got "
                              f"{brief(value)}")
        return value  # the string: Typer makes it the member, as from the command line
    if kind not in _EXPECTED:
        return value  # a type no flag of eval or plan has: the command checks it
    number = isinstance(value, int) and not isinstance(value, bool)
    ok = {bool: isinstance(value, bool), int: number,
          float: number or isinstance(value, float)}.get(kind, isinstance(value, str))
    if not ok:
        raise ConfigError(f"{label}: key '{key}' must be {_EXPECTED[kind]}, got {brief(value)}")
    return Path(value) if kind is Path else float(value) if kind is float else value
