"""Hostile files parcat reads (red-team items 5, 11, 12): a FIFO where a file was expected
never hangs a command, hostile values in a ``--resume`` file or a metrics log are one line
naming the file, exit 2, and a ``./missions/`` file that shadows a built-in mission says so.

The CLI runs in real subprocesses, in a folder of real files and FIFOs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parcat.bench.suite import read_history
from parcat.core.errors import CheckpointError, ConfigError, MissionError
from parcat.core.readfile import NOT_REGULAR
from parcat.core.yamlfile import read_yaml_mapping
from parcat.eval.report import describe
from parcat.eval.results_file import read_results
from parcat.policies.checkpoint_manifest import parse_manifest
from parcat.train.metrics import read_metrics

EVAL = ["eval", "-m", "harvest", "-n", "2", "--jobs", "1", "--set", "max_steps=20"]


def parcat(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PARCAT_FREE_CPUS": "1"}
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def returns_within(call: Callable[[], Any], seconds: float = 10) -> BaseException | None:
    """What ``call`` raised, failing the test if it is still blocked after ``seconds``."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            raised.append(None)
        except BaseException as exc:  # handed to the test
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert raised, f"{call} blocked on a FIFO for {seconds} s"
    return raised[0]


@pytest.mark.parametrize("reader", ["yaml", "metrics", "results", "history", "manifest"])
def test_every_reader_refuses_a_fifo_at_once(tmp_path: Path, reader: str) -> None:
    fifo = tmp_path / ("manifest.json" if reader == "manifest" else "f")
    os.mkfifo(fifo)
    calls: dict[str, tuple[Callable[[], Any], type[Exception]]] = {
        "yaml": (lambda: read_yaml_mapping(fifo, "mission file", MissionError), MissionError),
        "metrics": (lambda: read_metrics(fifo), ConfigError),
        "results": (lambda: read_results(fifo, "--resume"), ConfigError),
        "history": (lambda: read_history(fifo), ConfigError),
        "manifest": (lambda: parse_manifest(tmp_path), CheckpointError),
    }
    call, error = calls[reader]
    raised = returns_within(call)
    assert isinstance(raised, error), raised
    if reader != "history":  # its message names the error type, not the reason
        assert NOT_REGULAR in str(raised)


def test_missions_list_skips_a_fifo_and_an_alias_bomb_naming_each(tmp_path: Path) -> None:
    (tmp_path / "missions").mkdir()
    os.mkfifo(tmp_path / "missions" / "x.yaml")
    bomb = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
        for p, c in zip("abcdef", "bcdefg", strict=True))
    (tmp_path / "missions" / "bomb.yaml").write_text(bomb)
    proc = parcat("missions", "list", "-f", "json", cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert {"harvest", "evade", "goal_tasks"} <= {m["name"] for m in json.loads(proc.stdout)}
    warnings = proc.stderr.splitlines()
    assert len(warnings) == 2, proc.stderr
    assert any("x.yaml" in w and NOT_REGULAR in w for w in warnings)
    assert any("bomb.yaml" in w and "alias bomb" in w for w in warnings)
    assert all(w.startswith("parcat: warning: ") for w in warnings)


def test_train_resume_with_a_fifo_metrics_log_is_one_line(tmp_path: Path) -> None:
    train = ["train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10",
             "--steps-per-epoch", "8", "--env-workers", "0", "--gradient-steps", "1",
             "--eval-episodes", "1", "-o", "run"]
    assert parcat(*train, "--epochs", "1", cwd=tmp_path).returncode == 0
    log = tmp_path / "run" / "metrics.jsonl"
    log.unlink()
    os.mkfifo(log)
    proc = parcat(*train, "--epochs", "2", "--resume", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert one_line(proc) == (f"parcat: error: cannot read metrics log 'run/metrics.jsonl': "
                              f"{NOT_REGULAR}")


def _hostile(case: str, episode: dict[str, Any]) -> None:
    agents = episode["agents"]
    if case == "bigint":
        agents[0]["reward"] = 10**300
    elif case == "failed":
        episode["status"] = "failed"
    elif case == "dup":
        episode["agents"] = agents * 50
    else:
        episode["agents"] = [*agents, dict(agents[0], agent_id="ghost")]


@pytest.mark.parametrize(("case", "says"), [
    ("bigint", "reward: an integer of 301 digits, more than a float holds exactly"),
    ("failed", "status 'failed' without an 'error' saying why"),
    ("dup", "agents: agent 'agent_0' appears more than once"),
    ("ghost", "gives a result of agent 'ghost', not an agent of mission 'harvest' "
              "(agent_0, agent_1, agent_2, agent_3)"),
])
def test_hostile_values_in_a_resume_file_are_one_line(tmp_path: Path, case: str,
                                                      says: str) -> None:
    assert parcat(*EVAL, "-o", "res.json", cwd=tmp_path).returncode == 0
    document = json.loads((tmp_path / "res.json").read_text())
    _hostile(case, document["episodes"][0])
    (tmp_path / "res.json").write_text(json.dumps(document))
    proc = parcat(*EVAL, "-o", "res.json", "--resume", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert line.startswith("parcat: error: --resume: 'res.json': episode 0 ")
    assert says in line


def test_plot_of_a_400_digit_integer_names_the_line(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"epoch": 1, "reward": {"agent_0": 1.0}}\n'
                   f'{{"epoch": 2, "reward": {{"agent_0": {10**400}}}}}\n')
    proc = parcat("plot", "metrics.jsonl", cwd=tmp_path)
    assert proc.returncode == 2
    assert one_line(proc) == ("parcat: error: metrics log 'metrics.jsonl' line 2: an integer "
                              "of 401 digits, too large for a float; fix or delete that line")


def test_returns_near_the_largest_float_summarise_without_overflow() -> None:
    summary = describe("m", "*", [1e308, 1.5e308, -1e308], 0)
    assert summary.mean == pytest.approx(0.5e308)
    assert summary.std == float("inf")


def test_a_mission_file_that_shadows_a_built_in_one_says_so(tmp_path: Path) -> None:
    (tmp_path / "missions").mkdir()
    (tmp_path / "missions" / "harvest.yaml").write_text(
        "name: harvest\nenv: parcat.envs.harvest:HarvestEnv\nmax_steps: 20\n"
        "description: mine\n")
    proc = parcat(*EVAL[:-2], "-p", "random", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "parcat: note: mission 'harvest' is ./missions/harvest.yaml, not the built-in one"]
    listed = parcat("missions", "list", "-f", "json", cwd=tmp_path)
    shadows = {m["name"]: m["shadows_builtin"] for m in json.loads(listed.stdout)}
    assert shadows["harvest"] and not shadows["evade"]
    table = parcat("missions", "list", cwd=tmp_path)
    assert "not the built-in one" in table.stdout


def test_an_env_whose_close_fails_is_said_to_fail_while_being_closed(tmp_path: Path) -> None:
    (tmp_path / "badclose.py").write_text(
        "from parcat.envs.harvest import HarvestEnv\n"
        "def make(**kwargs):\n"
        "    env = HarvestEnv(**kwargs)\n"
        "    def close():\n"
        "        raise RuntimeError('close boom')\n"
        "    env.close = close\n"
        "    return env\n")
    proc = parcat("eval", "-m", "badclose:make", "-n", "1", "--trust-code", cwd=tmp_path)
    assert proc.returncode == 2
    assert one_line(proc) == ("parcat: error: mission 'badclose:make' raised RuntimeError: "
                              "close boom while being closed")
