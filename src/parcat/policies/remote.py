"""A policy served by ``parcat serve``, used like any other: ``-p http://HOST:PORT[/AGENT]``,
or ``-p unix:PATH`` for a server on a Unix socket (``parcat serve --socket PATH``: no TCP
stack between processes of one machine).

The wire carries data, never code: observations go stacked as one ``.npy`` (an ``.npz`` of
one array per key for dict observations), actions come back as one ``.npy``, all read with
``allow_pickle=False``, so float32 values cross bit for bit. The server's ``GET /info``
names its mission, agents, spaces and whether its policy is stateless; the client checks
them against the agent it plays before the run starts.
"""

from __future__ import annotations

import functools
import io
import json
import socket
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

import numpy as np
from gymnasium import spaces

from parcat.core.errors import EpisodeError, PolicyError, TransientError, clip
from parcat.policies.base import AgentSpec

URL_SCHEMES = ("http://", "unix:")
"""How a ``-p`` target names a served policy."""
WIRE_VERSION = 1
"""The request and reply format; a server of another version is refused at connect."""
CONNECT_TIMEOUT_S = 5.0
TRANSIENT_STATUS = frozenset({429, 502, 503, 504})
"""Replies that say "try again" rather than "this request is wrong"."""
_KEY_PREFIX = "obs."


def is_url(target: str) -> bool:
    """Whether a ``-p`` target names a served policy."""
    return target.startswith(URL_SCHEMES)


def encode_observations(obs_batch: Sequence[Any]) -> bytes:
    """Observations stacked into one ``.npy``; dicts as an ``.npz`` of ``obs.KEY`` arrays."""
    if obs_batch and all(isinstance(o, Mapping) for o in obs_batch):
        arrays = {f"{_KEY_PREFIX}{k}": np.stack([np.asarray(o[k]) for o in obs_batch])
                  for k in obs_batch[0]}
    else:
        arrays = {"": np.stack([np.asarray(o) for o in obs_batch])}
    if any(a.dtype.hasobject for a in arrays.values()):
        raise PolicyError("a served policy takes numeric observations (arrays, numbers or "
                          "dicts of them); this observation holds Python objects")
    buffer = io.BytesIO()
    if "" in arrays:  # one .npy: half the work of a zip on both sides
        np.save(buffer, arrays[""], allow_pickle=False)
    else:
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


MAX_INFLATED_BYTES = 256 * 2**20
"""An ``.npz`` body may inflate to this much at most: a small body must not fill memory."""


def _check_inflated_size(data: bytes) -> None:
    if data[:2] != b"PK":  # an .npy: its size is the body's
        return
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        inflated = sum(member.file_size for member in archive.infolist())
    if inflated > MAX_INFLATED_BYTES:
        raise ValueError(f"the .npz inflates to {inflated:,} bytes, more than "
                         f"{MAX_INFLATED_BYTES:,}")


def decode_observations(data: bytes) -> list[Any]:
    """The observations :func:`encode_observations` wrote (``ValueError`` if malformed)."""
    try:
        _check_inflated_size(data)
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            if loaded.ndim < 1:
                raise ValueError("not a stack of observations")
            return list(loaded)
        with loaded as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception as exc:  # npy header, zip or pickle refusal: all a malformed body
        raise ValueError("body is not an .npy or .npz of stacked observations "
                         f"({type(exc).__name__})") from exc
    if not arrays or not all(name.startswith(_KEY_PREFIX) for name in arrays):
        raise ValueError("an .npz body must hold arrays named 'obs.KEY', one per key")
    if len({len(a) for a in arrays.values()}) != 1:
        raise ValueError("the arrays 'obs.KEY' hold different numbers of observations")
    keys = [name[len(_KEY_PREFIX):] for name in arrays]
    return [dict(zip(keys, row, strict=True)) for row in zip(*arrays.values(), strict=True)]


def encode_actions(actions: Sequence[Any]) -> bytes:
    """Actions as one stacked ``.npy``."""
    buffer = io.BytesIO()
    np.save(buffer, np.stack([np.asarray(a) for a in actions]), allow_pickle=False)
    return buffer.getvalue()


