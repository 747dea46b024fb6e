"""``parcat compare A B`` of two folders of training runs (``--seeds``): each run's final
score, each group's IQM with its 95% interval, and B − A."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.policies import checkpoint

GROUPS = {"a": [1.0, 2.0, 3.0, 4.0], "b": [5.0, 6.0, 7.0, 8.0]}


def write_seeds(folder: Path, finals: list[float]) -> None:
    """Runs as --seeds leaves them, each with an earlier evaluation and then its final one
    (a last epoch not evaluated: its NaNs are passed over)."""
    for index, final in enumerate(finals):
        run = folder / f"seed-{index}"
        checkpoint.save_run(run, {}, {"mission": "goal_tasks", "epoch": 3})
        records = [{"epoch": 1, "eval_return": {"agent_0": -9.0, "agent_1": -9.0, "total": -18}},
                   {"epoch": 2, "eval_return": {"agent_0": final - 1, "agent_1": final + 1,
                                                "total": 2 * final}},
                   {"epoch": 3, "eval_return": {"agent_0": None, "agent_1": None,
                                                "total": None}}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_two_groups_of_seeds_compare_on_their_final_scores(tmp_path: Path) -> None:
    for name, finals in GROUPS.items():
        write_seeds(tmp_path / name, finals)
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"),
                                      "-f", "json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["mission"], row["seeds_a"], row["seeds_b"]) == ("goal_tasks", 4, 4)
    assert row["iqm_a"]["value"] == 2.5 and row["iqm_b"]["value"] == 6.5
    assert row["iqm_a"]["low"] <= 2.5 <= row["iqm_a"]["high"] < row["iqm_b"]["low"]
    assert row["difference"]["value"] == 4.0 and row["difference"]["low"] > 0
    assert row["improvement"]["value"] == 1.0
    table = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert "seeds A/B" in table.stdout and "4/4" in table.stdout


def test_a_folder_without_evaluated_runs_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    write_seeds(tmp_path / "b", [1.0])
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "empty"), str(tmp_path / "b")])
    assert result.exit_code == 2
    assert result.stderr == (
        f"parcat: error: compare: '{tmp_path / 'empty'}' holds no training run with a greedy "
        "evaluation (a run directory, or a folder of them such as --seeds writes)\n")
