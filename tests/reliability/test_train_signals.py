"""parcat train stopped by Ctrl-C or SIGTERM: exit code, no orphans, no leaks, resumable."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.reliability.helpers import (
    descendants,
    gone,
    kill_group,
    shm_blocks,
    start_cli,
    wait_until,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals and /dev/shm")

ARGS = ["train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=20",
        "--epochs", "400", "--steps-per-epoch", "20", "--env-workers", "1",
        "--envs-per-worker", "4", "--gradient-steps", "20", "--checkpoint-every", "2"]


@pytest.mark.parametrize(("sig", "code", "group"), [(signal.SIGINT, 130, True),
                                                    (signal.SIGTERM, 143, False)])
def test_interrupted_training_stops_cleanly_and_resumes(
    tmp_path: Path, sig: signal.Signals, code: int, group: bool
) -> None:
    run = tmp_path / "run"
    proc = start_cli([*ARGS, "--run-dir", str(run)], tmp_path)
    try:
        assert wait_until(lambda: (run / "manifest.json").exists(), 60), "no checkpoint"
        children = [p.pid for p in descendants(proc.pid)]
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == code, err
        assert "Traceback" not in err
        assert wait_until(lambda: gone(children), 10), "workers outlived the trainer"
        assert wait_until(lambda: not shm_blocks({proc.pid, *children}), 10), \
            "shared memory leaked"
    finally:
        kill_group(proc)
    manifest = json.loads((run / "manifest.json").read_text())
    # the interrupt wrote the last finished epoch, the one the metrics log ends on
    logged = (run / "metrics.jsonl").read_text().splitlines()
    assert manifest["epoch"] == json.loads(logged[-1])["epoch"] >= 2
    resumed = start_cli([*ARGS[:7], "--epochs", str(manifest["epoch"] + 2), *ARGS[9:],
                         "--run-dir", str(run), "--resume"], tmp_path)
    try:
        _, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err
    finally:
        kill_group(resumed)
    assert json.loads((run / "manifest.json").read_text())["epoch"] == manifest["epoch"] + 2
