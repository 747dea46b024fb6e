"""Turn-based (PettingZoo AEC) environments run natively as missions: agent by agent,
seeded, every reward counted once, and the same results at every level of parallelism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from parcat.envs.missions import Mission
from parcat.episode.results import EpisodeStatus
from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.eval.report import strip_timings
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec

ROOT = Path(__file__).resolve().parents[2]
NIM = Mission(name="nim", env="tests.envs.nim:NimEnv", params={"low": 5, "high": 15},
              max_steps=100)
CONNECT_FOUR = """\
name: connect_four
description: PettingZoo's Connect Four, a turn-based (AEC) game
env: pettingzoo.classic.connect_four_v3:env
max_steps: 42
"""


def run_nim(mission: Mission, policies: list[str], options: RunOptions, episodes: int = 12) -> dict:
    config = EvalConfig((mission,), tuple(parse_policy_spec(p) for p in policies), episodes, 3)
    return strip_timings(evaluate(config, options).to_document())


@pytest.mark.parametrize("policies", [["random"], ["noop"], ["random", "mlp"]])
def test_every_reward_is_counted_once_and_no_move_is_illegal(policies: list[str]) -> None:
    document = run_nim(NIM, policies, RunOptions(jobs=1))
    for episode in document["episodes"]:
        assert episode["status"] == "ok", episode["error"]  # an illegal move raises
        returns = [a["reward"] for a in episode["agents"]]
        pile = int(np.random.default_rng(episode["seed"]).integers(5, 16))
        # the winner's +1 and the loser's -1 cancel; 0.01 per stone taken remains
        assert sum(returns) == pytest.approx(0.01 * pile)
        assert sorted(r > 0.5 for r in returns) == [False, True]


@pytest.mark.parametrize("options", [
    RunOptions(jobs=2),
    RunOptions(jobs=2, parallel_policy=True),
])
def test_parallel_runs_equal_the_sequential_run(options: RunOptions) -> None:
    assert run_nim(NIM, ["random", "mlp"], options) == \
        run_nim(NIM, ["random", "mlp"], RunOptions(jobs=1))


def test_the_step_limit_stops_a_game_and_credits_what_each_player_earned() -> None:
    short = Mission(**{**NIM.__dict__, "max_steps": 2})
    document = run_nim(short, ["random"], RunOptions(jobs=1))
    for episode in document["episodes"]:
        assert episode["status"] == "ok" and episode["steps"] == 2
        # two moves of 1-3 stones, no winner yet: both players' stone rewards are counted
        assert 0.02 - 1e-9 <= sum(a["reward"] for a in episode["agents"]) <= 0.06 + 1e-9
        assert all(a["reward"] > 0 for a in episode["agents"])


def test_a_pettingzoo_classic_game_evaluates_identically_with_one_and_two_jobs(
        tmp_path: Path) -> None:
    pytest.importorskip("pygame")  # PettingZoo's classic games import it
    (tmp_path / "connect_four.yaml").write_text(CONNECT_FOUR)
    results = []
    for jobs in ("1", "2"):
        proc = subprocess.run(
            [sys.executable, "-m", "parcat", "eval", "-m", "connect_four.yaml", "-p", "random",
             "-p", "mlp", "-n", "10", "--jobs", jobs, "--format", "json"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        assert proc.returncode == 0, proc.stderr
        results.append(strip_timings(json.loads(proc.stdout)))
    assert results[0] == results[1]
    episodes = results[0]["episodes"]
    assert all(e["status"] == EpisodeStatus.OK.value for e in episodes)
    # a game of Connect Four ends with one winner (+1, -1) or a draw (0, 0)
    assert all(sorted(a["reward"] for a in e["agents"]) in ([-1.0, 1.0], [0.0, 0.0])
               for e in episodes)


def test_training_a_turn_based_game_plays_it_against_itself(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "parcat", "train", "-m", "tests.envs.nim:NimEnv", "--epochs", "1",
         "--eval-episodes", "2", "--run-dir", str(tmp_path / "run"), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr  # tests/train/test_selfplay.py: how
    assert (tmp_path / "run" / "player_1" / "manifest.json").is_file()
