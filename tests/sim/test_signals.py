"""``parcat sim`` stopped by Ctrl-C or SIGTERM around its first step: exit 130 / 143, no
traceback, and a record and summary that load (empty when no step ran)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parcat.ipc.shm_names import block_creator
from parcat.sim import SimRecord
from tests.reliability.helpers import kill_group, wait_until
from tests.sim.helpers import sim_data, write_yaml

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PARCAT = str(BIN / "parcat") if (BIN / "parcat").exists() else shutil.which("parcat")
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def start(config: Path, output: Path, *extra: str) -> subprocess.Popen[str]:
    """``parcat sim`` in its own process group, this checkout and its tests importable."""
    assert PARCAT is not None, "the parcat console script is not installed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.Popen([PARCAT, "sim", "-c", str(config), "-o", str(output), *extra],
                            cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def send(proc: subprocess.Popen[str], signum: signal.Signals) -> None:
    """Ctrl-C goes to the whole process group (as a terminal sends it), SIGTERM to parcat."""
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)


def finish(proc: subprocess.Popen[str]) -> str:
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    return err


def written(output: Path) -> tuple[SimRecord, dict[str, object]]:
    """The record and summary of an interrupted run, both loaded."""
    record = SimRecord.load(output)
    summary = json.loads((output / "summary.json").read_text())
    assert summary["interrupted"] and record.meta["interrupted"]
    assert summary["steps"] == record.steps == len(record.arrays["time_s"])
    assert record.arrays["based_on"].shape == (record.steps, len(record.agent_ids))
    return record, summary


def shared_block_exists(pid: int) -> bool:
    """Whether parcat (``pid``) has created its simulation's shared memory: the run began."""
    creators = (block_creator(p.name) for p in Path("/dev/shm").iterdir())
    return any(c is not None and c.pid == pid for c in creators)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_while_agents_start_writes_an_empty_record(tmp_path: Path,
                                                             signum: signal.Signals) -> None:
    marker = tmp_path / "building"
    agents = [{"agent": "evader", "policy": "tests.sim.policies:SlowStartPolicy",
               "args": {"marker": str(marker)}, "cycle_time": 0.01}]
    config = write_yaml(tmp_path / "sim.yaml", sim_data(agents, iters=100))
    proc = start(config, tmp_path / "out")
    try:
        assert wait_until(marker.exists, 60), "the agent process never started"
        send(proc, signum)
    finally:
        err = finish(proc)
    assert proc.returncode == EXIT_CODES[signum], err
    assert "Traceback" not in err
    assert err.endswith("interrupted after 0 of 100 steps\n"), err
    record, summary = written(tmp_path / "out")
    assert record.steps == 0 and summary["env"]["achieved_rate_hz"] is None
    assert [a["cycles"] for a in summary["agents"]] == [0, 0, 0, 0]  # type: ignore[index]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_before_the_first_sequential_step_writes_an_empty_record(
        tmp_path: Path, signum: signal.Signals) -> None:
    marker = tmp_path / "stalled"
    agents = [{"agent": "evader", "policy": "tests.sim.policies:StallingPolicy",
               "args": {"marker": str(marker), "after": 0}, "cycle_time": 0.01}]
    config = write_yaml(tmp_path / "sim.yaml", sim_data(agents, iters=100))
    proc = start(config, tmp_path / "out", "--mode", "sequential")
    try:
        assert wait_until(marker.exists, 60), "the first step never began"
        send(proc, signum)
    finally:
        err = finish(proc)
    assert proc.returncode == EXIT_CODES[signum], err
    assert "Traceback" not in err
    record, _ = written(tmp_path / "out")
    assert record.steps == 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_at_any_moment_of_the_start_leaves_loadable_files(
        tmp_path: Path, signum: signal.Signals) -> None:
    """From the moment the run's shared memory exists (the processes start, get ready,
    wait for the start instant, take their first steps) to well into the run."""
    agents = [{"agent": "evader", "policy": "greedy", "cycle_time": 0.01},
              {"agent": "pursuer_0", "policy": "greedy", "cycle_time": 0.02}]
    config = write_yaml(tmp_path / "sim.yaml", sim_data(agents, iters=100_000))
    delays = [0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8]
    outcomes = []
    for delay in delays:
        output = tmp_path / f"out-{delay}"
        proc = start(config, output)
        try:
            assert wait_until(lambda p=proc: shared_block_exists(p.pid), 60, every=0.005)
            time.sleep(delay)
            send(proc, signum)
        finally:
            err = finish(proc)
        outcomes.append((delay, proc.returncode, err))
        assert proc.returncode == EXIT_CODES[signum] and "Traceback" not in err, outcomes
        record, _ = written(output)
        assert err.endswith(f"interrupted after {record.steps} of 100000 steps\n"), err
