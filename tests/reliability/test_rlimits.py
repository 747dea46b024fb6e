"""The process's own limits (open files, address space) and a closed stdout: one line that
names the limit, never a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.helpers import ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX limits")


def run_limited(args: list[str], cwd: Path, limit: int,
                value: int) -> subprocess.CompletedProcess[str]:
    """``python -m parcat ARGS`` with the limit ``limit`` (``resource.RLIMIT_*``) set to
    ``value`` in the child alone."""
    def lower() -> None:
        resource.setrlimit(limit, (value, resource.getrlimit(limit)[1]))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300, preexec_fn=lower, check=False)


def test_too_few_open_files_is_one_line_naming_the_limit(tmp_path: Path) -> None:
    proc = run_limited(["eval", "-m", "harvest", "-n", "4", "--jobs", "2",
                        "-p", "tests.fakes:PrintingPolicy"], tmp_path, resource.RLIMIT_NOFILE, 10)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        "parcat: error: too many open files (Too many open files): the open-file limit "
        "(ulimit -n) is 10; raise it (ulimit -n 4096) or lower --jobs"]


def test_too_little_address_space_is_one_line_naming_the_limit(tmp_path: Path) -> None:
    # 60 MB: numpy's compiled modules cannot all be loaded (with 80-150 MB, OpenBLAS may or
    # may not start its threads, and may then end the process itself: see RELIABILITY.md)
    proc = run_limited(["eval", "-m", "harvest", "-n", "4"], tmp_path, resource.RLIMIT_AS,
                       60_000 * 1024)
    assert proc.returncode == 1, proc.stderr
    # OpenBLAS prints its own lines first (it cannot start its threads), then ours
    ours = [line for line in proc.stderr.splitlines() if not line.startswith("OpenBLAS")]
    assert len(ours) == 1 and ours[0].startswith("parcat: error: out of memory"), proc.stderr
    assert "the address-space limit (ulimit -v) is 60000 KiB" in ours[0]


def test_a_closed_stdout_is_one_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "1"],
                          env=env, text=True, stderr=subprocess.PIPE, timeout=300,
                          preexec_fn=lambda: os.close(1), check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "parcat: error: stdout is closed (>&-): parcat prints its results there; redirect it "
        "to a file, or to /dev/null"]


def test_a_temp_folder_too_long_for_a_unix_socket_is_one_line(tmp_path: Path) -> None:
    """The fork server listens on a Unix socket in the temp folder, whose path the system
    caps (108 bytes with the socket's own name): a long TMPDIR is one line naming it and
    the fix, exit 2, and nothing left in it."""
    long = tmp_path / ("t" * 100)
    long.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(long)}
    proc = subprocess.run([sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "2",
                           "--executor", "process", "--jobs", "2"], cwd=tmp_path, env=env,
                          text=True, capture_output=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"parcat: error: cannot start the fork server: the temp folder's path is too long for "
        f"its Unix socket ({len(str(long))} characters, about 45 fit: {long}); set TMPDIR to "
        "a shorter folder, e.g. TMPDIR=/tmp"]
    assert list(long.iterdir()) == []
