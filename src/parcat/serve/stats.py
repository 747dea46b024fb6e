"""What ``parcat serve`` counts: requests, observations, batch sizes and latency."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np

LATENCY_SAMPLES = 100_000
"""Latencies kept for the percentiles: the most recent, so memory stays bounded."""


class ServeStats:
    """Counters of one server, safe to update from the event loop and the compute thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.observations = 0
        self.batches = 0
        self.max_batch = 0
        self._batched = 0
        self.bad_requests = 0
        self._latencies: deque[float] = deque(maxlen=LATENCY_SAMPLES)

    def request(self, observations: int, latency_s: float) -> None:
        """One ``/step`` answered."""
        with self._lock:
            self.requests += 1
            self.observations += observations
            self._latencies.append(latency_s)

    def batch(self, size: int) -> None:
        """One policy call over ``size`` observations."""
        with self._lock:
            self.batches += 1
            self._batched += size
            self.max_batch = max(self.max_batch, size)

    def bad_request(self) -> None:
        """One request refused with a 4xx."""
        with self._lock:
            self.bad_requests += 1

    def to_dict(self) -> dict[str, Any]:
        """The counters as ``GET /stats`` answers them (latencies in milliseconds)."""
        with self._lock:
            latencies = np.array(self._latencies)
            p50, p95 = (np.percentile(latencies, (50, 95)) * 1e3).tolist() \
                if len(latencies) else (None, None)
            return {"requests": self.requests, "observations": self.observations,
                    "batches": self.batches, "bad_requests": self.bad_requests,
                    "mean_batch": self._batched / self.batches if self.batches else None,
                    "max_batch": self.max_batch, "latency_p50_ms": p50, "latency_p95_ms": p95}

    def summary(self) -> str:
        """The counters on one line, for the log when the server stops."""
        d = self.to_dict()
        if not d["requests"]:
            return "no requests served"
        return (f"{d['requests']} requests, {d['observations']} observations in "
                f"{d['batches']} policy calls (mean batch {d['mean_batch']:.2f}, max "
                f"{d['max_batch']}), latency p50 {d['latency_p50_ms']:.2f} ms, p95 "
                f"{d['latency_p95_ms']:.2f} ms, {d['bad_requests']} bad requests")
