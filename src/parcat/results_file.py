"""The results file while a run is under way: written as it goes, resumed after a kill.

``--output results.json`` is rewritten atomically at most every ``every_s`` seconds with
``"status": "running"`` and the episodes so far, and a last time with the final status, so
a killed run leaves a valid file. ``--resume`` reads that file, keeps the episodes that
finished for good and runs the rest; the final file equals an uninterrupted run's.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parcat.atomic import write_text_atomically
from parcat.errors import ConfigError
from parcat.report import SCHEMA, summarize, summary_csv
from parcat.results import EpisodeResult, EpisodeStatus

# failures that depend on where and when an episode ran, not on its seeds: run them again
_TRANSIENT_PHASES = {"worker"}


def write_document(path: Path, document: dict[str, Any]) -> None:
    """Write the results file atomically: full JSON, or the summary as CSV for ``.csv``."""
    if path.suffix.lower() == ".csv":
        episodes = [EpisodeResult.from_dict(e) for e in document["episodes"]]
        text = summary_csv(summarize(episodes))
    else:
        text = json.dumps(document, indent=2) + "\n"
    write_text_atomically(path, text)


class ResultsWriter:
    """Rewrites the results file as episodes finish, at most every ``every_s`` seconds."""

    def __init__(
        self, path: Path, document: Callable[[str], dict[str, Any]], every_s: float = 1.0
    ) -> None:
        self.path = path
        self.document = document
        self.every_s = every_s
        self._last = time.monotonic()
        remove_stale_temp_files(path)

    def episode_finished(self) -> None:
        """Write a ``running`` snapshot if the last one is old enough."""
        now = time.monotonic()
        if now - self._last >= self.every_s:
            write_document(self.path, self.document("running"))
            self._last = now

    def finish(self, status: str) -> None:
        """Write the final file."""
        write_document(self.path, self.document(status))


def load_finished(path: Path, config: dict[str, Any]) -> dict[tuple[str, int], EpisodeResult]:
    """The episodes of an earlier run of the same config that need not run again.

    Raises:
        ConfigError: the file is unreadable, not parcat results, or from another config.
    """
    if not path.exists():
        return {}
    if path.suffix.lower() == ".csv":
        raise ConfigError("--resume needs a JSON --output (a CSV holds no episodes)")
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--resume: cannot read '{path}': {exc}") from exc
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ConfigError(f"--resume: '{path}' is not a parcat eval results file")
    if document.get("config") != config:
        raise ConfigError(
            f"--resume: '{path}' was written by a run with other missions, policies, "
            "episodes or seed; use another --output or the same arguments"
        )
    finished = {}
    for index, data in enumerate(document.get("episodes", [])):
        try:
            episode = EpisodeResult.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"--resume: '{path}': episode {index} is malformed "
                              f"({exc!r}); use another --output") from exc
        transient = episode.status is EpisodeStatus.TIMEOUT or (
            episode.error is not None and episode.error.phase in _TRANSIENT_PHASES
        )
        if not transient:
            finished[(episode.mission, episode.episode_index)] = episode
    return finished


def remove_stale_temp_files(path: Path) -> None:
    """Remove temp files a killed run left beside ``path`` (see :mod:`parcat.atomic`)."""
    if not path.parent.is_dir():
        return
    for leftover in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            leftover.unlink()
