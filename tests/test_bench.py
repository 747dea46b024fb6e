"""parcat bench history and compare, parcat plot, and the CI / cron scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from parcat.bench import append_record, compare_records, read_history
from parcat.cli.charts import bar_chart, line_chart
from parcat.cli.main import app

ROOT = Path(__file__).resolve().parents[1]


def record(**figures: float) -> dict[str, object]:
    return {"suite": "parcat-bench", "figures": figures}


def test_history_append_and_compare(tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    append_record(history, record(rollout_agent_steps_per_s=1000.0, agent_overhead_us=5.0))
    append_record(history, record(rollout_agent_steps_per_s=700.0, agent_overhead_us=4.0))
    first, second = read_history(history)
    changes = {c.figure: c for c in compare_records(first, second, threshold=0.2)}
    assert changes["rollout_agent_steps_per_s"].regression  # 30% slower
    assert not changes["agent_overhead_us"].regression  # lower is better: 20% faster
    assert changes["agent_overhead_us"].relative > 0


def test_bench_quick_appends_a_record_and_compares(tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(app, ["bench", "--quick", "--history", str(history),
                                     "--compare", "--threshold", "100", "--max-jobs", "2",
                                     "--format", "json"])
        assert result.exit_code == 0, result.output
    records = read_history(history)
    assert len(records) == 2
    assert {"rollout_agent_steps_per_s", "speedup_jobs_2", "agent_overhead_us",
            "train_collection_steps_per_s"} <= set(records[-1]["figures"])
    assert records[-1]["suite_version"] == 1 and records[-1]["machine"]["cpus"] >= 1
    assert json.loads(result.stdout)["changes"]


def test_charts_render_plain_text() -> None:
    assert "#" in bar_chart({"1": 1.0, "2": 1.9})
    chart = line_chart({"agent_0": [0.0, 1.0, 2.0], "agent_1": [2.0, 1.0, float("nan")]})
    assert "a = agent_0" in chart and "b = agent_1" in chart


def test_plot_reads_a_metrics_log(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"epoch": i, "reward": {"agent_0": i * 0.5}}) + "\n"
                           for i in range(1, 6)))
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 0 and "agent_0" in result.stdout
    bad = CliRunner().invoke(app, ["plot", str(tmp_path), "--field", "nope"])
    assert bad.exit_code == 2


def run_script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    parcat = Path(sys.executable).with_name("parcat")
    environment = {**os.environ, "PARCAT": str(parcat), "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], env=environment,
                          capture_output=True, text=True, timeout=300, check=False)


def test_ci_eval_script_gates_on_the_lower_bound(tmp_path: Path) -> None:
    env = {"EPISODES": "6", "OUTPUT": str(tmp_path / "ci.json")}
    passing = run_script("ci-eval.sh", "greedy", "5", "harvest", **env)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "PASS harvest" in passing.stdout
    failing = run_script("ci-eval.sh", "random", "5", "harvest", **env)
    assert failing.returncode == 1 and "FAIL harvest" in failing.stdout
    assert run_script("ci-eval.sh", "greedy", "5", "nope", **env).returncode == 2


def test_cron_bench_script_appends_to_the_history(tmp_path: Path) -> None:
    history = tmp_path / "bench" / "history.jsonl"
    done = run_script("cron-bench.sh", HISTORY=str(history), QUICK="1", MAX_JOBS="2",
                      THRESHOLD="100")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(read_history(history)) == 1


def test_charts_as_files_with_matplotlib(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("matplotlib")
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"epoch": i, "reward": {"agent_0": i * 0.5}}) + "\n"
                           for i in range(1, 6)))
    runner = CliRunner()
    for name in ("curve.svg", "curve.png"):
        result = runner.invoke(app, ["plot", str(log), "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert (tmp_path / name).stat().st_size > 1000
    assert (tmp_path / "curve.svg").read_text().lstrip().startswith("<?xml")
    chart = tmp_path / "scaling.svg"
    result = runner.invoke(app, ["bench", "--quick", "--max-jobs", "2", "--history",
                                 str(tmp_path / "h.jsonl"), "--chart", str(chart)])
    assert result.exit_code == 0, result.output
    assert chart.stat().st_size > 1000
