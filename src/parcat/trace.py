"""A timeline of a run in the Chrome trace-event format (opens in Perfetto or chrome://tracing).

Each process records complete events (``"ph": "X"``) against the system-wide monotonic
clock, so events from different workers line up; workers ship theirs back with each
episode's result.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from parcat.atomic import write_text_atomically


def now_us() -> float:
    """Microseconds on the monotonic clock shared by every process of the machine."""
    return time.monotonic() * 1e6


class Tracer:
    """Collects trace events in one process."""

    def __init__(self, lane: str = "main") -> None:
        self.lane = lane
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def span(self, name: str, start_us: float, end_us: float, lane: str | None = None,
             **args: Any) -> None:
        """Record that ``name`` ran from ``start_us`` to ``end_us`` on ``lane``."""
        event = {
            "name": name, "ph": "X", "ts": start_us, "dur": max(0.0, end_us - start_us),
            "pid": os.getpid(), "tid": lane or self.lane, "args": args,
        }
        with self._lock:
            self.events.append(event)

    def take(self) -> list[dict[str, Any]]:
        """Hand over the events recorded so far and forget them."""
        with self._lock:
            events, self.events = self.events, []
        return events


def write_trace(path: str | Path, events: list[dict[str, Any]]) -> None:
    """Write ``events`` as a trace-event JSON file, atomically."""
    names = {e["pid"]: f"parcat {e['pid']}" for e in events}
    meta = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
        for pid, name in names.items()
    ]
    write_text_atomically(path, json.dumps({"traceEvents": meta + events,
                                            "displayTimeUnit": "ms"}))
