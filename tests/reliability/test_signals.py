"""Scenarios 4, 5 and 7: Ctrl-C, SIGTERM and SIGKILL of the parent; resume; atomic files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parcat.eval.report import strip_timings
from tests.reliability.helpers import (
    ROOT,
    descendants,
    episodes_journaled,
    gone,
    kill_group,
    run_pids,
    shm_blocks,
    start_cli,
    wait_until,
    write_slow_mission,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals and /dev/shm")


def eval_args(mission: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "-m", str(mission), "-p", "random", "-n", "40", "--seed", "3",
            "-o", str(out), "--jobs", "2", "--executor", "process", *extra]


def test_ctrl_c_writes_results_so_far_and_exits_130(tmp_path: Path) -> None:
    mission, out = write_slow_mission(tmp_path), tmp_path / "r.json"
    proc = start_cli(eval_args(mission, out), tmp_path)
    try:
        assert wait_until(lambda: episodes_journaled(out) > 0, 30), "no episode journaled"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
        _, err = proc.communicate(timeout=5)
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        data = json.loads(out.read_text())
        assert data["status"] == "interrupted" and 0 < len(data["episodes"]) < 40
        assert wait_until(lambda: not descendants(proc.pid), 5)
    finally:
        kill_group(proc)


def test_sigterm_to_the_parent_alone_exits_143_and_stops_children(tmp_path: Path) -> None:
    mission, out = write_slow_mission(tmp_path), tmp_path / "r.json"
    proc = start_cli(eval_args(mission, out), tmp_path)
    try:
        assert wait_until(lambda: episodes_journaled(out) > 0, 30), "no episode journaled"
        children = [p.pid for p in descendants(proc.pid)]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 143, err
        assert wait_until(lambda: gone(children), 10), "children outlived the parent"
        assert json.loads(out.read_text())["status"] == "interrupted"
    finally:
        kill_group(proc)


def test_sigkill_to_the_parent_workers_exit_and_shm_is_clean(tmp_path: Path) -> None:
    mission, out = write_slow_mission(tmp_path), tmp_path / "r.json"
    args = ["eval", "-m", str(mission), "-p", "random", "-n", "1", "--jobs", "2",
            "--parallel-policy", "--policy-strategy", "process", "--set", "max_steps=2000",
            "-o", str(out)]
    proc = start_cli(args, tmp_path)
    try:
        assert wait_until(lambda: shm_blocks(run_pids(proc.pid)), 30), \
            "no policy worker started"
        children = [p.pid for p in descendants(proc.pid)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        assert wait_until(lambda: gone(children), 10), "workers outlived a SIGKILLed parent"
        assert wait_until(lambda: not shm_blocks({proc.pid, *children}), 10), \
            "shared memory leaked"
    finally:
        kill_group(proc)


def test_resume_after_a_kill_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    mission = write_slow_mission(tmp_path)
    full, partial = tmp_path / "full.json", tmp_path / "partial.json"
    args = ["-n", "12", "--jobs", "2", "--executor", "process"]
    base = ["eval", "-m", str(mission), "-p", "random", "--seed", "3", *args]
    proc = start_cli([*base, "-o", str(partial)], tmp_path)
    try:
        assert wait_until(lambda: episodes_journaled(partial) > 0, 30)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    finally:
        kill_group(proc)
    # what a SIGKILL leaves: the journal, and a running snapshot if one was due
    assert 0 < episodes_journaled(partial) < 12
    assert not partial.exists() or json.loads(partial.read_text())["status"] == "running"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for out, extra in ((partial, ["--resume"]), (full, [])):
        done = subprocess.run([sys.executable, "-m", "parcat", *base, "-o", str(out), *extra],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    assert strip_timings(json.loads(partial.read_text())) == \
        strip_timings(json.loads(full.read_text()))
    assert not list(tmp_path.glob(".*.tmp"))


def test_atomic_write_survives_kill_9_mid_write(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    script = (
        "import json, sys\n"
        "from parcat.core.atomic import write_text_atomically\n"
        "i = 0\n"
        "while True:\n"
        "    i += 1\n"
        "    write_text_atomically(sys.argv[1], json.dumps({'i': i, 'pad': 'x' * 2_000_000}))\n"
    )
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", script, str(target)])
        time.sleep(0.4)
        proc.kill()
        proc.wait()
        data = json.loads(target.read_text())  # old or new, never half
        assert data["i"] >= 1


@pytest.mark.parametrize("command", ["eval", "sim"])
def test_a_sigkilled_parent_that_is_not_reaped_yet_still_loses_its_workers(
    tmp_path: Path, command: str
) -> None:
    """``proc.kill(); proc.communicate()``: the caller reaps parcat only once every
    worker has closed its stderr — workers must see a dead-but-unreaped (zombie) parent."""
    from tests.sim.helpers import sim_data, write_yaml

    if command == "eval":
        args = ["eval", "-m", str(write_slow_mission(tmp_path)), "-p", "random", "-n", "40",
                "--jobs", "2", "--executor", "process"]
    else:
        agents = [{"agent": "evader", "policy": "greedy", "cycle_time": 0.01},
                  {"agent": "pursuer_0", "policy": "greedy", "cycle_time": 0.02}]
        config = write_yaml(tmp_path / "sim.yaml", sim_data(agents, period=0.01, iters=100000))
        args = ["sim", "-c", str(config), "--mode", "parallel"]
    proc = start_cli(args, tmp_path)
    try:
        assert wait_until(lambda: len(descendants(proc.pid)) >= 2, 30), "no workers started"
        children = [p.pid for p in descendants(proc.pid)]
        os.kill(proc.pid, signal.SIGKILL)  # not reaped: it stays a zombie meanwhile
        assert wait_until(lambda: gone(children), 10), "workers outlived a zombie parent"
        proc.communicate(timeout=10)  # the documented idiom returns: no one holds its pipes
    finally:
        kill_group(proc)
