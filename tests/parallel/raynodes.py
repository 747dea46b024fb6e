"""Real Ray nodes on this machine, started by ``ray start`` as subprocesses, for tests.

Each node runs ``ray start --block`` with its own ``--temp-dir``, ports and custom
resource, so it owns its processes: its process tree is the node (gcs, raylet, agents and
the workers the raylet forks), found from the pid we started and never by a name shared
with other clusters on the machine. Stopping a node is what ``ray stop`` does, for that
tree only: SIGTERM (``ray start --block`` then shuts its processes down), SIGKILL after a
grace period. Killing a node SIGKILLs the whole tree at once, as when a machine is lost.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from tests.fakes import ScriptedEnv

RAY = str(Path(sys.executable).with_name("ray"))
SRC = str(Path(__file__).parents[2] / "src")
START_TIMEOUT_S = 180.0
"""How long a node may take to start on a loaded machine."""


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port


def cluster_env() -> dict[str, str]:
    """The environment of every process of one test cluster (nodes and drivers).

    The token is the cluster's own, not ``~/.ray/auth_token`` (Ray with token
    authentication, 2.60 here, turns it on for a head when that file exists, but a second
    node and a driver given ``--address`` send it only with ``RAY_AUTH_MODE=token``).
    ``PYTHONPATH`` gives the workers this checkout's parcat, as ``pip install parcat``
    does on a real node.
    """
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex,
            "PYTHONPATH": SRC, "RAY_USAGE_STATS_ENABLED": "0"}


class RayNode:
    """One ``ray start --block`` subprocess and everything it starts.

    Args:
        temp_dir: The node's own ``--temp-dir`` (sessions, logs, sockets).
        env: Environment of the node's processes (:func:`cluster_env`).
        resource: A custom resource only this node has.
        head_port: Start a head node on this port; ``None`` joins ``address``.
        address: ``HOST:PORT`` of the head, for a second node.
    """

    def __init__(self, temp_dir: Path, env: dict[str, str], resource: str,
                 head_port: int | None = None, address: str | None = None) -> None:
        self.temp_dir = temp_dir
        temp_dir.mkdir(parents=True)
        role = (["--head", "--port", str(head_port), "--include-dashboard", "false",
                 "--dashboard-port", str(free_port())] if head_port is not None
                else ["--address", str(address)])
        ports = [f"--{name}-port" for name in ("node-manager", "object-manager",
                                               "dashboard-agent-listen", "dashboard-agent-grpc",
                                               "runtime-env-agent", "metrics-export")]
        command = [RAY, "start", *role, "--temp-dir", str(temp_dir), "--num-cpus", "1",
                   "--num-gpus", "0", "--object-store-memory", str(100 * 2**20),
                   "--resources", f'{{"{resource}": 1}}', "--include-log-monitor", "false",
                   "--disable-usage-stats", "--block"]
        for flag in ports:
            command += [flag, str(free_port())]
        self.log = temp_dir.with_suffix(".log")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.node_id = self._wait_for_raylet()

    def _wait_for_raylet(self) -> str:
        """The node id, once the node's raylet runs (``ray start`` is then almost done)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited {self.proc.returncode}: "
                                   f"{self.log.read_text()[-3000:]}")
            for proc in self.processes():
                for arg in _cmdline(proc):
                    if arg.startswith("--node_id="):
                        return arg.split("=", 1)[1]
            time.sleep(0.2)
        raise TimeoutError(f"no raylet after {START_TIMEOUT_S} s: {self.log.read_text()[-3000:]}")

    def processes(self) -> list[psutil.Process]:
        """The node's live processes: ``ray start`` and its descendants."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def running(self, task_name: str) -> bool:
        """Whether a worker of this node is executing ``task_name`` (its process title)."""
        title = f"ray::{task_name}"
        return any(" ".join(_cmdline(p)).strip() == title for p in self.processes())

    def kill(self) -> list[psutil.Process]:
        """SIGKILL every process of the node at once; return them."""
        procs = self.processes()
        for proc in procs:
            _signal(proc, signal.SIGKILL)
        self.proc.wait(60)
        return procs

    def stop(self, grace_s: float = 30.0) -> list[psutil.Process]:
        """``ray stop`` for this node only: SIGTERM, then SIGKILL what is left; return them."""
        procs = self.processes()
        _signal(psutil.Process(self.proc.pid) if procs else None, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for proc in alive:
            _signal(proc, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=grace_s)
        if self.proc.poll() is None:
            self.proc.wait(grace_s)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.log.unlink(missing_ok=True)
        return procs


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _signal(proc: psutil.Process | None, sig: int) -> None:
    if proc is None:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.send_signal(sig)


class NappingEnv(ScriptedEnv):
    """:class:`tests.fakes.ScriptedEnv` whose every step sleeps ``nap_s`` (no CPU), so
    episodes overlap on the nodes and a node can be killed in the middle of one."""

    def __init__(self, nap_s: float = 0.01, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nap_s = nap_s

    def step(self, actions: dict[int, Any]) -> Any:
        """Sleep, then step."""
        time.sleep(self.nap_s)
        return super().step(actions)


def write_napping_mission(folder: Path, max_steps: int, nap_s: float) -> Path:
    """A mission YAML for :class:`NappingEnv` in ``folder``."""
    path = folder / "napping.yaml"
    path.write_text("name: napping\nenv: tests.parallel.raynodes:NappingEnv\n"
                    f"params: {{agents: 2, max_steps: {max_steps}, nap_s: {nap_s}}}\n")
    return path
