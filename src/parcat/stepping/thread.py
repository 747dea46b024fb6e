"""The ``thread`` strategy: some agents' policies on threads, for GIL-releasing policies."""

from __future__ import annotations

import _thread
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from typing import Any, Protocol

from parcat.core.errors import USER_CODE_ERRORS, ResourceLimitError
from parcat.envs.missions import Mission
from parcat.policies.builtin import noop_action
from parcat.stepping.base import InlineStepper, PolicyStepError, Seat, straggler_wait
from parcat.stepping.calls import call_retrying


class Job(Protocol):
    """What a :class:`DaemonThreadPool` runs: ``run()`` on a pool thread, ``cancel()``
    instead when the pool shuts down before its turn."""

    def run(self) -> None: ...

    def cancel(self) -> None: ...


class DaemonThreadPool:
    """A fixed pool of daemon threads running submitted calls: unlike
    ``ThreadPoolExecutor``'s, a thread stuck in user code never keeps parcat from exiting."""

    def __init__(self, workers: int, name: str) -> None:
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for thread in self._threads:
            try:
                thread.start()
            except RuntimeError as exc:  # "can't start new thread"
                raise ResourceLimitError(
                    f"cannot start thread {thread.name}: {exc} (the system's limit on "
                    "threads or memory was reached); lower --jobs or raise the limit"
                ) from exc

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on a pool thread; its result or exception arrives in the future."""
        job = _FutureJob(fn, args)
        self._queue.put(job)
        return job.future

    def put(self, job: Job) -> None:
        """Run ``job`` on a pool thread (lighter than :meth:`submit`: no future)."""
        self._queue.put(job)

    def _work(self) -> None:
        # Ctrl-C is the main thread's: never take it here, where it could not be handled
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        while True:
            job = self._queue.get()
            if job is None:
                return
            job.run()

    def shutdown(self, wait: bool = False, cancel: bool = False) -> None:
        """Stop the threads once their current call returns; ``cancel`` drops queued calls."""
        if cancel:
            while True:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job.cancel()
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


class _FutureJob:
    """``fn(*args)`` delivering its result or exception (``sys.exit()`` included) to a
    future."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.future: Future[Any] = Future()
        self._fn, self._args = fn, args

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            self.future.set_result(self._fn(*self._args))
        except BaseException as exc:
            self.future.set_exception(exc)

    def cancel(self) -> None:
        self.future.cancel()


class _Round:
    """The policy calls of one step on pool threads: the episode's thread waits once for
    all of them (a ``Future`` per call costs its lock, condition and wake-up each, which
    256 waiting calls in flight feel), and a late call is still known by its own ``done``."""

    __slots__ = ("_all_done", "_left", "_lock")

    def __init__(self, calls: int) -> None:
        self._left = calls
        self._lock = _thread.allocate_lock()
        self._all_done = _thread.allocate_lock()
        if calls:
            self._all_done.acquire()

    def finish(self, call: _AgentCall) -> None:
        with self._lock:
            call.done = True
            then, call.then = call.then, []
            self._left -= 1
            last = self._left == 0
        if last:
            self._all_done.release()
        _callbacks(call, then)

    def wait(self, timeout: float | None) -> bool:
        """Wait until every call is done, ``timeout`` seconds at most; whether they are."""
        if not self._all_done.acquire(timeout=-1 if timeout is None else timeout):
            return False
        self._all_done.release()  # open for good: a later wait returns at once
        return True

    def add_done_callback(self, call: _AgentCall, fn: Callable[[Any], object]) -> None:
        with self._lock:
            if not call.done:
                call.then.append(fn)
                return
        _callbacks(call, [fn])


def _callbacks(call: _AgentCall, fns: list[Callable[[Any], object]]) -> None:
    """Run ``fns`` on ``call``; one that raises is logged, as a ``Future``'s callback is:
    the pool thread and the episode's thread go on."""
    for fn in fns:
        try:
            fn(call)
        except Exception:
            logging.getLogger(__name__).exception("a callback of a late policy step raised")


