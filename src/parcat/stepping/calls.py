"""Async policies: many ``async def step`` calls in flight on one event loop.

A policy is async when its ``step`` (and optionally ``step_batch``) is a coroutine
function, e.g. one that awaits a model behind an HTTP server. :class:`AsyncCalls` runs a
list of such calls at once from any thread and returns, per call, the action, the
exception, or "late" (``--action-timeout-ms`` expired), with the retries it spent on
transient errors (``--retries``). :class:`AsyncAgents` does the bookkeeping of one
episode's async agents for a stepper: default actions for late calls, and per-agent counts;
:func:`blocking` makes one async call look sync where agents step one at a time.

The calls run on :func:`parcat.policies.base.policy_loop`, the process's one loop.
"""

from __future__ import annotations

import email.utils
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import CancelledError as FutureCancelled
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from parcat.core.errors import USER_CODE_ERRORS, TransientError
from parcat.policies.base import is_async, policy_loop
from parcat.policies.builtin import noop_action

BACKOFF_S = 0.05
"""The first pause before retrying a transient error; it doubles with every retry."""
MAX_BACKOFF_S = 1.0
RETRY_AFTER_CAP_S = 10.0
"""The longest ``Retry-After`` parcat honours: a server asking for minutes would stall the
run, and with ``--action-timeout-ms`` the call is late long before."""
LOOP_GRACE_S = 0.5
"""How long past the deadline the caller waits for a loop that async code blocked (a
``time.sleep`` in an ``async def``): then its calls are late too."""
# where the exception types of the usual async HTTP clients live (matched by name, so
# parcat imports neither) and which of them mean "the connection failed, try again"
_TRANSPORT_ERRORS = {("httpx", "TransportError"), ("aiohttp", "ClientConnectionError"),
                     ("aiohttp", "ClientPayloadError")}


@dataclass(frozen=True)
class Call:
    """One call to run: ``fn(arg)``, e.g. ``policy.step(obs)`` or
    ``policy.step_batch(obs_batch)``."""

    fn: Callable[[Any], Awaitable[Any]]
    arg: Any


@dataclass(frozen=True)
class Outcome:
    """How one call ended: ``value`` if it returned, else ``error``, else ``late``."""

    value: Any = None
    error: BaseException | None = None
    late: bool = False
    """The action timeout expired first (the call was cancelled)."""
    retries: int = 0
    """Attempts after the first, each after a transient error."""


def retry_delay(exc: BaseException, retry: int) -> float | None:
    """Seconds to wait before retry number ``retry`` (0 for the first) of a call that
    raised ``exc``, or ``None`` when ``exc`` is not transient.

    Transient: :class:`parcat.TransientError`, the ``ConnectionError`` family, a
    ``TimeoutError`` (the policy's own client gave up on one request: the next may be
    answered; parcat's own deadline is never retried, it makes the call late), the
    transport errors of httpx and aiohttp, and HTTP 429 and 5xx answers raised by
    ``raise_for_status()`` (their ``Retry-After`` honoured up to
    :data:`RETRY_AFTER_CAP_S`).
    """
    backoff = min(MAX_BACKOFF_S, BACKOFF_S * 2**retry)
    if isinstance(exc, TransientError):
        return backoff if exc.retry_after is None else min(RETRY_AFTER_CAP_S, exc.retry_after)
    # asyncio's TimeoutError is the builtin one from Python 3.11 (asyncio may not be loaded)
    timeouts = (TimeoutError, getattr(sys.modules.get("asyncio"), "TimeoutError", TimeoutError))
    if isinstance(exc, (ConnectionError, *timeouts)) or any(
            (cls.__module__.partition(".")[0], cls.__name__) in _TRANSPORT_ERRORS
            for cls in type(exc).__mro__):
        return backoff
    response = getattr(exc, "response", None)  # httpx.HTTPStatusError
    status = getattr(response, "status_code", getattr(exc, "status", None))  # or aiohttp's
    if not isinstance(status, int) or not (status == 429 or 500 <= status <= 599):
        return None
    headers = getattr(response, "headers", None) or getattr(exc, "headers", None) or {}
    wait = _seconds(headers.get("Retry-After"))
    return backoff if wait is None else min(RETRY_AFTER_CAP_S, wait)


