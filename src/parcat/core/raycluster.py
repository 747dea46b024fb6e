"""Joining or starting a Ray cluster: the one place eval and train do it.

User code reaches Ray workers through the runtime environment: the driver's ``sys.path``
on a local cluster this process starts, the working directory (without :data:`EXCLUDES`)
on a remote one.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError


class Backend(str, enum.Enum):
    """Where workers run (``--backend``): processes on this machine, or a Ray cluster."""

    LOCAL = "local"
    RAY = "ray"


EXCLUDES = [".venv", ".git", "runs", "__pycache__", "*.npz", ".mypy_cache", ".ruff_cache"]
"""What never travels to a remote cluster with the working directory."""


def import_ray() -> Any:
    """Import Ray, or a :class:`ConfigError` saying how to get it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "--backend ray needs Ray: pip install 'parcat[ray]' (or pip install ray)"
        ) from exc
    return ray


def connect(address: str | None, num_cpus: int | None = None) -> bool:
    """Join the cluster at ``address`` (default: Ray's ``RAY_ADDRESS``), or start a local
    one of ``num_cpus``; whether this call connected (then the caller calls
    :func:`disconnect`)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    # ray.init reads RAY_ADDRESS itself, and then refuses num_cpus with a ValueError
    source = "--address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address == "local":  # Ray's word for a cluster started here
        address = None
    _cluster_errors_to_stderr(ray)
    if address:
        check_reachable(address, source=source)
    with _our_sigterm_handler():
        if address:
            ray.init(address=address, log_to_driver=False, configure_logging=False,
                     runtime_env={"working_dir": str(Path.cwd()), "excludes": EXCLUDES})
        else:
            path = os.pathsep.join(p for p in sys.path if p)
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                     configure_logging=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    return True


@contextlib.contextmanager
def _our_sigterm_handler() -> Iterator[None]:
    """Keep the SIGTERM handler in place across the block: ``ray.init`` installs its own in
    the driver (which prints a stack dump and exits 15, skipping the results so far)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if ours is not None:
            signal.signal(signal.SIGTERM, ours)


def _cluster_errors_to_stderr(ray: Any) -> None:
    """Send the cluster's error messages Ray prints on the driver (``(raylet) Task ...
    failed``) to stderr: on stdout they would corrupt ``--format json``."""
    module = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(module, "print_to_stdstream", None)
    if original is None or getattr(original, "to_stderr", False):
        return

    def print_to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    print_to_stderr.to_stderr = True  # type: ignore[attr-defined]
    module.print_to_stdstream = print_to_stderr  # type: ignore[union-attr]


CONNECT_TIMEOUT_S = 5.0  # how long a cluster address may take to accept a connection


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S,
                    source: str = "--address") -> None:
    """Refuse an address where no Ray cluster answers gRPC's handshake within ``timeout_s``
    (a :class:`ConfigError` naming ``source``, where the address came from): ``ray.init``
    retries a wrong address for minutes."""
    if address == "auto":
        return  # Ray finds the cluster started on this machine
    target = address.split("://", 1)[-1]
    host, _, port_text = target.rpartition(":")
    if not host or not port_text.isdigit():
        raise ConfigError(f"{source} must be HOST:PORT (as `ray start --head` prints it), "
                          f"got '{address}'")
    try:
        answer = _grpc_handshake(host.strip("[]"), int(port_text), timeout_s)
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConfigError(
            f"{source} {address}: no Ray cluster reachable there ({why} in {timeout_s:g} s); "
            f"start one with `ray start --head`, or leave {source} out to start a local cluster"
        ) from exc
    if not answer:
        raise ConfigError(
            f"{source} {address}: something listens there, but it is not a Ray cluster (no "
            "gRPC answer); give the address `ray start --head` prints (HOST:6379 by default)"
        )


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame."""


def _grpc_handshake(host: str, port: int, timeout_s: float) -> bool:
    """Whether a gRPC server answers the HTTP/2 preface at ``host:port`` with a SETTINGS
    frame within ``timeout_s`` (``OSError`` when the connection fails)."""
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(_HTTP2_PREFACE)
        head = b""
        while len(head) < 9:  # a frame header: length (3), type (1), flags (1), stream (4)
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    return head[3] == 4  # SETTINGS


def disconnect() -> None:
    """Leave the cluster (a local one this process started shuts down)."""
    ray = import_ray()
    if ray.is_initialized():
        ray.shutdown()
