"""Sub-commands imported only when they are used, so ``parcat --help`` imports none of them.

Each command module imports the library it drives (numpy, gymnasium, the training and
simulation stacks): together well over a quarter of a second. The ``parcat`` group knows
its commands as :class:`LazyCommand` entries (a name, where the command lives, and the
one-line summary its own help starts with); a command's module is imported when that
command runs or shows its own help, and ``parcat --help`` lists the summaries without
importing anything.
"""

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
    """Import in the block with Ctrl-C and SIGTERM held back (:func:`signals_held`).

    One that arrives meanwhile ends the run right after the block, with the one line
    ``parcat: interrupted``: the command has not started its work, so nothing else would
    say why the run ended. Commands import the library they drive in one of these.
    """
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
    """The word on the command line (``eval``)."""
    target: str
    """``module:attribute``: a command function, a ``SettingsCommand`` or a ``typer.Typer``."""
    summary: str
    """The first paragraph of the command's help, listed by the group's ``--help`` (a test
    checks that the two agree)."""

    def load(self) -> Any:
        """Import the command's module and build the command as Typer would have.

        Under :func:`held_imports`: building imports too (Typer's pydantic).
        """
        module, _, attribute = self.target.partition(":")
        with held_imports():
            target = getattr(importlib.import_module(module), attribute)
            holder = typer.Typer(add_completion=False)
            if hasattr(target, "settings"):  # a flag_config.SettingsCommand
                return plain_flags(target.command(self.name))
            if isinstance(target, typer.Typer):
                holder.add_typer(target, name=self.name)
            else:
                holder.command(self.name)(target)
            return plain_flags(typer.main.get_group(holder).commands[self.name])

    def summary_only(self) -> TyperCommand:
        """A stand-in that shows the summary in a list of commands and does nothing else."""
        return TyperCommand(name=self.name, help=self.summary)


def plain_flags(command: Any, sub_commands: bool = True) -> Any:
    """``command`` (and its sub-commands) with no value shown for on/off flags.

    Typer's help shows ``<bool>`` beside every flag, ``--help`` included, as though it
    took a value; a flag takes none, so its metavar is left empty.
    """
    help_option = command.get_help_option(command.context_class(command))
    for param in [*getattr(command, "params", ()), *([help_option] if help_option else [])]:
        boolean = getattr(getattr(param, "type_descriptor", None), "annotation", None) is bool
        if (boolean or getattr(param, "is_flag", False)) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values() if sub_commands else ():
        plain_flags(sub)
    return command


class LazyCommands(MutableMapping[str, Any]):
    """A group's commands: the lazy ones in their order, then any added as usual.

    Listing the names imports nothing; looking one up imports its module once. A command
    added as usual (``@app.command``) wins over a lazy one of the same name.
    """

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
            return entry.summary_only()
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
    """A Typer group whose :attr:`lazy_commands` are imported when used (``cls=`` of a
    ``typer.Typer``); its own help lists their summaries without importing them."""

    lazy_commands: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._commands = LazyCommands(self.lazy_commands, self.commands)
        self.commands = self._commands

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse the group's own options, under :func:`held_imports`: converting the first
        option value imports Typer's pydantic (a tenth of a second)."""
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
