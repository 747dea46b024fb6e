"""``--total-steps``, the run's budget in environment steps, and the old names of knobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcat.cli.main import app

TRAIN = ["train", "-m", "goal_tasks", "--set", "agents=1", "--set", "max_steps=10",
         "--steps-per-epoch", "5", "--env-workers", "0", "--envs-per-worker", "4",
         "--gradient-steps", "1", "--eval-episodes", "1"]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(("total", "epochs"), [(100, 5), (90, 5), (1, 1)])
def test_total_steps_sets_the_epochs_rounding_up(tmp_path: Path, total: int, epochs: int) -> None:
    code, out, _ = run(*TRAIN, "--total-steps", str(total), "--epochs", "999", "-f", "json",
                       "-o", str(tmp_path / "run"))
    assert code == 0
    done = json.loads(out)["epochs"]
    assert [e["epoch"] for e in done] == list(range(1, epochs + 1))
    assert done[-1]["total_env_steps"] == epochs * 20 >= total


def test_a_run_that_spent_its_budget_does_not_resume(tmp_path: Path) -> None:
    args = [*TRAIN, "--total-steps", "40", "-o", str(tmp_path / "run"), "--no-progress"]
    assert run(*args)[0] == 0
    code, _, err = run(*args, "--resume")
    assert (code, err.strip()) == (2, f"parcat: error: --resume: '{tmp_path / 'run'}' already "
                                      "reached --total-steps 40; raise --total-steps to train on")
    code, out, _ = run(*TRAIN, "--total-steps", "60", "-o", str(tmp_path / "run"), "--resume",
                       "-f", "json")
    assert code == 0 and [e["epoch"] for e in json.loads(out)["epochs"]] == [3]


def test_old_names_are_one_line_naming_the_new_ones(tmp_path: Path) -> None:
    code, _, err = run(*TRAIN, "--train-steps", "3")
    assert (code, err) == (2, "parcat: error: --train-steps is now --gradient-steps (learner "
                              "updates per learner per epoch)\n")
    path = tmp_path / "old.yaml"
    path.write_text("mission: goal_tasks\ntrain_steps: 4\n")
    code, _, err = run("train", "-c", str(path))
    assert (code, err) == (2, f"parcat: error: --config '{path}': key 'train_steps' is now "
                              "'gradient_steps' (learner updates per learner per epoch); "
                              "rename it\n")


def test_total_steps_must_be_positive() -> None:
    code, _, err = run(*TRAIN, "--total-steps", "0")
    assert code == 2
    assert "total_steps must be an integer between 1 and 1,000,000,000, got 0" in err


def test_epochs_on_the_command_line_win_over_a_files_total_steps(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("mission: goal_tasks\ntotal_steps: 1000\n")
    code, out, _ = run("train", "-c", str(path), *TRAIN[3:], "--epochs", "2", "-f", "json",
                       "-o", str(tmp_path / "run"))
    assert code == 0 and len(json.loads(out)["epochs"]) == 2


def test_the_log_keeps_the_best_total_so_far(tmp_path: Path) -> None:
    code, out, _ = run(*TRAIN, "--epochs", "6", "--checkpoint-every", "2", "-f", "json",
                       "-o", str(tmp_path / "run"))
    assert code == 0
    best, seen = [], float("-inf")
    for epoch in json.loads(out)["epochs"]:
        total = (epoch["eval_return"] or {}).get("total")
        seen = max(seen, total) if total is not None else seen
        best.append(epoch["best_eval_return"])
        assert epoch["best_eval_return"] == (None if seen == float("-inf") else seen)
    assert best[0] is None and best[-1] is not None
