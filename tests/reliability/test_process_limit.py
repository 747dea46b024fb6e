"""A process limit (a pids cgroup, as containers set) shrinks the plan, and when not even
one worker fits, the run ends with one line naming the limit, exit 1 — not 130."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.helpers import ROOT

V1 = Path("/sys/fs/cgroup/pids")


@pytest.fixture
def pids_cgroup() -> Iterator[Path]:
    """A fresh pids cgroup (cgroup v1; needs root), removed afterwards."""
    folder = V1 / f"parcat-test-{secrets.token_hex(4)}"
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a pids cgroup here ({exc}): needs root and cgroup v1 pids")
    try:
        yield folder
    finally:
        for _ in range(50):
            try:
                folder.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.1)  # its last processes are still exiting


def run_limited(group: Path, limit: int, args: list[str]) -> subprocess.CompletedProcess[str]:
    (group / "pids.max").write_text(str(limit))

    def enter() -> None:
        (group / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.run([sys.executable, "-m", "parcat", *args], preexec_fn=enter, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_a_tight_process_limit_gives_a_smaller_plan(pids_cgroup: Path) -> None:
    plan = run_limited(pids_cgroup, 12, ["plan", "-m", "harvest", "-n", "40", "--jobs", "8",
                                         "--format", "json"])
    assert plan.returncode == 0, plan.stderr
    info = json.loads(plan.stdout)
    assert info["episode_workers"] <= 2
    assert any("process limits allow" in r for r in info["reasons"])
    run = run_limited(pids_cgroup, 9, ["eval", "-m", "harvest", "-n", "6", "--jobs", "2",
                                       "--set", "max_steps=20", "-f", "json"])
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["status"] == "complete"


def test_no_room_for_a_worker_is_one_line_and_exit_1(pids_cgroup: Path) -> None:
    # a policy from outside parcat must run in a worker: there is no room for one
    run = run_limited(pids_cgroup, 4, ["eval", "-m", "harvest", "--set", "agents=2", "-n",
                                       "2", "-p", "tests.fakes:NoKwargsPolicy"])
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith("parcat: error: cannot start") and "pids" in lines[0]
