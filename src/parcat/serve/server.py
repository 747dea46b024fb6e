"""``parcat serve``: one policy spec served over HTTP for a mission's agents.

Requests that arrive together become one ``step_batch`` call (micro-batching): a batcher
task takes what is queued (waiting ``max_wait_s`` for the rest of a round when clients
act together), while one compute thread runs the policy, so the event loop keeps reading
requests during a call. A stateless policy is one instance shared by every client; a
stateful one gets an instance per client session and agent. Every policy call runs on the
compute thread, so user code never runs on two threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import socket
import stat
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

from aiohttp import web
from gymnasium import spaces

from parcat.core.errors import USER_CODE_ERRORS, ConfigError, OutputError, clip
from parcat.core.resources import blas_limited
from parcat.envs.missions import Mission
from parcat.policies.base import CLOSE_TIMEOUT_S, AgentSpec, Policy, close_policies
from parcat.policies.remote import (
    WIRE_VERSION,
    decode_observations,
    encode_actions,
)
from parcat.policies.specs import PolicySpec, make_policy
from parcat.serve.stats import ServeStats

MAX_BODY_BYTES = 64 * 2**20
"""Largest request body: a batch of big observations, not a way to exhaust memory."""
SHUTDOWN_GRACE_S = 2.0
"""How long requests in flight may take to finish once the server is told to stop."""
MAX_SESSIONS = 4096
"""Stateful sessions kept at most; the least recently reset is dropped first (a client
that vanished without ``/close`` leaves its instances until then)."""


STATS = web.AppKey("stats", ServeStats)
"""Where the application keeps the server's counters (for the error middleware)."""


class BadRequest(ValueError):
    """A request that cannot be served as sent: HTTP 400 with this message."""


@dataclass
class _Call:
    """One request's observations waiting for the policy."""

    policy: Any
    obs: list[Any]
    future: asyncio.Future[list[Any]]


