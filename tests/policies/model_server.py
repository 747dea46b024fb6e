"""A real model server on loopback for the async policy tests (aiohttp, on its own thread).

It answers ``examples/http_policy.py``'s requests after ``delay_s`` with :func:`model`'s
action. It can fail every ``fail_every``-th request with ``fail_status`` (never twice a
request with the same body, so one retry always suffices), hang forever, and hold requests
until ``hold_until`` are in flight at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

HOLD_LIMIT_S = 20.0  # a held request is answered after this long even if too few arrived


def model(obs: list[float], num_actions: int) -> int:
    """The served "model": a fixed function of the observation that moves agents around."""
    return int(sum(i * v for i, v in enumerate(obs, 1))) % num_actions


@dataclass
class ModelServer:
    """Start with :meth:`start` (or as a context manager); the counters are the server's."""

    delay_s: float = 0.005
    fail_every: int = 0
    fail_status: int = 503
    retry_after: str | None = None
    hang: bool = False
    hold_until: int = 0
    requests: int = 0
    failures: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    retry_gaps_s: list[float] = field(default_factory=list)
    """Per request that arrived again after failing, the time since it failed."""
    url: str = ""
    _failed: dict[bytes, float] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None
    _held: asyncio.Event | None = None

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=30)

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=30)
        loop.close()

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        # requests left hanging: cancelled, not left to complain that they were destroyed
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/act", self._act)
        self._held = asyncio.Event()
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/act"

    async def _act(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(body, await request.json())
        finally:
            self.in_flight -= 1

    async def _answer(self, body: bytes, data: dict[str, Any]) -> web.Response:
        if self.hang:
            await asyncio.sleep(3600)
        if self.hold_until:
            await self._hold()
        await asyncio.sleep(self.delay_s)
        failed_at = self._failed.get(body)
        if failed_at is not None:  # identical requests (two agents seeing the same) pass too
            self.retry_gaps_s.append(time.monotonic() - failed_at)
        elif self.fail_every and self.requests % self.fail_every == 0:
            self.failures += 1
            self._failed[body] = time.monotonic()
            headers = {"Retry-After": self.retry_after} if self.retry_after else None
            return web.Response(status=self.fail_status, headers=headers)
        if "obs_batch" in data:  # one answer per observation
            return web.json_response(
                {"actions": [model(obs, data["num_actions"]) for obs in data["obs_batch"]]})
        return web.json_response({"action": model(data["obs"], data["num_actions"])})

    async def _hold(self) -> None:
        assert self._held is not None
        if self.in_flight >= self.hold_until:
            self._held.set()
        try:
            await asyncio.wait_for(self._held.wait(), HOLD_LIMIT_S)
        except asyncio.TimeoutError:
            self._held.set()  # too few came at once: answer the rest without holding


def main() -> None:
    """Serve in this process until SIGTERM or Ctrl-C, the URL on stdout's first line: how
    the benchmarks run it, so its CPU is not the measured command's (it still shares the
    cores).  ``python tests/policies/model_server.py [DELAY_S [FAIL_EVERY]]``"""
    import signal
    import sys

    args = [float(a) for a in sys.argv[1:]]
    server = ModelServer(delay_s=args[0] if args else 0.005,
                         fail_every=int(args[1]) if len(args) > 1 else 0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server.start()
    print(server.url, flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