def decode_actions(data: bytes, space: spaces.Space[Any]) -> list[Any]:
    """Actions as the policy returned them: ``int`` for a Discrete space, else arrays."""
    array = np.load(io.BytesIO(data), allow_pickle=False)
    if isinstance(space, spaces.Discrete):
        return [int(a) for a in array.tolist()]
    return list(array)


class RemotePolicy:
    """Plays one agent with a policy served by ``parcat serve`` at ``url``.

    One HTTP connection, kept alive, per instance (parcat builds one per agent and thread),
    through urllib3: a well-kept client whose call costs about a third of httpx's CPU
    (0.4 against 1.1 ms on the 2-core CI machine), which a step pays on every agent.
    Stateful policies get a server-side instance per client session, reset with this
    agent's seed; stateless ones are shared and batched across clients on the server.

    Args:
        spec: The agent this instance plays: its id picks the server's agent unless the
            URL (``/AGENT``) or ``agent`` names one, and its spaces must be the server's.
        url: ``http://HOST:PORT[/AGENT]`` or ``unix:PATH``.
        timeout: Seconds to wait for one reply (connecting waits at most 5 s).
        agent: The server's agent to play (``-p unix:PATH,agent=NAME``).
    """

    def __init__(self, spec: AgentSpec, url: str, timeout: float = 60.0,
                 agent: str | None = None) -> None:
        try:
            import urllib3  # here: only a run with a served policy needs it
        except ImportError:
            raise PolicyError(f"policy '{clip(url)}': a served policy needs urllib3: "
                              f"pip install 'parcat[serve]'") from None
        self.url = url
        self.action_space = spec.action_space
        self.session = uuid.uuid4().hex
        self._http_errors = (urllib3.exceptions.HTTPError, OSError)
        self._pool, where, path = _connection_pool(url, timeout)
        if not url.startswith("unix:"):
            agent = agent or path or None
        self.agent = agent or str(spec.agent_id)
        try:
            info = self._get_info()
            self._check(info, spec)
        except BaseException:
            self._pool.close()
            raise
        self.stateless = bool(info["stateless"])
        """Mirrors the served policy: stateless ones may act for many agents in one call."""
        self.batch_group = (where, info["agents"][self.agent].get("instance", self.agent))
        """Agents share a batched request only when the server acts for them with one
        instance (a run directory keeps one per agent)."""

    def _get_info(self) -> dict[str, Any]:
        try:
            reply = self._pool.request("GET", "/info")
            info = json.loads(reply.data) if reply.status == 200 else None
        except (*self._http_errors, ValueError) as exc:
            raise PolicyError(f"policy server {clip(self.url)} is unreachable "
                              f"({type(exc).__name__}: {clip(str(exc), 120)}); start it with "
                              "`parcat serve -p SPEC -m MISSION` and use the URL it prints"
                              ) from None
        if not isinstance(info, dict) or info.get("format") != "parcat-serve":
            raise PolicyError(f"{clip(self.url)} is not a `parcat serve` policy server "
                              f"(GET /info answered {reply.status})")
        return info

    def _check(self, info: dict[str, Any], spec: AgentSpec) -> None:
        if info.get("version") != WIRE_VERSION:
            raise PolicyError(f"policy server {clip(self.url)} speaks version "
                              f"{info.get('version')}, this parcat {WIRE_VERSION}: run the "
                              "same parcat version on both sides")
        where = f"policy server {clip(self.url)} serves mission '{info.get('mission')}'"
        if info.get("mission") != spec.mission:
            raise PolicyError(f"{where}, not '{spec.mission}': serve the mission you evaluate")
        agents = info.get("agents", {})
        if self.agent not in agents:
            raise PolicyError(f"{where} without agent '{clip(self.agent)}'; it has: "
                              f"{clip(', '.join(agents), 200)}")
        for kind, space in (("observation", spec.observation_space),
                            ("action", spec.action_space)):
            served = agents[self.agent].get(f"{kind}_space")
            if served != str(space):
                raise PolicyError(
                    f"{where} with {kind} space {clip(str(served), 80)} for agent "
                    f"'{self.agent}', but this run's is {clip(str(space), 80)}: serve it with "
                    "the same --set values as the run")

    def reset(self, seed: int) -> None:
        """Reset this session's instance on the server (stateless policies: nothing)."""
        if not self.stateless:
            self._post("/reset", b"", seed=str(seed))

    def step(self, obs: Any) -> Any:
        """The served policy's action for one observation."""
        return self.step_batch([obs])[0]

    def step_batch(self, obs_batch: Sequence[Any]) -> list[Any]:
        """The served policy's actions for many observations, in one request."""
        return decode_actions(self._post("/step", encode_observations(obs_batch)),
                              self.action_space)

    def _post(self, path: str, body: bytes, **params: str) -> bytes:
        query = urlencode({"agent": self.agent, "session": self.session, **params})
        try:
            reply = self._pool.urlopen("POST", f"{path}?{query}", body=body)
        except self._http_errors as exc:
            raise TransientError(f"policy server {self.url}: {type(exc).__name__}: "
                                 f"{clip(str(exc), 120)}") from exc
        if reply.status == 200:
            return bytes(reply.data)
        message = _error_text(reply.data, reply.status)
        if reply.status in TRANSIENT_STATUS:
            retry = reply.headers.get("Retry-After", "")
            raise TransientError(f"policy server {self.url}: {message}",
                                 float(retry) if retry.replace(".", "", 1).isdigit() else None)
        raise EpisodeError(f"policy server {self.url}: {message}")

    def close(self) -> None:
        """Drop this session's instances on the server and the connection."""
        try:
            if not self.stateless:
                self._pool.urlopen("POST", f"/close?{urlencode({'session': self.session})}")
        except self._http_errors:
            pass  # the server is gone: nothing of ours is left on it
        finally:
            self._pool.close()


