"""The policy contract; :class:`AgentSpec` (defined with the environment contract) is
re-exported here, where policy authors look for it."""

from __future__ import annotations

import inspect
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.base import AgentSpec

if TYPE_CHECKING:
    import asyncio

__all__ = ["AgentSpec", "AsyncPolicy", "BatchPolicy", "Policy", "close_policies"]

CLOSE_TIMEOUT_S = 5.0
"""How long an ``async def close`` of a policy may take before parcat goes on without it."""


@runtime_checkable
class Policy(Protocol):
    """What a user implements to act in parcat: one instance plays one agent, and draws
    all its randomness from the seed ``reset`` gets at the start of every episode."""

    def reset(self, seed: int) -> None:
        """Start an episode; reseed any randomness and clear any memory."""
        ...

    def step(self, obs: Any) -> Any:
        """Return the action for one observation."""
        ...


@runtime_checkable
class BatchPolicy(Policy, Protocol):
    """A policy that can also act for many agents (or environments) in one call."""

    def step_batch(self, obs_batch: Sequence[Any]) -> Sequence[Any]:
        """Return one action per observation, in order."""
        ...


@runtime_checkable
class AsyncPolicy(Protocol):
    """A policy whose step waits (a model server, an API): parcat keeps many agents' calls
    in flight at once on one event loop per process. It may also define
    ``async def step_batch``; ``reset`` stays sync."""

    def reset(self, seed: int) -> None:
        """Start an episode; reseed any randomness and clear any memory."""
        ...

    async def step(self, obs: Any) -> Any:
        """Return the action for one observation."""
        ...


def is_async(fn: Any) -> bool:
    """Whether ``fn`` (a policy's ``step`` or ``step_batch``) is a coroutine function."""
    return inspect.iscoroutinefunction(fn)



def policy_loop() -> asyncio.AbstractEventLoop:
    """The process's event loop for async policies, running on a daemon thread from first
    use for the life of the process: a client a policy opens on its first call
    (``httpx.AsyncClient``, ``aiohttp.ClientSession``) is bound to it and stays usable for
    every later step and episode, whichever thread asks."""
    return _Loop.get()


class _Loop:
    """The process's event loop, running on a daemon thread from first use."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = 0

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():  # a forked child has no thread
                import asyncio  # here: most runs have no async policy (~30 ms to import)

                loop = asyncio.new_event_loop()
                threading.Thread(target=cls._run, args=(loop,), name="parcat-async",
                                 daemon=True).start()
                cls._loop, cls._pid = loop, os.getpid()
            return cls._loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        # Ctrl-C is the main thread's: never take it here, where it could not be handled
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        import asyncio

        asyncio.set_event_loop(loop)
        loop.run_forever()


def close_policies(policies: Iterable[Any]) -> None:
    """Call each policy's ``close()`` if it has one (sync, or ``async def`` on
    :func:`policy_loop`, where the async ones of one call share :data:`CLOSE_TIMEOUT_S`);
    ``None`` entries are skipped. parcat drops a policy only after this, so its clients,
    sessions and files are released. A close that raises or is late is a warning, never a
    failed run."""
    deadline = time.monotonic() + CLOSE_TIMEOUT_S
    for policy in policies:
        close = getattr(policy, "close", None)
        if not callable(close):
            continue
        try:
            if is_async(close):
                import asyncio

                future = asyncio.run_coroutine_threadsafe(close(), policy_loop())
                try:
                    future.result(timeout=max(0.0, deadline - time.monotonic()))
                finally:
                    future.cancel()
            else:
                close()
        except FutureTimeout:
            warnings.warn(f"{type(policy).__name__}.close() was not done within "
                          f"{CLOSE_TIMEOUT_S:g} s", stacklevel=2)
        except USER_CODE_ERRORS as exc:
            warnings.warn(f"{type(policy).__name__}.close() raised {exc!r}", stacklevel=2)
