"""A timeline of a run in the Chrome trace-event format (opens in Perfetto).

Each process records complete events against the system-wide monotonic clock, so workers'
events line up; they ship theirs back with each episode's result. Events are recorded on
named tracks; the file numbers them as thread ids named by metadata events.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from parcat.core.atomic import write_text_atomically


def now_us() -> float:
    """Microseconds on the monotonic clock shared by every process of the machine."""
    return time.monotonic() * 1e6


class Tracer:
    """Collects trace events in one process."""

    def __init__(self, track: str = "main") -> None:
        self.track = track
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def span(self, name: str, start_us: float, end_us: float, track: str | None = None,
             **args: Any) -> None:
        """Record that ``name`` ran from ``start_us`` to ``end_us`` on ``track``."""
        event = {
            "name": name, "ph": "X", "ts": start_us, "dur": max(0.0, end_us - start_us),
            "pid": os.getpid(), "tid": track or self.track, "args": args,
        }
        with self._lock:
            self.events.append(event)

    def take(self) -> list[dict[str, Any]]:
        """Hand over the events recorded so far and forget them."""
        with self._lock:
            events, self.events = self.events, []
        return events


def standard_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` as the trace-event format specifies them: integer ``tid``s, numbered per
    process in order of first appearance, each named by a ``thread_name`` metadata event
    (the track it was recorded on), and every process by a ``process_name`` event."""
    tids: dict[tuple[int, str], int] = {}
    tracks_of: dict[int, int] = {}  # tracks numbered so far, per process
    meta: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for event in events:
        pid, track = event["pid"], str(event["tid"])
        if (pid, track) not in tids:
            if pid not in tracks_of:
                meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                             "args": {"name": f"parcat {pid}"}})
            tracks_of[pid] = tids[pid, track] = tracks_of.get(pid, 0) + 1
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[pid, track],
                         "args": {"name": track}})
        out.append({**event, "tid": tids[pid, track]})
    return meta + out


def write_trace(path: str | Path, events: list[dict[str, Any]]) -> None:
    """Write ``events`` as a trace-event JSON file (see :func:`standard_events`), atomically."""
    write_text_atomically(path, json.dumps({"traceEvents": standard_events(events),
                                            "displayTimeUnit": "ms"}))
