"""A policy whose model sits behind an HTTP server: the same policy sync and async.

The server answers ``POST {"obs": [...], "num_actions": N}`` with ``{"action": A}``, and
``POST {"obs_batch": [[...], ...], "num_actions": N}`` with ``{"actions": [A, ...]}``.
From the repository's root (``examples`` is then importable)::

    parcat eval -m harvest -p examples.http_policy:AsyncHttpPolicy,url=http://127.0.0.1:8000/act

parcat keeps every agent's ``await`` in flight at once on one event loop, applies
``--action-timeout-ms`` to each call and retries 429, 5xx and dropped connections
``--retries`` times (default 1), so the async form needs no thread per agent.
``AsyncHttpBatchPolicy`` sends one request a step for every agent of every episode in
lockstep (its ``async def step_batch``).
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Sequence
from typing import Any

import aiohttp

from parcat.policies.base import AgentSpec


@functools.cache
def tls() -> ssl.SSLContext:
    """Shared by every sync client: loading the CA certificates costs ~30 ms of CPU each."""
    return ssl.create_default_context()


class HttpPolicy:
    """Sync: one blocking request per step (threads give parcat concurrency)."""

    def __init__(self, spec: AgentSpec, url: str, timeout_s: float = 10.0) -> None:
        self.url = url
        self.num_actions = int(spec.action_space.n)
        import httpx  # here: the async policies need only aiohttp (httpx: 80 ms of CPU)

        self.client = httpx.Client(timeout=timeout_s, verify=tls())  # its connection is reused

    def reset(self, seed: int) -> None:
        """The model holds no per-episode state here; a stochastic one would get ``seed``."""

    def step(self, obs: Any) -> int:
        response = self.client.post(self.url, json=self._request(obs))
        response.raise_for_status()  # a 429 or 5xx becomes an error parcat can retry
        return int(response.json()["action"])

    def _request(self, obs: Any) -> dict[str, Any]:
        return {"obs": obs.tolist(), "num_actions": self.num_actions}

    def close(self) -> None:
        """parcat calls this when it is done with the policy: the connection is closed."""
        self.client.close()


class AsyncHttpPolicy(HttpPolicy):
    """Async: ``step`` awaits the server, so many agents' requests are in flight at once.
    aiohttp's client: a fifth of httpx's CPU a request (BENCHMARKS.md, issue 22)."""

    def __init__(self, spec: AgentSpec, url: str, timeout_s: float = 10.0) -> None:
        self.url = url
        self.num_actions = int(spec.action_space.n)
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.session: aiohttp.ClientSession | None = None

    async def step(self, obs: Any) -> int:  # type: ignore[override]
        return int((await self._post(self._request(obs)))["action"])

    async def _post(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.session is None:
            # made on parcat's event loop, which lives as long as the process: the session
            # and its connections are reused by every later step and episode
            self.session = aiohttp.ClientSession(timeout=self.timeout)
        async with self.session.post(self.url, json=request) as response:
            response.raise_for_status()  # a 429 or 5xx becomes an error parcat can retry
            return dict(await response.json())

    async def close(self) -> None:  # type: ignore[override]
        """Awaited on parcat's event loop, where the session lives, when parcat is done."""
        if self.session is not None:
            await self.session.close()


class AsyncHttpBatchPolicy(AsyncHttpPolicy):
    """Async and batched: the action depends on the observation alone (``stateless``), so
    one instance acts for every agent, and one request a step carries the observations
    of all of them, of every episode in lockstep."""

    stateless = True

    async def step_batch(self, obs_batch: Sequence[Any]) -> list[int]:
        request = {"obs_batch": [obs.tolist() for obs in obs_batch],
                   "num_actions": self.num_actions}
        return [int(action) for action in (await self._post(request))["actions"]]
