"""The Python API from a script: a missing ``__main__`` guard is one clear error; killed
runs leave nothing in the temp directory for long."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.helpers import ROOT, kill_group, wait_until

UNGUARDED = """\
from parcat.eval.evaluate import make_config, evaluate
from parcat.parallel.run_options import RunOptions

report = evaluate(make_config(["harvest"], ["random"], 4, 0, {"agents": 2}),
                  RunOptions(jobs=2, executor="process"))
print(report.status)
"""


def test_a_script_without_a_main_guard_gets_one_clear_error(tmp_path: Path) -> None:
    script = tmp_path / "run_parcat.py"
    script.write_text(UNGUARDED)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0
    assert "if __name__ == \"__main__\":" in proc.stderr
    assert len(proc.stderr.splitlines()) < 40, proc.stderr[-2000:]
    guarded = "if __name__ == \"__main__\":\n" + "".join(
        f"    {line}\n" for line in UNGUARDED.splitlines())
    script.write_text(guarded)
    ok = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                        text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert ok.returncode == 0 and ok.stdout.strip() == "complete", ok.stderr


@pytest.fixture
def temp() -> Iterator[Path]:
    """A temp folder of the test's own (the tests beside it, under pytest-xdist, use /tmp
    too), with a short path: the fork server's socket is in it."""
    folder = Path(tempfile.mkdtemp(prefix="pc-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_killed_run_s_temp_folder_is_removed_by_the_next_run(tmp_path: Path,
                                                               temp: Path) -> None:
    env = {**os.environ, "TMPDIR": str(temp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "100000", "--jobs",
         "2", "--executor", "process"], cwd=tmp_path, start_new_session=True, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # parcat-mp-ns<namespace>_<pid>_<start>-<random>
    mine = re.compile(rf"parcat-mp-ns[0-9a-f]+_{proc.pid}_[0-9a-f]+-")
    try:
        assert wait_until(lambda: any(mine.match(p.name) for p in temp.iterdir()), 60)
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        kill_group(proc)
    assert not [p.name for p in temp.iterdir() if p.name.startswith("pymp-")]
    subprocess.run([sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "2",
                    "--jobs", "2", "--executor", "process"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120, env=env)
    assert not any(mine.match(p.name) for p in temp.iterdir())
