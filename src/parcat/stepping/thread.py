"""The ``thread`` strategy: some agents' policies on threads, for GIL-releasing policies."""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from parcat.core.errors import USER_CODE_ERRORS, ResourceLimitError
from parcat.envs.missions import Mission
from parcat.policies.builtin import noop_action
from parcat.stepping.base import InlineStepper, PolicyStepError, Seat, straggler_wait
from parcat.stepping.calls import call_retrying


class DaemonThreadPool:
    """A fixed pool of daemon threads running submitted calls: unlike
    ``ThreadPoolExecutor``'s, a thread stuck in user code never keeps parcat from exiting."""

    def __init__(self, workers: int, name: str) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
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
        future: Future[Any] = Future()
        self._queue.put((future, fn, args))
        return future

    def _work(self) -> None:
        # Ctrl-C is the main thread's: never take it here, where it could not be handled
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # delivered to the caller, sys.exit() included
                future.set_exception(exc)

    def shutdown(self, wait: bool = False, cancel: bool = False) -> None:
        """Stop the threads once their current call returns; ``cancel`` drops queued calls."""
        if cancel:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


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
        self._pending: dict[Any, Future[Any]] = {}
        self._late: dict[Any, int] = {}
        self._defaults: dict[Any, Any] = {}
        self._index: dict[Any, int] = {}

    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        """Build and reset the policies; wait for any late step of the last episode."""
        until = time.monotonic() + straggler_wait(self.timeout)  # for them all, not each
        for agent_id, future in self._pending.items():
            try:
                future.exception(timeout=max(0.0, until - time.monotonic()))
            except FutureTimeout:
                # still running: that policy cannot be reset under it, so build a new one
                self.cache.forget(self._index[agent_id], running=future)
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
        futures: dict[Any, Future[Any]] = {}
        for agent_id in live:
            if agent_id in self._local:
                continue
            busy = self._pending.get(agent_id)
            if busy is not None and not busy.done():
                continue  # still on an earlier step: this one gets the default action
            futures[agent_id] = self._pool.submit(call_retrying, self._step_fns[agent_id],
                                                  obs[agent_id], self.awaited.calls.retries)
        actions = super().act(obs, [a for a in live if a in self._local])
        failed: tuple[Any, BaseException] | None = None
        for agent_id in live:
            if agent_id in self._local:
                continue
            future = futures.get(agent_id)
            if future is None:
                actions[agent_id] = self._late_default(agent_id)
                continue
            wait = None if deadline is None else max(0.0, deadline - time.perf_counter())
            try:
                actions[agent_id], retried = future.result(timeout=wait)
                self.awaited.count_retries(agent_id, retried)
            except FutureTimeout:
                self._pending[agent_id] = future
                actions[agent_id] = self._late_default(agent_id)
            except USER_CODE_ERRORS as exc:
                # raised once every late call is known: the next episode must not reset
                # the policy of one still running
                failed = failed or (agent_id, exc)
        if failed is not None:
            raise PolicyStepError(failed[0], "policy") from failed[1]
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
        for agent_id, future in self._pending.items():
            if not future.done():
                self.cache.forget(self._index[agent_id], running=future)
        super().close()
