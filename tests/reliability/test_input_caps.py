"""Scenario 10b: inputs too large, too deep or unreadable are one line and exit 2, before
anything is allocated (binary files, deep or huge YAML, alias bombs, long names, grids, agent
counts, networks, learners and episode counts past :mod:`parcat.core.limits`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from parcat.cli.main import main
from parcat.core.errors import MissionError
from parcat.core.limits import MAX_YAML_BYTES
from parcat.envs.missions import load_mission
from tests.reliability.helpers import ROOT

HARVEST = "env: parcat.envs.harvest:HarvestEnv\n"
LONG_NAME = "x" * 5000
ALIAS_BOMB = "".join(
    [HARVEST, "params:\n  a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"]
    + [f"  {c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n"
       for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
)


def write(folder: Path, name: str, content: str | bytes) -> str:
    """Write a file into ``folder`` and return its path as the CLI is given it."""
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


Case = Callable[[Path], tuple[list[str], str]]
"""Given a folder for its files: the command line and the one line it must print."""

CASES: dict[str, Case] = {
    "binary mission file": lambda d: (
        ["eval", "-m", p := write(d, "bin.yaml", b"env: x:y\n\xff\xfe\x00\x01")],
        f"mission file '{p}' is not UTF-8 text (byte 9 cannot be decoded); is it a binary "
        "file? save it as UTF-8",
    ),
    "binary train config": lambda d: (
        ["train", "-c", p := write(d, "bin.yaml", bytes(range(128, 256)))],
        f"--config '{p}' is not UTF-8 text (byte 0 cannot be decoded); is it a binary "
        "file? save it as UTF-8",
    ),
    "YAML nested 5,000 deep": lambda d: (
        ["eval", "-m", p := write(d, "deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n")],
        f"mission file '{p}': line 1: nested more than 64 levels deep (the limit)",
    ),
    "YAML file over the size limit": lambda d: (
        ["eval", "-m", p := write(d, "huge.yaml", HARVEST + "#" * MAX_YAML_BYTES)],
        f"mission file '{p}' is larger than 256 KiB (the limit for a YAML file); is it the "
        "right file?",
    ),
    "YAML alias bomb": lambda d: (
        ["eval", "-m", p := write(d, "bomb.yaml", ALIAS_BOMB)],
        f"mission file '{p}': more than 200,000 values once aliases are expanded (the limit; "
        "an alias bomb?)",
    ),
    "recursive YAML alias": lambda d: (
        ["train", "-c", p := write(d, "loop.yaml", "overrides: &o\n  me: *o\n")],
        f"--config '{p}': line 1: an alias refers to a value that contains it (a "
        "recursive structure)",
    ),
    "5,000-digit integer": lambda d: (
        ["eval", "-m", p := write(d, "int.yaml", HARVEST + "max_steps: " + "9" * 5000)],
        f"mission file '{p}': line 2: an integer of 5,000 characters (the limit is 100)",
    ),
    "5,000-character mission name": lambda d: (
        ["eval", "-m", LONG_NAME],
        f"mission '{'x' * 59}…' is 5,000 characters long; a mission name or path has at "
        "most 4,096",
    ),
    "mission name longer than a file name may be": lambda d: (
        ["eval", "-m", "x" * 300],
        f"mission '{'x' * 59}…' cannot be a file name: File name too long; give a mission "
        "name or a shorter YAML path",
    ),
    "mission 'name' with a NUL": lambda d: (
        ["eval", "-m", p := write(d, "nul.yaml", HARVEST + 'name: "a\\0b"\n')],
        f"mission file '{p}': 'name' must be printable text of at most 128 characters, got "
        "'a\\x00b'",
    ),
    "size: 100000 in a mission": lambda d: (
        ["eval", "-m", write(d, "big.yaml", HARVEST + "params:\n  size: 100000\n")],
        "harvest: parameter 'size' must be an integer between 5 and 1,024, got 100000",
    ),
    "size: 1.0e+9, an integral float": lambda d: (
        ["eval", "-m", write(d, "big.yaml", HARVEST + "params:\n  size: 1.0e+9\n")],
        "harvest: parameter 'size' must be an integer between 5 and 1,024, got 1000000000.0",
    ),
    "agents: 100000000 in a mission": lambda d: (
        ["eval", "-m", write(d, "many.yaml", HARVEST + "params:\n  agents: 100000000\n")],
        "harvest: parameter 'agents' must be an integer between 1 and 4,096, got 100000000",
    ),
    "--set view=1000000": lambda d: (
        ["eval", "-m", "harvest", "--set", "view=1000000"],
        "harvest: parameter 'view' must be an integer between 1 and 64, got 1000000",
    ),
    "all harvest windows past the observation cap": lambda d: (
        ["eval", "-m", "harvest", "--set", "view=64", "--set", "agents=4096"],
        "harvest: 4,096 agents observing 66,567 numbers each make 272,658,432 numbers a "
        "step, more than the limit of 16,777,216; use fewer agents or a smaller view",
    ),
    "evade observations growing with the square of agents": lambda d: (
        ["eval", "-m", "evade", "--set", "pursuers=4000"],
        "evade: 4,001 agents observing 8,005 numbers each make 32,028,005 numbers a step, "
        "more than the limit of 16,777,216; use fewer pursuers",
    ),
    "--set max_steps past the cap": lambda d: (
        ["eval", "-m", "goal_tasks", "--set", "max_steps=1000000000"],
        "mission 'goal_tasks': max_steps must be an integer between 1 and 100,000,000, got "
        "1000000000",
    ),
    "mlp,depth=100000": lambda d: (
        ["eval", "-m", "harvest", "-p", "mlp,depth=100000"],
        "mlp: 'depth' must be an integer between 1 and 64, got 100000 (mission 'harvest')",
    ),
    "mlp,width=1000000000": lambda d: (
        ["eval", "-m", "harvest", "-p", "mlp,width=1000000000"],
        "mlp: 'width' must be an integer between 1 and 8,192, got 1000000000 (mission "
        "'harvest')",
    ),
    "mlp past the parameter cap": lambda d: (
        ["eval", "-m", "harvest", "-p", "mlp,width=8000,depth=10"],
        "mlp: width 8000 and depth 10 on 103 inputs make 576,944,005 parameters, more than "
        "the limit of 16,777,216; use a smaller width or depth (mission 'harvest')",
    ),
    "train learner width: 100000000": lambda d: (
        ["train", "-c", write(d, "w.yaml", "learner:\n  width: 100000000\n")],
        "dqn: 'width' must be an integer between 1 and 8,192, got 100000000",
    ),
    "train learner past the parameter cap": lambda d: (
        ["train", "-c", write(d, "w.yaml", "learner:\n  width: 8000\n  depth: 3\n")],
        "dqn: width 8000 and depth 3 on 5 inputs make 128,104,005 parameters, more than the "
        "limit of 16,777,216; use a smaller width or depth",
    ),
    "train replay buffer past the memory cap": lambda d: (
        ["train", "-m", "harvest", "-c", write(d, "b.yaml", "learner:\n  buffer_size: 10000000\n")],
        "dqn: a full replay buffer of 10,000,000 transitions of 103 numbers would take 7.8 GiB, "
        "more than the limit of 4 GiB; use a buffer_size of at most 5,131,382",
    ),
    "train batch_size past the cap": lambda d: (
        ["train", "-c", write(d, "b.yaml", "learner:\n  batch_size: 1000000\n")],
        "dqn: 'batch_size' must be an integer between 1 and 65,536, got 1000000",
    ),
    "train environments past the cap": lambda d: (
        ["train", "--env-workers", "100", "--envs-per-worker", "1000"],
        "env_workers (100) times envs_per_worker (1000) is 100,000 environments, more than "
        "the limit of 4,096; lower either",
    ),
    "train env_workers past the cap": lambda d: (
        ["train", "--env-workers", "100000"],
        "env_workers must be an integer between 0 and 1,024, got 100000",
    ),
    "train --epochs past the cap": lambda d: (
        ["train", "--epochs", "1000000000000"],
        "epochs must be an integer between 1 and 1,000,000,000, got 1000000000000",
    ),
    "eval --max-episodes 0": lambda d: (
        ["eval", "-m", "harvest", "--precision", "0.1", "--max-episodes", "0"],
        "--max-episodes must be an integer between 1 and 1,000,000,000, got 0",
    ),
    "eval -n 10**23": lambda d: (
        ["eval", "-m", "harvest", "-n", str(10**23)],
        f"--episodes must be an integer between 1 and 1,000,000,000, got {10**23}",
    ),
    "64 agents with big mlp networks": lambda d: (
        ["eval", "-m", "harvest", "--set", "agents=64", "-p", "mlp,width=2048,depth=4"],
        "mlp: the 64 agents of mission 'harvest' would have 819,986,752 network parameters "
        "together, more than the limit of 67,108,864; use a smaller width or depth",
    ),
    "plan -n 10**23": lambda d: (
        ["plan", "-m", "harvest", "-n", str(10**23)],
        f"--episodes must be an integer between 1 and 1,000,000,000, got {10**23}",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_input_past_a_limit_is_one_line_and_exit_2(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # a train run that started would write runs/ here
    args, message = CASES[case](tmp_path)
    code = main(args)
    out, err = capsys.readouterr()
    assert (code, err) == (2, f"parcat: error: {message}\n"), out


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00", b"a: " + b"[" * 5000])
def test_a_real_process_given_a_binary_or_deep_mission_prints_one_line(
    content: bytes, tmp_path: Path
) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(content)
    proc = subprocess.run(
        [sys.executable, "-m", "parcat", "eval", "-m", str(path)], capture_output=True,
        text=True, timeout=60, check=False, cwd=tmp_path,
        # this checkout's parcat, not whichever one the virtualenv has installed
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        f"parcat: error: mission file '{path}'"
    )
    assert "Traceback" not in proc.stderr


def test_a_mission_name_with_a_nul_is_refused() -> None:
    message = "mission 'a\x00b' contains a NUL character; give a mission name or a YAML path"
    with pytest.raises(MissionError, match=re.escape(message)):
        load_mission("a\x00b")
