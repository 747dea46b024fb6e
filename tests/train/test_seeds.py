"""``parcat train --seeds``: several seeds at once under one ``--jobs``, a run each."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.core.errors import ConfigError
from parcat.policies import checkpoint
from parcat.train.metrics import read_metrics
from parcat.train.seeds import parse_seeds, schedule, split_jobs
from tests.reliability.helpers import ROOT, descendants, gone, kill_group, wait_until

TRAIN = ["train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10",
         "--steps-per-epoch", "10", "--env-workers", "0", "--envs-per-worker", "2",
         "--gradient-steps", "2", "--eval-episodes", "2", "--checkpoint-every", "2"]


@pytest.mark.parametrize(("text", "seeds"), [("0-4", [0, 1, 2, 3, 4]), ("3", [3]),
                                             ("1,3,7", [1, 3, 7]), ("0-2,9,1", [0, 1, 2, 9])])
def test_seeds_are_a_range_or_a_list(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "4-1", "-1", "0-", "1.5", "0-2000"])
def test_bad_seeds_are_one_line_naming_the_form(text: str) -> None:
    with pytest.raises(ConfigError, match=r"--seeds: (expected seeds as 0-4, 1,3,7 or 0-2,9|"
                                          r"1,001 seeds, more than the limit)"):
        parse_seeds(text)


@pytest.mark.parametrize(("jobs", "seeds", "split"), [
    (2, 5, (5, 1)),  # all at once: 2.5 seeds' time, not 3 rounds of 2
    (2, 4, (2, 1)), (2, 3, (3, 1)), (4, 2, (2, 2)), (5, 2, (2, 2)), (1, 3, (1, 1)),
    (2, 100, (2, 1)), (3, 10, (5, 1)), (1, 1, (1, 1))])
def test_jobs_go_to_seeds_first_then_to_their_workers(jobs: int, seeds: int,
                                                      split: tuple[int, int]) -> None:
    assert split_jobs(jobs, seeds) == split


@pytest.mark.parametrize(("jobs", "seeds", "text"), [
    (2, 5, "5 at a time sharing 2 job(s) (~2.5 seeds' time instead of 3 rounds), each "
           "planned on 1 CPU"),
    # 13 seeds, 7 at a time on 3 jobs: 2 rounds of 7/3, not 13/3
    (3, 13, "7 at a time sharing 3 job(s) (~4.67 seeds' time instead of 5 rounds), each "
            "planned on 1 CPU"),
    (4, 2, "2 at a time, 2 job(s) each"), (2, 4, "2 at a time, 1 job(s) each")])
def test_the_header_says_the_schedule(jobs: int, seeds: int, text: str) -> None:
    assert schedule(jobs, seeds) == text


def test_each_seed_is_the_run_its_own_command_would_make(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, [*TRAIN, "--epochs", "4", "--seeds", "0-2", "--jobs", "2",
                                 "-o", str(tmp_path / "many"), "-f", "json"])
    assert result.exit_code == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    assert [(r["seed"], r["exit_code"]) for r in runs] == [(0, 0), (1, 0), (2, 0)]
    assert "one run each in" in result.stderr and "3 at a time" in result.stderr
    one = runner.invoke(app, [*TRAIN, "--epochs", "4", "--seed", "1", "-o",
                              str(tmp_path / "one")])
    assert one.exit_code == 0
    for seed in (0, 1, 2):
        run = tmp_path / "many" / f"seed-{seed}"
        assert checkpoint.read_manifest(run)["seed"] == seed
        assert len(read_metrics(run / "metrics.jsonl")) == 4 and (run / "best").is_dir()
    # sync training in-process: the seed's run equals the one its own command makes
    with np.load(tmp_path / "one" / "agent_0" / "arrays.npz") as a, \
            np.load(tmp_path / "many" / "seed-1" / "agent_0" / "arrays.npz") as b:
        assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_a_seed_that_fails_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "runs" / "seed-1").mkdir(parents=True)
    (tmp_path / "runs" / "seed-1" / "thesis.tex").write_text("mine")
    result = CliRunner().invoke(app, [*TRAIN, "--epochs", "2", "--seeds", "0-1", "--jobs",
                                      "2", "-o", str(tmp_path / "runs")])
    assert result.exit_code == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"parcat: error: 1 of 2 seeds failed; seed 1 ({tmp_path}/runs/"
                           "seed-1): ")
    assert "thesis.tex" in last
    assert (tmp_path / "runs" / "seed-1" / "thesis.tex").read_text() == "mine"
    assert checkpoint.read_manifest(tmp_path / "runs" / "seed-0")["epoch"] == 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_signal_stops_every_seed_with_a_checkpoint_and_no_process_left(
        tmp_path: Path, signum: int) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parcat", *TRAIN, "--epochs", "100000", "--seeds", "0-3",
         "--jobs", "2", "-o", str(tmp_path / "runs")], env=env, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    seen: list[psutil.Process] = []
    try:
        def two_seeds_checkpointed() -> bool:
            seen.extend(p for p in descendants(proc.pid) if p not in seen)
            return all((tmp_path / "runs" / f"seed-{s}" / checkpoint.MANIFEST).exists()
                       for s in (0, 1))
        assert wait_until(two_seeds_checkpointed, timeout=240)
        # each seed plans (spins) on its one job, not on the CPUs idle when it started
        read = 0  # a child may end before its environment is read, but not all of them
        for child in seen:
            with contextlib.suppress(psutil.Error):
                environ = child.environ()
                assert environ["PARCAT_FREE_CPUS"] == "1"
                assert environ["OPENBLAS_NUM_THREADS"] == "1"
                read += 1
        assert read, f"no environment of {len(seen)} seed process(es) could be read"
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=240)
        # SIGKILL: the seeds are told by the kernel (their parent-death signal)
        assert proc.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}.get(signum, -9), err
        assert "Traceback" not in err
        assert wait_until(lambda: gone([p.pid for p in seen]), timeout=120)
        for seed in (0, 1):
            run = tmp_path / "runs" / f"seed-{seed}"
            # the checkpoint holds the last epoch the metrics log has
            logged = len(read_metrics(run / "metrics.jsonl"))
            assert checkpoint.read_manifest(run)["epoch"] == logged
        assert not (tmp_path / "runs" / "seed-2").exists()  # 2 at a time: never started
    finally:
        kill_group(proc)
        for child in seen:
            with contextlib.suppress(psutil.Error):
                child.kill()