class _AgentCall:
    """One agent's policy step (with its retries) on a pool thread: ``value`` is the
    action and the retries spent, or ``error`` what it raised, once ``done``."""

    __slots__ = ("_fn", "_obs", "_retries", "done", "error", "round", "then", "value")

    def __init__(self, fn: Callable[[Any], Any], obs: Any, retries: int) -> None:
        self._fn, self._obs, self._retries = fn, obs, retries
        self.round: _Round
        self.value: tuple[Any, int] = (None, 0)
        self.error: BaseException | None = None
        self.done = False
        self.then: list[Callable[[Any], object]] = []

    def run(self) -> None:
        try:
            self.value = call_retrying(self._fn, self._obs, self._retries)
        except BaseException as exc:  # delivered to the episode's thread, sys.exit() too
            self.error = exc
        self.round.finish(self)

    def cancel(self) -> None:
        self.error = CancelledError()
        self.round.finish(self)

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call ``fn(self)`` once the step ended (now, if it has)."""
        self.round.add_done_callback(self, fn)


class ThreadStepper(InlineStepper):
    """Some agents' policies on ``threads`` threads while this thread steps its own share
    (pays only for policies that release the GIL). A policy later than ``action_timeout_s``
    gets the default action for the step."""

    name = "thread"

    def __init__(self, threads: int, action_timeout_s: float | None = None,
                 retries: int = 0) -> None:
        super().__init__(action_timeout_s, retries)
        self.threads = max(1, threads)
        self.timeout = action_timeout_s
        self._pool = DaemonThreadPool(self.threads, "parcat-policy")
        self._pending: dict[Any, _AgentCall] = {}
        self._late: dict[Any, int] = {}
        self._defaults: dict[Any, Any] = {}
        self._index: dict[Any, int] = {}

    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        """Build and reset the policies; wait for any late step of the last episode."""
        until = time.monotonic() + straggler_wait(self.timeout)  # for them all, not each
        for agent_id, call in self._pending.items():
            if call.done or call.round.wait(max(0.0, until - time.monotonic())):
                continue
            if not call.done:
                # still running: that policy cannot be reset under it, so build a new one
                self.cache.forget(self._index[agent_id], running=call)
        self._pending = {}
        super().start(mission, seats)
        self._late = {s.agent.agent_id: 0 for s in seats}
        self._index = {s.agent.agent_id: s.agent.agent_index for s in seats}
        self._defaults = {s.agent.agent_id: noop_action(s.agent.action_space) for s in seats}
        # with a deadline no agent steps on this thread: only a pool thread can be late
        share = 0 if self.timeout is not None else len(seats) // (self.threads + 1)
        # async policies wait on the event loop, never on a thread
        self._local = {s.agent.agent_id for s in seats[:share]} | self.awaited.agents

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        """Dispatch the threads' agents, step the local ones, then collect."""
        deadline = None if self.timeout is None else time.perf_counter() + self.timeout
        calls: dict[Any, _AgentCall] = {}
        for agent_id in live:
            busy = self._pending.get(agent_id)
            if agent_id in self._local or (busy is not None and not busy.done):
                continue  # stepped here, or still on an earlier step (the default action)
            calls[agent_id] = _AgentCall(self._step_fns[agent_id], obs[agent_id],
                                    self.awaited.calls.retries)
        this_step = _Round(len(calls))
        for call in calls.values():
            call.round = this_step
            self._pool.put(call)
        actions = super().act(obs, [a for a in live if a in self._local])
        this_step.wait(None if deadline is None else max(0.0, deadline - time.perf_counter()))
        failed: tuple[Any, BaseException] | None = None
        for agent_id in live:
            if agent_id in self._local:
                continue
            sent = calls.get(agent_id)
            if sent is None or not sent.done:
                if sent is not None:  # known late before any error is raised: the next
                    self._pending[agent_id] = sent  # episode must not reset it mid-step
                actions[agent_id] = self._late_default(agent_id)
            elif sent.error is not None:
                failed = failed or (agent_id, sent.error)
            else:
                actions[agent_id], retried = sent.value
                self.awaited.count_retries(agent_id, retried)
        if failed is not None:
            if isinstance(failed[1], USER_CODE_ERRORS):
                raise PolicyStepError(failed[0], "policy") from failed[1]
            raise failed[1]
        return {a: actions[a] for a in live}

    def _late_default(self, agent_id: Any) -> Any:
        self._late[agent_id] += 1
        return self._defaults[agent_id]

    def late_actions(self) -> dict[Any, int]:
        return {**self._late, **self.awaited.late}

    def close(self) -> None:
        """Stop the threads (a hung policy thread is abandoned, not joined; its policy is
        closed only if its step ever ends)."""
        self._pool.shutdown(wait=False, cancel=True)
        for agent_id, call in self._pending.items():
            if not call.done:
                self.cache.forget(self._index[agent_id], running=call)
        super().close()