class PolicyServer:
    """Serves ``spec`` for every agent of ``mission``; build it, then :meth:`run` it.

    Args:
        spec: The policy, as ``-p`` names it.
        mission: The mission whose agents it plays.
        max_batch: Most observations gathered into one policy call.
        max_wait_s: How long a round of concurrent requests may wait for its stragglers.

    Raises:
        PolicyError: the spec cannot be built for some agent (every agent's is built here).
    """

    def __init__(self, spec: PolicySpec, mission: Mission, max_batch: int = 256,
                 max_wait_s: float = 0.001) -> None:
        self.spec, self.mission = spec, mission
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.agents: dict[str, AgentSpec] = {str(a.agent_id): a for a in mission.agents()}
        self._policies: dict[str, Policy] = {}
        shared: dict[tuple[str, str], Policy] = {}
        for name, agent in self.agents.items():
            spaces = (str(agent.observation_space), str(agent.action_space))
            first = shared.get(spaces)
            # the contract of `stateless`: one instance may act for any agent with the same
            # spaces (checkpoint folders may hold different weights per agent: each its own)
            if first is not None and _stateless(first) and not Path(spec.target).is_dir():
                self._policies[name] = first
            else:
                self._policies[name] = policy = make_policy(spec, mission, agent)
                shared.setdefault(spaces, policy)
        self.stateless = all(_stateless(p) for p in self._policies.values())
        self.stats = ServeStats()
        self._sessions: OrderedDict[tuple[str, str], Policy] = OrderedDict()
        self._compute = ComputeThread()
        self._queue: asyncio.Queue[_Call] = asyncio.Queue()

    def info(self) -> dict[str, Any]:
        """What ``GET /info`` answers: enough for a client to check it plays the same game."""
        return {"format": "parcat-serve", "version": WIRE_VERSION, "policy": self.spec.name,
                "mission": self.mission.name, "stateless": self.stateless,
                "agents": {name: {"observation_space": str(a.observation_space),
                                  "action_space": str(a.action_space),
                                  "instance": self._instance(name)}
                           for name, a in self.agents.items()}}

    def _instance(self, name: str) -> int:
        """Which of the served instances acts for agent ``name``: a client may batch the
        agents of one instance into one request, never those of two."""
        distinct: list[Policy] = []
        for policy in self._policies.values():
            if not any(policy is seen for seen in distinct):
                distinct.append(policy)
        return next(i for i, p in enumerate(distinct) if p is self._policies[name])

    def make_app(self) -> web.Application:
        """The aiohttp application (its start and stop run the batcher)."""
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_one_line_errors])
        app[STATS] = self.stats
        app.add_routes([web.get("/info", self._info), web.get("/stats", self._stats),
                        web.post("/step", self._step), web.post("/reset", self._reset),
                        web.post("/close", self._close)])
        app.cleanup_ctx.append(self._batcher)
        return app

    async def _batcher(self, app: web.Application) -> Any:
        task = asyncio.create_task(self._batches(), name="parcat-serve-batcher")
        yield
        task.cancel()

    async def _info(self, request: web.Request) -> web.Response:
        return web.json_response(self.info())

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats.to_dict())

    async def _step(self, request: web.Request) -> web.Response:
        started = perf_counter()
        name = self._agent(request)
        policy = self._policies[name] if self.stateless else self._session_policy(request, name)
        try:
            obs = decode_observations(await request.read())
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        _check_observations(obs, self.agents[name].observation_space, name)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Call(policy, obs, future))
        body = encode_actions(await future)
        self.stats.request(len(obs), perf_counter() - started)
        return web.Response(body=body, content_type="application/octet-stream")

    async def _reset(self, request: web.Request) -> web.Response:
        name = self._agent(request)
        seed = _int_param(request, "seed")
        if not self.stateless:
            key = (_session(request), name)
            policy = await self._compute.call(self._reset_policy, self._sessions.pop(key, None),
                                              self.agents[name], seed)
            if isinstance(policy, _PolicyFailed):
                raise policy
            self._sessions[key] = policy
            while len(self._sessions) > MAX_SESSIONS:
                self._retire([self._sessions.popitem(last=False)[1]])
        return web.json_response({"ok": True})

    def _reset_policy(self, policy: Policy | None, agent: AgentSpec,
                      seed: int) -> Policy | _PolicyFailed:
        """A session's policy (built on its first reset) reset with ``seed``, or why not."""
        try:
            if policy is None:
                policy = make_policy(self.spec, self.mission, agent)
            policy.reset(seed)
            return policy
        except USER_CODE_ERRORS as exc:  # a PolicyError too: the spec failed for a session
            return _PolicyFailed(f"policy '{clip(self.spec.name)}' raised "
                                 f"{type(exc).__name__} in reset: {clip(str(exc), 200)}")

    async def _close(self, request: web.Request) -> web.Response:
        session = _session(request)
        self._retire([self._sessions.pop(k) for k in list(self._sessions) if k[0] == session])
        return web.json_response({"ok": True})

    def _retire(self, policies: Sequence[Policy]) -> None:
        """Close policies no client will use again, on the compute thread (after the calls
        queued before), so a close never runs beside a step."""
        for policy in policies:
            self._compute.call(close_policies, [policy])

    def _agent(self, request: web.Request) -> str:
        name = request.query.get("agent", "")
        if name not in self.agents:
            raise BadRequest(f"unknown agent {clip(repr(name))}; this server plays mission "
                             f"'{self.mission.name}', agents: {clip(', '.join(self.agents))}")
        return name

    def _session_policy(self, request: web.Request, name: str) -> Policy:
        policy = self._sessions.get((_session(request), name))
        if policy is None:
            raise BadRequest(f"no session for agent '{name}': this policy keeps state, so "
                             "POST /reset?agent=...&session=...&seed=N before /step")
        return policy

    async def _batches(self) -> None:
        """Forever: gather queued calls into a batch, run it on the compute thread."""
        together = False
        while True:
            calls = [await self._queue.get()]
            if together:  # clients acted together last time: let the rest of the round in
                await asyncio.sleep(self.max_wait_s)
            size = len(calls[0].obs)
            while size < self.max_batch and not self._queue.empty():
                calls.append(self._queue.get_nowait())
                size += len(calls[-1].obs)
            together = len(calls) > 1
            try:
                outcomes = await self._compute.call(self._run_batch, calls)
            except Exception as exc:  # parcat's own bug: fail these requests, serve the next
                outcomes = [_PolicyFailed(f"the server failed: {type(exc).__name__}: "
                                          f"{clip(str(exc), 200)}")] * len(calls)
            for call, outcome in zip(calls, outcomes, strict=True):
                if call.future.done():  # its client went away
                    continue
                if isinstance(outcome, BaseException):
                    call.future.set_exception(outcome)
                else:
                    call.future.set_result(outcome)

    def _run_batch(self, calls: Sequence[_Call]) -> list[Any]:
        """Each policy's calls as one batch; a batch that raises is tried call by call, so
        one bad request fails only itself. Runs on the compute thread."""
        outcomes: list[Any] = [None] * len(calls)
        groups: dict[int, list[int]] = {}
        for index, call in enumerate(calls):
            groups.setdefault(id(call.policy), []).append(index)
        for members in groups.values():
            results = self._act(calls[members[0]].policy,
                                [o for m in members for o in calls[m].obs])
            if isinstance(results, BaseException) and len(members) > 1:
                for m in members:
                    outcomes[m] = self._act(calls[m].policy, calls[m].obs)
                continue
            start = 0
            for m in members:
                count = len(calls[m].obs)
                outcomes[m] = results if isinstance(results, BaseException) \
                    else results[start:start + count]
                start += count
        return outcomes

    def _act(self, policy: Any, obs: list[Any]) -> list[Any] | BaseException:
        """The policy's actions for ``obs`` in one call, or what it raised."""
        batch = getattr(policy, "step_batch", None)
        try:
            actions = list(batch(obs)) if callable(batch) else [policy.step(o) for o in obs]
        except USER_CODE_ERRORS as exc:
            return _PolicyFailed(f"policy '{clip(self.spec.name)}' raised "
                                 f"{type(exc).__name__}: {clip(str(exc), 200)}")
        if len(actions) != len(obs):
            return _PolicyFailed(f"policy '{clip(self.spec.name)}': step_batch returned "
                                 f"{len(actions)} actions for {len(obs)} observations")
        self.stats.batch(len(obs))
        return actions

    async def run(self, host: str, port: int, socket_path: Path | None,
                  on_ready: Callable[[list[str]], None]) -> int:
        """Serve until SIGINT or SIGTERM; the number of the signal that stopped it.

        ``on_ready`` gets the URLs listened on (``--port 0``: the port the system chose).
        """
        loop = asyncio.get_running_loop()
        stop: asyncio.Future[int] = loop.create_future()
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        def stopped(signum: int) -> None:
            if not stop.done():
                stop.set_result(signum)

        for sig in previous:
            loop.add_signal_handler(sig, stopped, sig)
        runner = web.AppRunner(self.make_app(), access_log=None,
                               shutdown_timeout=SHUTDOWN_GRACE_S)
        owned: Path | None = None  # a socket file is removed only once it is ours
        try:
            await runner.setup()
            await _listen(runner, host, port, socket_path)
            owned = socket_path
            on_ready([_url(address) for address in runner.addresses])
            return await stop
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, handler)  # parcat's own again, for a signal during cleanup
            await runner.cleanup()
            if owned is not None:
                owned.unlink(missing_ok=True)
            everyone = {id(p): p for p in [*self._policies.values(), *self._sessions.values()]}
            # after the steps queued before: a policy whose step hangs is left unclosed
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._compute.call(close_policies, list(everyone.values())),
                                       CLOSE_TIMEOUT_S)


