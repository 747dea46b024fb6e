"""``parcat train --resume`` at the edges: no checkpoint yet, and a metrics log a kill cut."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from parcat.cli.main import main
from parcat.core.errors import ConfigError
from parcat.policies import checkpoint
from parcat.train.metrics import MetricsLog, read_metrics

MISSION = ["-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10"]
TRAIN = ["train", *MISSION, "--steps-per-epoch", "8", "--env-workers", "0",
         "--envs-per-worker", "2", "--gradient-steps", "2", "--format", "json"]


def train(run: Path, epochs: int, capsys: pytest.CaptureFixture[str],
          *extra: str) -> tuple[int, str]:
    code = main([*TRAIN, "--epochs", str(epochs), "--run-dir", str(run), *extra])
    err = capsys.readouterr().err.splitlines(keepends=True)
    return code, "".join(line for line in err if not line.startswith("epoch "))  # progress


def epochs_logged(run: Path) -> list[int]:
    return [record["epoch"] for record in read_metrics(run / "metrics.jsonl")]


def test_resume_without_a_run_directory_starts_from_epoch_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "runs" / "new"
    assert train(run, 2, capsys, "--resume") == (
        0, f"--resume: no checkpoint in '{run}' yet; starting from epoch 0\n"
    )
    assert checkpoint.read_manifest(run)["epoch"] == 2
    assert epochs_logged(run) == [1, 2]


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"epoch": 1, "reward": {}}\n{"epoch": 2, "rew')
    assert train(run, 1, capsys, "--resume") == (
        0, f"--resume: no checkpoint in '{run}' yet; starting from epoch 0\n"
    )
    assert epochs_logged(run) == [1]  # the old run's records are gone with it
    assert checkpoint.read_manifest(run)["epoch"] == 1


def test_resume_into_a_directory_that_is_no_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "photos"
    run.mkdir()
    (run / "holiday.jpg").write_bytes(b"\xff\xd8")
    assert train(run, 1, capsys, "--resume") == (
        2, f"parcat: error: --resume: '{run}' holds files but no manifest.json: it is no "
        "parcat run, or a damaged one; give another --run-dir\n"
    )
    assert sorted(p.name for p in run.iterdir()) == ["holiday.jpg"]


def test_a_cut_last_metrics_line_is_dropped_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert train(run, 2, capsys)[0] == 0
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write('{"epoch": 3, "reward": {"agent_0": 0.')  # killed while appending
    assert train(run, 3, capsys, "--resume") == (0, "")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]


def test_a_garbled_metrics_line_before_the_last_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert train(run, 2, capsys)[0] == 0
    log = run / "metrics.jsonl"
    first, second = log.read_text().splitlines()
    log.write_text(f"{first[:20]}\n{second}\n")
    assert train(run, 3, capsys, "--resume") == (
        2, f"parcat: error: metrics log '{log}' line 1 is not a JSON record; fix or delete "
        "that line\n"
    )


def test_read_metrics_leaves_out_a_cut_last_line_and_names_a_bad_one(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    log.write_bytes(b'{"epoch": 1}\n\n{"epoch": 2}\n{"epoch": 3, "name": "\xc3')  # cut in a char
    assert [r["epoch"] for r in read_metrics(log)] == [1, 2]
    log.write_bytes(b'{"epoch": 1}\n["epoch", 2]\n')
    message = (f"metrics log '{log}' line 2: expected an epoch's mapping with an integer "
               "'epoch' key; fix or delete that line")
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_metrics(log)


def test_csv_metrics_lose_a_cut_last_row_when_truncated(tmp_path: Path) -> None:
    metrics = MetricsLog(tmp_path, "csv", fresh=True)
    for epoch in (1, 2, 3):
        metrics.write({"epoch": epoch, "reward": {"agent_0": epoch / 2}})
    with metrics.path.open("a") as handle:
        handle.write("4,2.")
    metrics.truncate(2)
    assert metrics.path.read_text().splitlines() == ["epoch,reward.agent_0", "1,0.5", "2,1.0"]
    metrics.path.write_text("epoch,reward.agent_0\n1,0.5\nx,1\n2,1.0\n")
    message = (f"metrics log '{metrics.path}' line 3: expected a row of the header's columns "
               "with an integer 'epoch'; fix or delete that line")
    with pytest.raises(ConfigError, match=re.escape(message)):
        metrics.truncate(2)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_log_two_runs_wrote_at_once_is_refused_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    run = tmp_path / "run"
    assert train(run, 3, capsys, "--metrics-format", fmt)[0] == 0
    log = run / f"metrics.{fmt}"
    lines = log.read_text().splitlines(keepends=True)
    head = 1 if fmt == "csv" else 0
    # epochs 1, 2, 2, 3, 3: what two writers of one run once left
    log.write_text("".join([*lines[:head + 2], lines[head + 1], lines[head + 2],
                            lines[head + 2]]))
    before = log.read_text()
    assert train(run, 5, capsys, "--resume", "--metrics-format", fmt) == (
        2, f"parcat: error: metrics log '{log}' line {head + 3}: epoch 2 where epoch 3 should "
        "follow; two runs wrote this log at once, so its records are mixed: train again into "
        "another --run-dir\n")
    assert log.read_text() == before
    assert checkpoint.read_manifest(run)["epoch"] == 3


def test_a_csv_log_from_before_the_best_columns_keeps_its_header_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert train(run, 2, capsys, "--metrics-format", "csv")[0] == 0
    log = run / "metrics.csv"
    # what a run of an older parcat wrote: no best.<side>.* columns
    rows = list(csv.DictReader(log.open(newline="")))
    old = [key for key in rows[0] if not key.startswith("best.")]
    assert len(old) < len(rows[0])
    with log.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=old, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    code, err = train(run, 3, capsys, "--resume", "--metrics-format", "csv")
    assert code == 0
    assert re.fullmatch(rf"parcat: warning: metrics log '{re.escape(str(log))}' has no "
                        r"columns best\.total\.epoch, .*; its rows leave them out "
                        r"\(--metrics-format jsonl keeps every key\)\n", err), err
    assert train(run, 4, capsys, "--resume", "--metrics-format", "csv")[0] == 0
    assert log.read_text().splitlines()[0] == ",".join(old)
    assert [record["epoch"] for record in read_metrics(log)] == [1, 2, 3, 4]


def test_a_key_a_later_epoch_adds_to_a_csv_log_is_left_out_with_one_warning(
        tmp_path: Path) -> None:
    # async training has no learner metrics until its first round comes back
    metrics = MetricsLog(tmp_path, "csv", fresh=True)
    metrics.write({"epoch": 1, "reward": {"agent_0": 0.5}})
    with pytest.warns(UserWarning, match=re.escape(
            f"metrics log '{metrics.path}' has no columns loss.agent_0; its rows leave them "
            "out (--metrics-format jsonl keeps every key)")):
        metrics.write({"epoch": 2, "reward": {"agent_0": 1.0}, "loss": {"agent_0": 0.1}})
    metrics.write({"epoch": 3, "reward": {"agent_0": 1.5}, "loss": {"agent_0": 0.1}})
    assert read_metrics(metrics.path) == [
        {"epoch": epoch, "reward": {"agent_0": epoch / 2}} for epoch in (1, 2, 3)]
