"""Outputs: nothing clobbered, a bad path refused up front, results kept when a write fails."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from parcat.core.errors import OutputError
from parcat.core.output_paths import check_output_file, check_output_folder
from parcat.eval.results_file import journal_path, load_finished
from tests.reliability.helpers import ROOT

ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0
QUICK = ["-m", "harvest", "-p", "random", "-n", "2", "--set", "max_steps=5", "--jobs", "1"]


def parcat(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "results.json"
    os.mkfifo(path)
    return path


def test_a_fifo_is_refused_and_survives(fifo: Path) -> None:
    proc = parcat("eval", *QUICK, "-o", str(fifo))
    assert proc.returncode == 2
    assert one_error_line(proc) == (
        f"parcat: error: --output '{fifo}' is a FIFO, not a regular file; parcat replaces "
        "its output files, so give the path of a file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "results.json"
    link.symlink_to(target)
    proc = parcat("eval", *QUICK, "-o", str(link))
    assert proc.returncode == 2
    assert "is a symlink, not a regular file" in one_error_line(proc)
    assert link.is_symlink() and target.read_text() == "keep me\n"


@pytest.mark.skipif(not ROOT_USER, reason="making a device node needs root")
def test_a_device_node_is_refused_and_survives(tmp_path: Path) -> None:
    # a private copy of /dev/full (major 1, minor 7): the host's own device is never at risk
    device = tmp_path / "full"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    proc = parcat("eval", *QUICK, "-o", str(device))
    assert proc.returncode == 2
    assert "is a character device, not a regular file" in one_error_line(proc)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    trace = parcat("eval", *QUICK, "--trace", str(device))
    assert trace.returncode == 2 and "--trace" in one_error_line(trace)
    assert stat.S_ISCHR(os.lstat(device).st_mode)


@pytest.mark.parametrize(("flag", "name"), [("-o", "r.json"), ("--trace", "t.json")])
def test_a_file_where_a_folder_should_be_is_named(tmp_path: Path, flag: str, name: str) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = parcat("eval", *QUICK, flag, str(afile / name))
    assert proc.returncode == 2
    label = "--output" if flag == "-o" else "--trace"
    assert one_error_line(proc) == (
        f"parcat: error: {label} '{afile / name}': '{afile}' is not a folder")


def test_a_folder_as_the_output_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "adir.json"
    folder.mkdir()
    proc = parcat("eval", *QUICK, "-o", str(folder))
    assert proc.returncode == 2
    assert "is a folder, not a regular file" in one_error_line(proc)


def test_an_unwritable_place_is_refused_before_the_run() -> None:
    proc = parcat("eval", *QUICK, "-o", "/proc/x.json")
    assert proc.returncode == 2
    assert one_error_line(proc).startswith("parcat: error: --output '/proc/x.json': cannot "
                                           "write to '/proc' (")


def test_checks_create_missing_parents_and_accept_regular_files(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b" / "r.json"
    assert check_output_file(nested, "--output") == nested and nested.parent.is_dir()
    nested.write_text("old")
    check_output_file(nested, "--output")  # a regular file is replaced later: fine
    assert check_output_folder(tmp_path / "run", "--run-dir").is_dir()
    with pytest.raises(OutputError, match="is not a folder"):
        check_output_folder(nested, "--run-dir")
    assert not list(tmp_path.rglob(".parcat-probe.*"))


@contextlib.contextmanager
def tiny_filesystem(folder: Path, size: str) -> Iterator[Path]:
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.skipif(not ROOT_USER, reason="mounting a tiny tmpfs needs root")
def test_a_full_disk_is_refused_up_front(tmp_path: Path) -> None:
    with tiny_filesystem(tmp_path / "tiny", "64k") as tiny:
        proc = parcat("eval", *QUICK, "-o", str(tiny / "r.json"))
        assert proc.returncode == 2
        assert "is full" in one_error_line(proc)
        assert not list(tiny.iterdir())


@pytest.mark.skipif(not ROOT_USER, reason="mounting a tiny tmpfs needs root")
def test_a_disk_that_fills_up_mid_run_keeps_the_results_on_stdout(tmp_path: Path) -> None:
    with tiny_filesystem(tmp_path / "tiny", "1100k") as tiny:
        out = tiny / "r.json"
        proc = parcat("eval", "-m", "harvest", "-p", "random", "-n", "3000", "--set",
                      "max_steps=2", "--jobs", "1", "-f", "json", "--no-progress", "-o", str(out))
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr
        document = json.loads(proc.stdout)  # every result made it to stdout
        assert document["status"] == "complete" and len(document["episodes"]) == 3000
        lines = proc.stderr.strip().splitlines()
        assert lines[-1].startswith(f"parcat: error: could not write --output '{out}' "
                                    "(No space left on device); ")
        # each kind of failed write is reported once, not once per episode
        assert len(lines) <= 3, proc.stderr
        assert not list(tiny.glob(".r.json.*.tmp"))


def test_the_journal_makes_resume_exact_after_a_kill(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["eval", "-m", "harvest", "-p", "random", "-n", "6", "--set", "max_steps=5",
            "--jobs", "1", "-f", "json", "--no-progress", "-o", str(out)]
    clean = parcat(*args[:-2], "-o", str(tmp_path / "clean.json"))
    assert clean.returncode == 0
    first = parcat(*args)
    assert first.returncode == 0 and not journal_path(out).exists()
    # as a run killed after 3 episodes leaves it: a journal, a cut last line, no document
    done = json.loads(out.read_text())
    header = {"schema": "parcat.eval.journal", "version": 1, "config": done["config"]}
    lines = [json.dumps(header)] + [json.dumps(e) for e in done["episodes"][:3]]
    journal_path(out).write_text("\n".join(lines) + '\n{"mission": "har')
    out.unlink()
    assert set(load_finished(out, done["config"])) == {("harvest", i) for i in range(3)}
    resumed = parcat(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    strip = lambda d: [(e["episode_index"], e["agents"]) for e in d["episodes"]]  # noqa: E731
    assert strip(json.loads(resumed.stdout)) == strip(json.loads(clean.stdout))
    assert not journal_path(out).exists()


def test_a_tampered_resume_file_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["eval", *QUICK, "-o", str(out)]
    assert parcat(*args).returncode == 0
    document = json.loads(out.read_text())
    document["episodes"][0]["agents"][0]["reward"] = "lots"
    out.write_text(json.dumps(document))
    proc = parcat(*args, "--resume")
    assert proc.returncode == 2
    assert one_error_line(proc) == (
        f"parcat: error: --resume: '{out}': episode 0 is malformed (TypeError('reward: "
        "expected a number, got str')); use another --output")


@pytest.mark.parametrize("case", ["train-file-parent", "train-file", "sim-fifo", "bench",
                                  "plot-symlink"])
def test_every_command_checks_its_outputs_first(tmp_path: Path, case: str) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    if case == "train-file-parent":
        args, expected = ["train", "--run-dir", str(afile / "run")], \
            f"--run-dir '{afile / 'run'}': '{afile}' is not a folder"
    elif case == "train-file":
        args, expected = ["train", "--run-dir", str(afile)], \
            f"--run-dir '{afile}': '{afile}' is not a folder"
    elif case == "sim-fifo":
        fifo = tmp_path / "out"
        os.mkfifo(fifo)
        args, expected = ["sim", "-c", str(ROOT / "configs" / "sim.yaml"), "-o", str(fifo)], \
            f"--output '{fifo}' is a FIFO, not a folder; give the path of a folder"
    elif case == "bench":
        args, expected = ["bench", "--quick", "--history", str(afile / "h.jsonl")], \
            f"--history '{afile / 'h.jsonl'}': '{afile}' is not a folder"
    else:
        metrics = tmp_path / "metrics.jsonl"
        metrics.write_text('{"epoch": 1, "loss": 0.5}\n')
        link = tmp_path / "chart.svg"
        link.symlink_to(afile)
        args, expected = ["plot", str(metrics), "--field", "loss", "-o", str(link)], \
            f"--output '{link}' is a symlink, not a regular file; parcat replaces its " \
            "output files, so give the path of a file"
    proc = parcat(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc) == f"parcat: error: {expected}"
    assert afile.read_text() == "x"