class _PolicyFailed(Exception):
    """The served policy raised: HTTP 500 with this message (the client's episode fails)."""


class ComputeThread:
    """One daemon thread that runs the policy's calls in order. Not a thread pool: its
    threads are joined at exit, so a policy that hangs would keep a stopped server alive."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="parcat-serve-policy", daemon=True).start()

    def call(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` on the thread; its result (or what it raised) in the future."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((loop, future, fn, args))
        return future

    def _serve(self) -> None:
        # one BLAS thread, as eval gives a lane: a round's batch is small, and a second
        # thread spinning after every call cost more CPU than the policy (BENCHMARKS.md)
        with blas_limited(1):
            while True:
                loop, future, fn, args = self._jobs.get()
                try:
                    outcome, failed = fn(*args), False
                except BaseException as exc:  # handed to the request that awaits it
                    outcome, failed = exc, True
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits
                    loop.call_soon_threadsafe(_settle, future, outcome, failed)


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.done():  # cancelled: its request went away
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


@web.middleware
async def _one_line_errors(request: web.Request,
                           handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                           ) -> web.StreamResponse:
    """Every failure as ``{"error": ONE LINE}``: 400 bad request, 500 the policy raised."""
    try:
        return await handler(request)
    except BadRequest as exc:
        request.app[STATS].bad_request()
        return web.json_response({"error": clip(str(exc), 500)}, status=400)
    except _PolicyFailed as exc:
        return web.json_response({"error": str(exc)}, status=500)
    except web.HTTPException as exc:  # aiohttp's own: unknown path, wrong method, too large
        request.app[STATS].bad_request()
        return web.json_response({"error": f"{exc.status} {exc.reason}: {request.method} "
                                           f"{clip(request.path)}"}, status=exc.status)
    except ValueError as exc:  # actions that do not stack into one array
        return web.json_response({"error": clip(f"cannot send the actions: {exc}", 500)},
                                 status=500)


def _session(request: web.Request) -> str:
    session = request.query.get("session", "")
    if not 0 < len(session) <= 128:
        raise BadRequest("expected ?session=ID (1 to 128 characters) naming the client")
    return session


def _int_param(request: web.Request, name: str) -> int:
    try:
        return int(request.query[name])
    except (KeyError, ValueError):
        raise BadRequest(f"expected ?{name}=N, a whole number") from None


def _stateless(policy: Any) -> bool:
    return bool(getattr(policy, "stateless", False))


def _check_observations(obs: list[Any], space: spaces.Space[Any], agent: str) -> None:
    """Refuse observations of the wrong shape or kind before they join a batch (they would
    fail the other clients' requests batched with them)."""
    if not obs:
        raise BadRequest("no observations in the request")
    if not _fits(obs[0], space):
        raise BadRequest(f"observations for agent '{agent}' do not fit its observation "
                         f"space {clip(str(space), 120)}")


def _fits(value: Any, space: spaces.Space[Any]) -> bool:
    if isinstance(space, spaces.Dict):
        return isinstance(value, dict) and set(value) == set(space.spaces) and all(
            _fits(value[k], sub) for k, sub in space.spaces.items())
    shape = getattr(value, "shape", None)
    numeric = getattr(getattr(value, "dtype", None), "kind", "") in "biuf"
    if isinstance(space, spaces.Box | spaces.MultiBinary | spaces.MultiDiscrete):
        return numeric and shape == space.shape
    if isinstance(space, spaces.Discrete):
        return numeric and shape == ()
    return True


async def _listen(runner: web.AppRunner, host: str, port: int,
                  socket_path: Path | None) -> None:
    """Start the TCP site (and the Unix socket one), each refusal one line."""
    sites: list[web.BaseSite] = [web.TCPSite(runner, host, port)]
    if socket_path is not None:
        _clear_stale_socket(socket_path)
        sites.append(web.UnixSite(runner, str(socket_path)))
    for site in sites:
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(f"cannot listen on {site.name}: {exc.strerror or exc}; choose "
                              "another --host/--port (--port 0: any free port) or "
                              "--socket") from None


def _clear_stale_socket(path: Path) -> None:
    """Remove a socket file a killed server left, never a live server's nor another file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OutputError(f"--socket {path}: exists and is not a socket; give a new path")
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink(missing_ok=True)  # nobody listens: a stale file
            return
    raise OutputError(f"--socket {path}: another server listens on it; give another path")


def _url(address: Any) -> str:
    if isinstance(address, str):
        return f"unix:{address}"
    host = address[0]
    return f"http://[{host}]:{address[1]}" if ":" in host else f"http://{host}:{address[1]}"


def serve(server: PolicyServer, host: str, port: int, socket_path: Path | None,
          on_ready: Callable[[list[str]], None]) -> int:
    """Run ``server`` in a new event loop until SIGINT/SIGTERM; the signal's number."""
    return asyncio.run(server.run(host, port, socket_path, on_ready))
