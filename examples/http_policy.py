"""A policy whose model sits behind an HTTP server: the same policy sync and async.

The server answers ``POST {"obs": [...], "num_actions": N}`` with ``{"action": A}``.
From the repository's root (``examples`` is then importable)::

    parcat eval -m harvest -p examples.http_policy:AsyncHttpPolicy,url=http://127.0.0.1:8000/act

parcat keeps every agent's ``await`` in flight at once on one event loop, applies
``--action-timeout-ms`` to each call and retries 429, 5xx and dropped connections
``--retries`` times (default 1), so the async form needs no thread per agent.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from parcat.policies.base import AgentSpec

TLS = ssl.create_default_context()
"""Shared by every client: loading the CA certificates for each would cost ~50 ms a client."""


class HttpPolicy:
    """Sync: one blocking request per step (threads give parcat concurrency)."""

    def __init__(self, spec: AgentSpec, url: str, timeout_s: float = 10.0) -> None:
        self.url = url
        self.num_actions = int(spec.action_space.n)
        self.client = httpx.Client(timeout=timeout_s, verify=TLS)  # its connection is reused

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
    """Async: ``step`` awaits the server, so many agents' requests are in flight at once."""

    def __init__(self, spec: AgentSpec, url: str, timeout_s: float = 10.0) -> None:
        self.url = url
        self.num_actions = int(spec.action_space.n)
        self.timeout_s = timeout_s
        self.async_client: httpx.AsyncClient | None = None

    async def step(self, obs: Any) -> int:  # type: ignore[override]
        if self.async_client is None:
            # made on parcat's event loop, which lives as long as the process: the client
            # and its connection are reused by every later step and episode (a client per
            # agent: one pool shared by hundreds of connections makes httpx slow)
            self.async_client = httpx.AsyncClient(timeout=self.timeout_s, verify=TLS)
        response = await self.async_client.post(self.url, json=self._request(obs))
        response.raise_for_status()
        return int(response.json()["action"])

    async def close(self) -> None:  # type: ignore[override]
        """Awaited on parcat's event loop, where the client lives, when parcat is done."""
        if self.async_client is not None:
            await self.async_client.aclose()
