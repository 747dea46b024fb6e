"""parcat eval --jobs / --parallel-policy / --trace and parcat plan from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcat.cli.main import app, main
from parcat.eval.report import strip_timings

runner = CliRunner()
BASE = ["-m", "harvest", "-m", "goal_tasks", "-p", "greedy", "-p", "random", "-n", "3",
        "--seed", "5", "--set", "max_steps=30"]


def test_headline_command_equals_sequential(tmp_path: Path) -> None:
    seq, par = tmp_path / "seq.json", tmp_path / "par.json"
    assert runner.invoke(app, ["eval", *BASE, "--jobs", "1", "-o", str(seq)]).exit_code == 0
    result = runner.invoke(app, ["eval", *BASE, "--jobs", "4", "--parallel-policy",
                                 "-o", str(par)])
    assert result.exit_code == 0, result.output
    a, b = json.loads(seq.read_text()), json.loads(par.read_text())
    assert strip_timings(a) == strip_timings(b)
    assert b["execution"]["jobs"] == 4 and b["execution"]["plan"]["busy_processes"] <= 4


def test_plan_prints_plan_and_reasons_without_running() -> None:
    result = runner.invoke(app, ["plan", "-m", "harvest", "-n", "2", "--jobs", "8",
                                 "--parallel-policy", "--policy-strategy", "process"])
    assert result.exit_code == 0, result.output
    assert "--jobs 8 is more than the 2 episodes" in result.stdout
    assert "policy worker(s) per episode" in result.stdout
    as_json = runner.invoke(app, ["plan", "-m", "harvest", "--jobs", "64", "-n", "1000",
                                  "--format", "json"])
    plan = json.loads(as_json.stdout)
    assert plan["episode_workers"] == 64 and plan["busy_processes"] <= 64


def test_trace_file_shows_workers_episodes_and_agent_steps(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    args = ["eval", "-m", "harvest", "-n", "1", "--set", "max_steps=10", "--jobs", "2",
            "--parallel-policy", "--policy-strategy", "process", "--trace", str(trace)]
    assert runner.invoke(app, args).exit_code == 0
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    # the format's integer thread ids, each named by a thread_name metadata event
    assert all(isinstance(e["tid"], int) for e in events)
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in spans} <= set(lanes)
    assert any(e["name"] == "harvest #0" for e in spans)
    assert any(lanes[e["pid"], e["tid"]] == "policy-worker-0" and
               e["name"].startswith("step agent_") for e in spans)
    # env steps nest inside their episode's span, on its track
    episode = next(e for e in spans if e["name"] == "harvest #0")
    steps = [e for e in spans if e["name"] == "env step" and e["pid"] == episode["pid"]
             and e["tid"] == episode["tid"]]
    assert len(steps) == 10
    assert all(episode["ts"] <= e["ts"] and e["ts"] + e["dur"] <= episode["ts"] + episode["dur"]
               for e in steps)
    assert all(e["dur"] >= 0 for e in spans)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "parcat: error: --jobs must be an integer >= 1, got 0"),
        (["--policy-strategy", "magic"], "parcat: error: parcat eval: Invalid value for "
                                         "'--policy-strategy'"),
        (["--start-method", "fork"],
         "parcat: error: parcat eval: Invalid value for '--start-method': 'fork' "
         "is not one of 'forkserver', 'spawn'.\n"),
        (["--backend", "dask"],
         "parcat: error: parcat eval: Invalid value for '--backend': 'dask' "
         "is not one of 'local', 'ray'.\n"),
        (["--address", "10.0.0.1:6379"], "parcat: error: --address needs --backend ray\n"),
        (["--action-timeout-ms", "-1"], "parcat: error: --action-timeout-ms must be > 0"),
    ],
)
def test_bad_parallel_flags(args: list[str], message: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "-m", "harvest", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(message) and err.count("\n") == 1
