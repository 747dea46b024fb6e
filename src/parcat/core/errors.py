"""parcat's error hierarchy: one flat family, a one-line docstring each.

Every message says what was expected, what arrived and how to fix it. The CLI prints
:class:`UsageError` subclasses as one line with exit code 2 and :class:`RunError`
subclasses with exit code 1.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

BRIEF_LENGTH = 60  # most characters of a value or name that a message shows (see :func:`brief`)


class ParcatError(Exception):
    """Base class of every error parcat raises on purpose."""


USER_CODE_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit)
"""What a policy or environment may raise that fails its episode, not the run: any
exception, and ``sys.exit()`` (which would otherwise end parcat with exit code 0)."""


class UsageError(ParcatError):
    """Bad input from the user: a flag value, a spec or a file; the CLI exits with 2."""


class MissionError(UsageError):
    """A mission is unknown, or its YAML file or parameters are invalid."""


class PolicyError(UsageError):
    """A policy spec is unknown, cannot be loaded or does not fit the mission."""


class ConfigError(UsageError):
    """A configuration value or YAML file is invalid."""


class CheckpointError(UsageError):
    """A checkpoint directory is missing, incomplete or from another mission."""


class OutputError(UsageError):
    """An output path is not a regular file (or folder), or cannot be written."""


class RunLockedError(OutputError):
    """Another parcat process is writing the same run folder or output file."""


class UntrustedCodeError(UsageError):
    """A file names code from outside parcat that the user did not allow (``--trust-code``)."""


class NoteWarning(UserWarning):
    """Something the user should know that is no fault: the CLI shows ``parcat: note: ...``."""


def one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                     lineno: int, file: Any = None, line: str | None = None) -> None:
    """``warnings.showwarning`` for parcat's processes (the CLI's and its workers'): a
    warning as one line, ``parcat: warning: ...``, without Python's source location."""
    kind = "note" if issubclass(category, NoteWarning) else "warning"
    print(f"parcat: {kind}: {message}", file=file or sys.stderr)


class ConformanceError(ParcatError):
    """An environment or policy breaks the contract that parcat.testing checks."""


class RunError(ParcatError):
    """A run failed after it started (a worker, an episode); the CLI exits with 1."""


class EpisodeError(RunError):
    """An environment or policy raised inside an episode."""


class WorkerError(RunError):
    """A worker process died, hung or sent back something unreadable."""


class WriteError(RunError):
    """A results or checkpoint file could not be written during or at the end of a run."""


class ResourceLimitError(RunError):
    """The system refused a process or thread (a process-count or memory limit)."""


class TransientError(Exception):
    """Raised by a policy's step: this call failed but may succeed if tried again
    (``--retries`` times, after ``retry_after`` seconds if given, else a short backoff)."""

    def __init__(self, message: str = "", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def brief(value: Any, limit: int = BRIEF_LENGTH) -> str:
    """``repr(value)`` cut to ``limit`` characters, ending ``…`` when cut: a message names
    what arrived, never echoes a huge value whole."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int of more than 4,300 digits, deep nesting
        text = f"<{type(value).__name__} too large to show>"
    return clip(text, limit)


def clip(text: str, limit: int = BRIEF_LENGTH) -> str:
    """``text`` on one line (line breaks become spaces), cut to ``limit`` characters, ending
    ``…`` when cut."""
    if "\n" in text or "\r" in text:
        text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def did_you_mean(word: Any, choices: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean 'PREFIX.X'?)`` for the choice closest to a mistyped ``word``, else
    ``""`` (also for a word that is no text: a YAML key may be a number)."""
    import difflib
    close = difflib.get_close_matches(word, list(choices), n=1) if isinstance(word, str) else []
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""