def _seconds(retry_after: str | None) -> float | None:
    """A ``Retry-After`` value (seconds, or an HTTP date) as seconds from now."""
    if not retry_after:
        return None
    try:
        return max(0.0, float(retry_after))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(retry_after)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class AsyncCalls:
    """Runs lists of async calls concurrently on the process's event loop.

    Args:
        action_timeout_s: Each call (its retries included) is late after this long.
        retries: Retries of a call that raised a transient error (:func:`retry_delay`).
    """

    def __init__(self, action_timeout_s: float | None = None, retries: int = 0) -> None:
        self.timeout = action_timeout_s
        self.retries = retries

    def run(self, calls: Sequence[Call]) -> list[Outcome]:
        """Start every call at once, wait for all, and return their outcomes in order.
        Safe from any thread; no thread is started per call."""
        outcomes: list[Outcome | None] = [None] * len(calls)
        import asyncio  # here: most runs have no async policy, and it costs ~30 ms to import

        future = asyncio.run_coroutine_threadsafe(self._all(calls, outcomes), policy_loop())
        wait = None if self.timeout is None else self.timeout + LOOP_GRACE_S
        try:
            future.result(timeout=wait)
        except (FutureTimeout, FutureCancelled):
            pass  # the loop was blocked past the deadline: what has not ended is late
        finally:
            future.cancel()  # after an interrupt, too: no call outlives its step
        return [Outcome(late=True) if o is None else o for o in outcomes]

    async def _all(self, calls: Sequence[Call], outcomes: list[Outcome | None]) -> None:
        import asyncio

        await asyncio.gather(*(self._one(call, outcomes, i) for i, call in enumerate(calls)))

    async def _one(self, call: Call, outcomes: list[Outcome | None], index: int) -> None:
        import asyncio

        spent = [0]
        try:
            outcomes[index] = await asyncio.wait_for(self._attempts(call, spent), self.timeout)
        except asyncio.TimeoutError:
            outcomes[index] = Outcome(late=True, retries=spent[0])

    async def _attempts(self, call: Call, spent: list[int]) -> Outcome:
        while True:
            try:
                return Outcome(await call.fn(call.arg), retries=spent[0])
            except USER_CODE_ERRORS as exc:  # sys.exit() in a coroutine too, not the loop's
                delay = retry_delay(exc, spent[0])
                if delay is None or spent[0] >= self.retries:
                    return Outcome(error=exc, retries=spent[0])
            spent[0] += 1
            import asyncio

            await asyncio.sleep(delay)


def call_retrying(fn: Callable[[Any], Any], arg: Any, retries: int) -> tuple[Any, int]:
    """``fn(arg)`` for a sync policy, made again after a transient error (:func:`retry_delay`)
    up to ``retries`` times; the value and the retries spent. The last error is raised."""
    spent = 0
    while True:
        try:
            return fn(arg), spent
        except Exception as exc:
            delay = retry_delay(exc, spent)
            if delay is None or spent >= retries:
                raise
        spent += 1
        time.sleep(delay)


def blocking(fn: Callable[[Any], Any], retries: int = 0) -> Callable[[Any], Any]:
    """``fn`` itself if it is sync; for a coroutine function (an async policy's ``step``), a
    sync function that runs one call on the process's loop and returns its value or raises
    its exception: for code that steps one agent at a time (a policy worker, a conformance
    check, the simulator)."""
    if not is_async(fn):
        return fn
    calls = AsyncCalls(retries=retries)

    def call(arg: Any) -> Any:
        [outcome] = calls.run([Call(fn, arg)])
        if outcome.error is not None:
            raise outcome.error
        return outcome.value

    return call


class AsyncAgents:
    """A stepper's bookkeeping for the agents of its episode whose calls are async (their
    own ``step``, or a shared ``step_batch``): a late call gives the default action
    (``noop_action``), counted in ``late``; retries are counted per agent in ``retried``.
    The calls themselves go out from :func:`parcat.stepping.base.act_in_lockstep`, every
    slot's at once."""

    def __init__(self, action_timeout_s: float | None = None, retries: int = 0) -> None:
        self.calls = AsyncCalls(action_timeout_s, retries)
        self.agents: set[Any] = set()
        self.late: dict[Any, int] = {}
        self.retried: dict[Any, int] = {}
        self._defaults: dict[Any, Any] = {}

    def start(self, action_spaces: dict[Any, Any]) -> None:
        """Take an episode's async agents (agent id -> action space)."""
        self.agents = set(action_spaces)
        self.late = dict.fromkeys(action_spaces, 0)
        self.retried = dict.fromkeys(action_spaces, 0)
        self._defaults = {a: noop_action(space) for a, space in action_spaces.items()}

    def settle(self, agent_id: Any, outcome: Outcome, action: Any) -> Any:
        """Count ``outcome``'s retries (and lateness) for ``agent_id`` and return its action:
        ``action``, or the default one when the call was late."""
        self.count_retries(agent_id, outcome.retries)
        if outcome.late:
            self.late[agent_id] += 1
            return self._defaults[agent_id]
        return action

    def count_retries(self, agent_id: Any, retries: int) -> None:
        """Add ``retries`` spent on a call for ``agent_id`` (a sync call's too)."""
        if retries:
            self.retried[agent_id] = self.retried.get(agent_id, 0) + retries
