"""parcat on a real two-node Ray cluster on this machine: ``ray start --head`` and
``ray start --address``, one CPU each, driven by ``python -m parcat`` subprocesses.

One cluster serves the module. Each node has its own temp dir, ports and resource; the
trace (``--trace``) names the node of every episode, so the tests see both nodes work.
The node-death test runs last: it kills the second node in the middle of an eval.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from parcat.eval.report import strip_timings
from tests.parallel.raynodes import RayNode, cluster_env, free_port, write_napping_mission
from tests.train.test_trainer import assert_same, saved_arrays

pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).parents[2]
RUN_TIMEOUT_S = 600.0


@dataclass
class Cluster:
    """The module's two nodes and what a driver needs to reach them."""

    head: RayNode
    second: RayNode
    address: str
    env: dict[str, str]

    def parcat(self, *args: str) -> subprocess.Popen[str]:
        """Start ``python -m parcat ARGS`` from the checkout (the working directory
        travels to the workers), in the cluster's environment."""
        return subprocess.Popen([sys.executable, "-m", "parcat", *args], cwd=ROOT, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    base = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths
    env = cluster_env()
    port = free_port()
    nodes: list[RayNode] = []
    try:
        nodes.append(RayNode(base / "head", env, "head_node", head_port=port))
        address = f"127.0.0.1:{port}"
        nodes.append(RayNode(base / "second", env, "second_node", address=address))
        yield Cluster(nodes[0], nodes[1], address, env)
    finally:
        stopped = [proc for node in reversed(nodes) for proc in node.stop()]
        shutil.rmtree(base, ignore_errors=True)
    assert not base.exists()
    left = [p for p in stopped if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"Ray processes left behind: {left}"


def finish(proc: subprocess.Popen[str]) -> str:
    """Wait for a parcat run; return its stdout, or fail with its stderr."""
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    return out


def run_local(*args: str) -> str:
    proc = subprocess.Popen([sys.executable, "-m", "parcat", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return finish(proc)


def node_lanes(trace: Path) -> set[str]:
    """The Ray nodes that ran episodes, as the trace's thread names say."""
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    return {name.removeprefix("ray-node-") for name in names
            if name.startswith("ray-node-") and "/" not in name}  # not the agents' lanes


def same_results(remote: str, local: str) -> None:
    a: dict[str, Any] = strip_timings(json.loads(remote))
    b: dict[str, Any] = strip_timings(json.loads(local))
    assert [(e["mission"], e["episode_index"]) for e in a["episodes"]] == \
        [(e["mission"], e["episode_index"]) for e in b["episodes"]]
    assert a == b


def test_eval_on_two_nodes_equals_local(cluster: Cluster, tmp_path: Path) -> None:
    napping = write_napping_mission(tmp_path, max_steps=20, nap_s=0.01)
    args = ["eval", "-m", "harvest", "-m", str(napping), "-p", "random",
            "-p", "tests.fakes:StatefulPolicy", "-n", "4", "--seed", "4", "--set",
            "max_steps=30", "--format", "json"]
    trace = tmp_path / "trace.json"
    remote = cluster.parcat(*args, "--backend", "ray", "--address", cluster.address,
                            "--jobs", "2", "--trace", str(trace))
    local = run_local(*args, "--jobs", "1")
    same_results(finish(remote), local)
    assert node_lanes(trace) == {cluster.head.node_id, cluster.second.node_id}


def test_train_with_actors_on_two_nodes_equals_local(cluster: Cluster, tmp_path: Path) -> None:
    config = tmp_path / "train.yaml"
    config.write_text("mission: goal_tasks\noverrides: {agents: 2, max_steps: 10}\nepochs: 2\n"
                      "steps_per_epoch: 10\ngradient_steps: 5\nseed: 3\ncheckpoint_every: 2\n"
                      "learner: {width: 8, depth: 1, learning_starts: 16, batch_size: 8}\n")
    # two actors of one CPU each on two one-CPU nodes: one actor on each node
    remote = cluster.parcat("train", "-c", str(config), "--env-workers", "2",
                            "--envs-per-worker", "2", "--run-dir", str(tmp_path / "ray"),
                            "--backend", "ray", "--address", cluster.address)
    run_local("train", "-c", str(config), "--env-workers", "0", "--envs-per-worker", "4",
              "--run-dir", str(tmp_path / "local"))
    finish(remote)
    assert_same(saved_arrays(tmp_path / "local"), saved_arrays(tmp_path / "ray"))


def test_ray_address_in_the_environment_is_the_cluster_joined(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    # --backend ray without --address: ray.init's RAY_ADDRESS (a ValueError traceback before)
    trace = tmp_path / "trace.json"
    proc = subprocess.Popen([sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "4",
                             "--set", "max_steps=20", "--backend", "ray", "--jobs", "2",
                             "--trace", str(trace)], cwd=ROOT, text=True,
                            env={**cluster.env, "RAY_ADDRESS": cluster.address},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finish(proc)
    # its episodes ran on the cluster's nodes (short ones: maybe all on one), no local one's
    assert node_lanes(trace) and node_lanes(trace) <= {cluster.head.node_id,
                                                         cluster.second.node_id}


def test_a_killed_node_s_episodes_are_rerun_on_the_head(cluster: Cluster,
                                                        tmp_path: Path) -> None:
    napping = write_napping_mission(tmp_path, max_steps=40, nap_s=0.02)
    args = ["eval", "-m", str(napping), "-p", "random", "-n", "10", "--seed", "9",
            "--format", "json"]
    trace = tmp_path / "trace.json"
    # --retries 0: no rerun of a crashed episode, but a lost node is not the episode's fault
    remote = cluster.parcat(*args, "--backend", "ray", "--address", cluster.address,
                            "--jobs", "2", "--retries", "0", "--trace", str(trace))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not cluster.second.running("_run_task"):
        assert remote.poll() is None, "the eval ended before an episode ran on the second node"
        assert time.monotonic() < deadline, "no episode started on the second node"
        time.sleep(0.05)
    killed = cluster.second.kill()
    local = run_local(*args, "--jobs", "1")
    same_results(finish(remote), local)
    assert not [p for p in killed if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert cluster.head.node_id in node_lanes(trace)
