"""What every command shares: output formats and turning errors into exit codes."""

from __future__ import annotations

import contextlib
import csv
import enum
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer

from parcat.core.errors import ParcatError, UsageError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 141
"""stdout's reader went away (``| head``): what a shell reports for death by SIGPIPE."""
EXIT_TERMINATED = 143

TERMINATED = threading.Event()
"""Set when SIGTERM ended the run, so an interrupted run exits with 143, not 130."""
INTERRUPT_SAID = threading.Event()
"""Set once a line on stderr said that the run was interrupted (else the CLI says it)."""


def said_interrupted(line: str) -> None:
    """Say on stderr why an interrupted run ended, once."""
    INTERRUPT_SAID.set()
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)


def wrote(path: object, what: str = "") -> None:
    """Name a file the command wrote, on stderr, in the one style every command uses:
    ``parcat: wrote PATH`` (stdout holds results only)."""
    with contextlib.suppress(OSError):
        print(f"parcat: wrote {path}{f' ({what})' if what else ''}", file=sys.stderr)


class OutputFormat(str, enum.Enum):
    """How results are printed on stdout."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"


class SummaryFormat(str, enum.Enum):
    """How a command whose output has no CSV form prints on stdout."""

    TABLE = "table"
    JSON = "json"


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn parcat's errors into one line on stderr and exit code 2 (input) or 1 (run)."""
    try:
        yield
    except ParcatError as exc:
        print(f"parcat: error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILED) from exc


def print_json(data: Any) -> None:
    """Pretty JSON on stdout."""
    from parcat.core.jsontext import dumps
    sys.stdout.write(dumps(data, indent=2) + "\n")


def write_csv(header: list[str], rows: Sequence[Sequence[Any]]) -> None:
    """Rows as CSV on stdout, quoted where a field needs it."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