def _connection_pool(url: str, timeout: float) -> tuple[Any, str, str]:
    """A one-connection urllib3 pool to ``url``'s server, where it is (``HOST:PORT`` or
    the ``unix:`` URL) and the URL's path (``AGENT``, or the socket's path)."""
    import urllib3  # here: only a run with a served policy needs it

    timeouts = urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=timeout)
    if url.startswith("unix:"):
        path = url[len("unix:"):]
        return _unix_pool_class()(path, maxsize=1, retries=False, timeout=timeouts), url, path
    parts = urlsplit(url)
    if not parts.hostname or parts.port is None or parts.query or parts.fragment:
        raise PolicyError(f"policy '{clip(url)}': expected http://HOST:PORT[/AGENT] or "
                          "unix:PATH, e.g. http://127.0.0.1:8700 (the URL `parcat serve` "
                          "prints)")
    pool = urllib3.HTTPConnectionPool(parts.hostname, parts.port, maxsize=1, retries=False,
                                      timeout=timeouts)
    return pool, f"{parts.hostname}:{parts.port}", parts.path.strip("/")


def served_stateless(url: str) -> bool:
    """Whether the server at ``url`` says its policy is stateless (``False`` when it cannot
    be asked: the run's own connection says why)."""
    try:
        pool = _connection_pool(url.split(",", 1)[0], CONNECT_TIMEOUT_S)[0]
    except (PolicyError, ImportError):
        return False
    try:
        reply = pool.request("GET", "/info")
        return reply.status == 200 and json.loads(reply.data).get("stateless") is True
    except Exception:  # any failure to ask: not known to be stateless
        return False
    finally:
        pool.close()


def _error_text(data: bytes, status: int) -> str:
    """The server's one-line ``error``, else the status."""
    try:
        return clip(str(json.loads(data)["error"]), 500)
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}"


@functools.cache
def _unix_pool_class() -> type[Any]:
    """urllib3's connection pool over a Unix socket (defined once urllib3 is imported)."""
    import urllib3
    from urllib3.connection import HTTPConnection

    class UnixConnection(HTTPConnection):
        def __init__(self, *args: Any, socket_path: str, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.socket_path = socket_path

        def _new_conn(self) -> socket.socket:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(CONNECT_TIMEOUT_S)
            try:
                sock.connect(self.socket_path)
            except OSError:
                sock.close()
                raise
            return sock

    class UnixPool(urllib3.HTTPConnectionPool):
        ConnectionCls = UnixConnection

        def __init__(self, socket_path: str, **kwargs: Any) -> None:
            super().__init__("localhost", **kwargs)
            self.conn_kw["socket_path"] = socket_path

    return UnixPool
