"""Sub-commands imported only when they run or show their own help: ``parcat --help``
lists their summaries and imports none of them (numpy, gymnasium, the library stacks)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

from parcat.cli.common import said_interrupted
from parcat.cli.entry import signals_held


@contextlib.contextmanager
def held_imports() -> Iterator[None]:
    """Import in the block with Ctrl-C and SIGTERM held back (:func:`signals_held`); one
    that arrives meanwhile ends the run right after it, saying ``parcat: interrupted``."""
    try:
        with signals_held():
            yield
    except KeyboardInterrupt:
        said_interrupted("parcat: interrupted")
        raise


@dataclass(frozen=True)
class LazyCommand:
    """A sub-command known by name and summary until it is used."""

    name: str
    target: str
    """``module:attribute``: a command function, a ``SettingsCommand`` or a ``typer.Typer``."""
    summary: str
    """The first paragraph of the command's help (a test checks that the two agree)."""
    examples: tuple[str, ...] = ()
    """Command lines shown at the end of its help (and its sub-commands')."""

    def load(self) -> Any:
        """Import the command's module and build the command (building imports too)."""
        module, _, attribute = self.target.partition(":")
        with held_imports():
            target = getattr(importlib.import_module(module), attribute)
            holder = typer.Typer(add_completion=False)
            if hasattr(target, "settings"):  # a flag_config.SettingsCommand
                command = target.command(self.name)
            else:
                if isinstance(target, typer.Typer):
                    holder.add_typer(target, name=self.name)
                else:
                    holder.command(self.name)(target)
                command = typer.main.get_group(holder).commands[self.name]
        for each in [command, *getattr(command, "commands", {}).values()]:
            each.epilog = examples_epilog(self.examples)
        return plain_flags(command)


def examples_epilog(lines: Sequence[str]) -> str | None:
    """The end of a command's help: its example command lines, one a line (``# why``)."""
    if not lines:
        return None
    # "\\[": rich would read "[...]" in a line as markup
    return "Examples:\n" + "\n".join(line.replace("[", "\\[") for line in lines)


def plain_flags(command: Any, sub_commands: bool = True) -> Any:
    """``command`` (and its sub-commands) without the ``<bool>`` Typer's help shows beside
    on/off flags, as though they took a value."""
    help_option = command.get_help_option(command.context_class(command))
    for param in [*getattr(command, "params", ()), *([help_option] if help_option else [])]:
        boolean = getattr(getattr(param, "type_descriptor", None), "annotation", None) is bool
        if (boolean or getattr(param, "is_flag", False)) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values() if sub_commands else ():
        plain_flags(sub)
    return command


class LazyCommands(MutableMapping[str, Any]):
    """A group's commands: the lazy ones in their order, then any added as usual (which win
    over a lazy one of the same name); looking one up imports its module once."""

    def __init__(self, lazy: Sequence[LazyCommand], loaded: Mapping[str, Any]) -> None:
        self._lazy = {entry.name: entry for entry in lazy}
        self._loaded = dict(loaded)
        self.summaries_only = False
        """While set, a lazy command not yet imported is looked up as its stand-in."""

    def __getitem__(self, name: str) -> Any:
        if name in self._loaded:
            return self._loaded[name]
        entry = self._lazy[name]
        if self.summaries_only:
            return TyperCommand(name=name, help=entry.summary)
        command = self._loaded[name] = entry.load()
        return command

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._lazy and name not in self._loaded:
            raise KeyError(name)
        self._lazy.pop(name, None)
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from self._lazy
        yield from (name for name in self._loaded if name not in self._lazy)

    def __len__(self) -> int:
        return len(self._lazy.keys() | self._loaded.keys())


class LazyGroup(TyperGroup):
    """A Typer group whose :attr:`lazy_commands` are imported when used."""

    lazy_commands: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._commands = LazyCommands(self.lazy_commands, self.commands)
        self.commands = self._commands

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse the group's own options (which imports Typer's pydantic) under
        :func:`held_imports`."""
        with held_imports():
            return super().parse_args(ctx, args)

    def list_commands(self, ctx: Any) -> list[str]:
        """The names, in order, without importing any command."""
        return list(self._commands)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """This group's help: the commands' summaries, none of them imported."""
        plain_flags(self, sub_commands=False)  # here: Typer adds some options after __init__
        self._commands.summaries_only = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._commands.summaries_only = False
