"""The results file while a run is under way: written as it goes, resumed after a kill.

``--output results.json`` gets a journal ``results.json.episodes.jsonl`` (a header line, then
one line per finished episode, appended) and the document itself, rewritten atomically with
``"status": "running"`` at coarse intervals (so rewriting costs a few percent of the run at
most) and a last time with the final status, when the journal is removed. ``--resume`` reads
both after a kill and runs only the rest; the final file equals an uninterrupted run's. A
write that fails mid-run is reported once and retried; a final one raises ``WriteError``
naming what was saved.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parcat.core import jsontext, runlock, seeding
from parcat.core.atomic import write_text_atomically
from parcat.core.errors import ConfigError, OutputError, WriteError, brief, clip
from parcat.core.readfile import read_regular
from parcat.episode.results import EpisodeResult, EpisodeStatus
from parcat.episode.rollout import TaskList
from parcat.eval.report import SCHEMA, dumps_document, summarize, summary_csv

JOURNAL_SCHEMA = "parcat.eval.journal"
JOURNAL_SUFFIX = ".episodes.jsonl"
MAX_HEADER_BYTES = 1 << 24
"""A journal's first line is read up to this size to tell whether it is parcat's."""
SNAPSHOT_RATIO = 50.0
"""A snapshot waits at least this many times as long as the last one took to write."""


def journal_path(path: Path) -> Path:
    """The journal beside a results file."""
    return path.with_name(path.name + JOURNAL_SUFFIX)


def write_document(path: Path, document: dict[str, Any],
                   encoded: dict[tuple[str, int], str] | None = None) -> None:
    """Write the results file atomically: full JSON, or the summary as CSV for ``.csv``
    (``encoded``: episodes already encoded as JSON, by ``(mission, episode_index)``)."""
    if path.suffix.lower() == ".csv":
        episodes = [EpisodeResult.from_dict(e) for e in document["episodes"]]
        text = summary_csv(summarize(episodes))
    else:
        text = dumps_document(document, _episode_encoder(encoded or {}))
    write_text_atomically(path, text)


def _episode_encoder(encoded: dict[tuple[str, int], str]) -> Callable[[Any], str]:
    def encode(item: Any) -> str:
        if isinstance(item, dict) and "episode_index" in item:
            line = encoded.get((item.get("mission"), item.get("episode_index")))  # type: ignore[arg-type]
            if line is not None:
                return line
        return jsontext.dumps(item, separators=(",", ":"))
    return encode


class ResultsWriter:
    """Journals episodes as they finish and rewrites the document now and then.

    Args:
        document: The whole results document for a status (``"running"`` while going).
        config: The run's config (the journal's header, checked by ``--resume``).
        every_s: Shortest time between two snapshots of the document.
        resume: Append to the journal an interrupted run left (else start a new one).
        on_warning: Told, once per kind, about writes that failed and will be retried.
    """

    def __init__(
        self, path: Path, document: Callable[[str], dict[str, Any]],
        config: dict[str, Any], every_s: float = 30.0, resume: bool = False,
        on_warning: Callable[[str], None] | None = None, ratio: float = SNAPSHOT_RATIO,
    ) -> None:
        # evaluate checks both before the run; a direct caller's journal must be ours too
        check_journal(path)
        self.path = path
        # one writer per results file (re-entrant: the CLI already holds it for the run)
        self._lock = runlock.acquire(runlock.lock_beside(path), f"--output '{path}'",
                                     "give another --output")
        self.document = document
        self.every_s = every_s
        self.ratio = ratio
        self.on_warning = on_warning
        self._next = time.monotonic() + every_s
        self._warned: set[str] = set()
        self._saved: int | None = None  # episodes in the last document written, if any
        self.journal = None if path.suffix.lower() == ".csv" else _Journal(
            journal_path(path), config, resume)
        # each episode is encoded once, for the journal, and its text reused by every
        # document written after (encoding was most of a document's cost)
        self._encoded: dict[tuple[str, int], str] = {}

    def episode_finished(self, result: EpisodeResult | None = None) -> None:
        """Journal ``result``; write a ``running`` snapshot if the last one is old enough."""
        if self.journal is not None and result is not None:
            line = jsontext.dumps(result.to_dict(), separators=(",", ":"))
            self._encoded[(result.mission, result.episode_index)] = line
            if not self.journal.append(line):
                self._warn("journal", f"could not append to '{self.journal.path}' "
                           f"({self.journal.error}); trying again with the next episode")
        now = time.monotonic()
        if now >= self._next:
            try:
                self._write(self.document("running"))
            except OSError as exc:
                self._warn("snapshot", f"could not write a snapshot of --output '{self.path}' "
                           f"({exc.strerror or exc}); trying again later")
            self._next = time.monotonic() + max(self.every_s,
                                                self.ratio * (time.monotonic() - now))

    def finish(self, status: str) -> None:
        """Write the final file and drop the journal (``WriteError`` says what was saved)."""
        try:
            self._write(self.document(status))
        except OSError as exc:
            self._lock.release()
            raise WriteError(f"could not write --output '{self.path}' ({exc.strerror or exc}); "
                             f"{self._what_was_saved()}") from None
        if self.journal is not None:
            self.journal.remove()
        self._lock.release()

    def _write(self, document: dict[str, Any]) -> None:
        write_document(self.path, document, self._encoded)
        self._saved = len(document["episodes"])

    def _what_was_saved(self) -> str:
        if self.journal is not None and self.journal.complete:
            return (f"every finished episode is in '{self.journal.path}' "
                    "(rerun with --resume to write the file from it)")
        saved = [(self._saved or 0, f"'{self.path}' holds a snapshot of {self._saved} episodes")]
        if self.journal is not None:
            saved.append((self.journal.episodes, f"'{self.journal.path}' holds "
                          f"{self.journal.episodes} episodes"))
        count, where = max(saved)
        if count == 0:
            return "nothing was saved"
        return f"{where} (rerun with --resume where there is room to run only the rest)"

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self._warned and self.on_warning is not None:
            self._warned.add(kind)
            self.on_warning(message)


class _Journal:
    """An append-only file of episode lines; a failed append leaves no partial line."""

    def __init__(self, path: Path, config: dict[str, Any], resume: bool) -> None:
        self.path = path
        self.error = ""
        self.episodes = 0
        """Episode lines in the file (this run's and, when resuming, the earlier run's)."""
        self._backlog: list[bytes] = []  # lines a failed append still owes the file
        self._owed = 0  # episodes among them
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
        keep = resume and path.exists() and path.stat().st_size > 0
        if not keep:
            flags |= os.O_TRUNC
        self._fd: int | None = os.open(path, flags, 0o666)
        self._end = os.fstat(self._fd).st_size
        if keep:
            self._end = _cut_partial_line(self._fd, self._end)
        else:
            header = {"schema": JOURNAL_SCHEMA, "version": 1, "config": config}
            self._backlog.append(_line(header))
            self._flush()

    @property
    def complete(self) -> bool:
        """Every episode so far is in the file."""
        return self._fd is not None and not self._backlog

    def append(self, line: str) -> bool:
        """Add one episode's JSON ``line`` (and any a failed append owes); ``False`` if failed."""
        self._backlog.append((line + "\n").encode())
        self._owed += 1
        return self._flush()

    def _flush(self) -> bool:
        if self._fd is None:
            return False
        data = b"".join(self._backlog)
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                # a short write is how a full disk shows itself mid-line
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            self.error = exc.strerror or str(exc)
            # a partial line would spoil the next one: cut the file back to its last line
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._end)
            return False
        self._end += len(data)
        self.episodes += self._owed
        self._owed = 0
        self._backlog.clear()
        return True

    def remove(self) -> None:
        """Close and delete the journal (the document now holds everything)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            opened, current = os.fstat(self._fd), os.lstat(self.path)
            if (opened.st_ino, opened.st_dev) == (current.st_ino, current.st_dev):
                self.path.unlink()  # still the file this run wrote, nothing put there since
        os.close(self._fd)
        self._fd = None


def _line(data: dict[str, Any]) -> bytes:
    return (jsontext.dumps(data, separators=(",", ":")) + "\n").encode()


def _cut_partial_line(fd: int, size: int) -> int:
    """Drop a last line a killed write left without its newline; return the new size."""
    if size == 0:
        return 0
    tail = os.pread(fd, min(size, 1 << 20), max(0, size - (1 << 20)))
    if tail.endswith(b"\n"):
        return size
    keep = size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
    os.ftruncate(fd, keep)
    return keep


def read_results(path: Path, flag: str, schema: str = SCHEMA,
                 what: str = "a parcat eval results file") -> dict[str, Any]:
    """A results file parcat wrote, ``what`` with ``schema`` (else ``ConfigError`` naming
    ``flag`` and the file)."""
    try:
        data = read_regular(path)
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot read '{path}' ({exc.strerror})") from None
    document = _read_json(path, data, flag)
    if not isinstance(document, dict) or document.get("schema") != schema:
        raise ConfigError(f"{flag}: '{path}' is not {what}")
    if not isinstance(document.get("episodes", []), list):
        raise ConfigError(f"{flag}: '{path}': \"episodes\" is not a list")
    return document


def load_finished(path: Path, config: dict[str, Any], tasks: TaskList | None = None
                  ) -> dict[tuple[str, int], EpisodeResult]:
    """The episodes of an earlier run of the same config, in the results file and its
    journal, that need not run again (a timeout or a lost worker runs again).

    With ``tasks`` (the run's), every episode must be one of them, with its seed; one found
    in both files must be the same. Anything else is a ``ConfigError`` naming file and line.
    """
    if path.suffix.lower() == ".csv":
        if path.exists():
            raise ConfigError("--resume needs a JSON --output (a CSV holds no episodes)")
        return {}
    episodes: list[tuple[str, Any]] = []
    if path.exists():
        document = read_results(path, "--resume")
        _same_config(path, document.get("config"), config)
        episodes += [(f"'{path}': episode {i}", e)
                     for i, e in enumerate(document.get("episodes", []))]
    episodes += _journal_lines(journal_path(path), config)
    finished: dict[tuple[str, int], tuple[EpisodeResult, str]] = {}
    for where, data in episodes:
        episode = read_episode(data, f"--resume: {where}", "; use another --output")
        if tasks is not None:
            _check_task(where, episode, tasks)
        # failures that depend on where and when an episode ran, not on its seeds
        if episode.status is EpisodeStatus.TIMEOUT or (
                episode.error is not None and episode.error.phase == "worker"):
            continue
        key = (episode.mission, episode.episode_index)
        text = json.dumps(episode.to_dict(), sort_keys=True)
        if key in finished and finished[key][1] != text:
            raise ConfigError(f"--resume: {where} holds episode {episode.episode_index} of "
                              f"mission '{clip(episode.mission)}' again with other results; "
                              "the file was changed: use another --output")
        finished[key] = (episode, text)
    return {key: episode for key, (episode, _) in finished.items()}


def _check_task(where: str, episode: EpisodeResult, tasks: TaskList) -> None:
    name, index = episode.mission, episode.episode_index
    position = tasks.position((name, index))
    if position is None:
        raise ConfigError(f"--resume: {where} is episode {brief(index)} of mission "
                          f"'{clip(name)}', not one of this run's ({tasks.episodes} episodes "
                          "of each mission); the file was changed: use another --output")
    mission = tasks.missions[position // tasks.episodes]
    seed = seeding.episode_seed(tasks.seed, mission.key, index)
    if episode.seed != seed:
        raise ConfigError(f"--resume: {where} gives episode {index} of mission '{clip(name)}' "
                          f"seed {brief(episode.seed)}, but this run's is {seed}; the file was "
                          "changed: use another --output")
    known = {str(spec.agent_id) for spec in mission.agents()}
    stranger = next((a.agent_id for a in episode.agents if a.agent_id not in known), None)
    if stranger is not None:
        raise ConfigError(f"--resume: {where} gives a result of agent '{clip(stranger)}', not "
                          f"an agent of mission '{clip(name)}' ({', '.join(sorted(known))}); "
                          "the file was changed: use another --output")


def _journal_lines(path: Path, config: dict[str, Any]) -> list[tuple[str, Any]]:
    """The episodes in a journal (a last line cut by a kill is ignored)."""
    try:
        lines = read_regular(path).split(b"\n")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"--resume: cannot read '{path}' ({exc.strerror})") from None
    complete = lines[:-1]  # after the last newline: empty, or a line a kill cut
    if not complete:
        return []
    header = _read_json(path, complete[0], "--resume", line=1)
    if not isinstance(header, dict) or header.get("schema") != JOURNAL_SCHEMA:
        raise ConfigError(f"--resume: '{path}' is not a parcat eval journal; remove it")
    _same_config(path, header.get("config"), config)
    return [(f"'{path}' line {n}", _read_json(path, line, "--resume", line=n))
            for n, line in enumerate(complete[1:], start=2)]


def _read_json(path: Path, data: bytes, flag: str, line: int | None = None) -> Any:
    where = f"'{path}'" + (f" line {line}" if line is not None else "")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{flag}: {where} is not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        reason = (exc.msg if isinstance(exc, json.JSONDecodeError) else
                  "nested too deeply" if isinstance(exc, RecursionError) else
                  "a number too long")  # Python reads integers of at most 4,300 digits
        raise ConfigError(f"{flag}: cannot read {where}: not valid JSON ({reason})") from None


def _same_config(path: Path, saved: Any, config: dict[str, Any]) -> None:
    if saved != config:
        raise ConfigError(
            f"--resume: '{path}' was written by a run with other missions, policies, "
            "episodes or seed; use another --output or the same arguments"
        )


def read_episode(data: Any, where: str, fix: str) -> EpisodeResult:
    """An episode of a results file; else a ``ConfigError``: ``where`` is malformed, ``fix``."""
    try:
        return EpisodeResult.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where} is malformed ({clip(repr(exc), 200)}){fix}") from None


def check_journal(path: Path) -> None:
    """Refuse (``OutputError``), before the run, a file at the journal's path beside
    ``path`` that is not a parcat journal (or empty): the run would replace it."""
    journal = journal_path(path)
    if path.suffix.lower() == ".csv" or not os.path.lexists(journal):
        return
    try:
        fd = os.open(journal, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        ours = False
    else:
        with os.fdopen(fd, "rb") as file:
            ours = stat.S_ISREG(os.fstat(fd).st_mode) and _is_journal_header(
                file.readline(MAX_HEADER_BYTES), os.fstat(fd).st_size)
    if not ours:
        raise OutputError(f"--output '{path}': '{journal}' is not a parcat eval journal, and "
                          "the run would replace it; move it away or give another --output")


def _is_journal_header(line: bytes, size: int) -> bool:
    if size == 0:
        return True
    with contextlib.suppress(ValueError, RecursionError):
        header = json.loads(line)
        return isinstance(header, dict) and header.get("schema") == JOURNAL_SCHEMA
    return False
