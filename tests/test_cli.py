"""The CLI: CliRunner for the commands, one real subprocess, exact one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcat.cli.main import app, main
from parcat.eval.report import strip_timings

runner = CliRunner()


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_default_prints_a_table() -> None:
    result = runner.invoke(app, ["eval", "-m", "harvest", "-n", "3"])
    assert result.exit_code == 0, result.output
    assert "harvest" in result.stdout and "greedy" in result.stdout and "95% CI" in result.stdout


def test_eval_json_output_file_and_determinism(tmp_path: Path) -> None:
    args = ["eval", "-m", "harvest", "-m", "evade", "-p", "greedy", "-p", "random",
            "--episodes", "4", "--seed", "7"]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert runner.invoke(app, [*args, "--output", str(first)]).exit_code == 0
    assert runner.invoke(app, [*args, "--output", str(second), "-f", "json"]).exit_code == 0
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    assert a["schema"] == "parcat.eval" and a["version"] == 1 and a["status"] == "complete"
    assert len(a["episodes"]) == 8
    assert strip_timings(a) == strip_timings(b)
    other = tmp_path / "c.json"
    runner.invoke(app, [*args[:-1], "8", "--output", str(other)])
    assert strip_timings(json.loads(other.read_text()))["episodes"] != strip_timings(a)["episodes"]
    assert not list(tmp_path.glob(".*.tmp")), "temp files left behind"


def test_eval_csv_format() -> None:
    result = runner.invoke(app, ["eval", "-m", "goal_tasks", "-n", "2", "-f", "csv"])
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("mission,policy,episodes,failed,mean")
    assert lines[1].startswith("goal_tasks,*,2,0,")


def test_failed_episode_exits_1_and_others_run(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["eval", "-m", "harvest", "-n", "3", "-p",
                                 "tests.fakes:CrashingPolicy,at_step=5", "-o", str(out)])
    assert result.exit_code == 1
    data = json.loads(out.read_text())
    assert data["status"] == "failed"
    assert all(e["status"] == "failed" for e in data["episodes"])
    assert data["episodes"][0]["error"]["agent"] in {"agent_0", "agent_1", "agent_2", "agent_3"}
    assert "ValueError: policy crashed on step 6" in data["episodes"][0]["error"]["traceback"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "-m", "harvst"], "parcat: error: mission 'harvst' not found in "),
        (["eval", "-m", "harvest", "-p", "rnd"], "parcat: error: policy 'rnd' is not a built-in"),
        (["eval", "-m", "harvest", "-n", "0"],
         "parcat: error: --episodes must be an integer between 1 and 1,000,000,000, got 0"),
        (["eval", "-m", "harvest", "--set", "agents=0"],
         "parcat: error: harvest: parameter 'agents' must be an integer between 1 and 4,096, "
         "got 0"),
        (["eval", "-m", "harvest", "--format", "xml"],
         "parcat: error: parcat eval: Invalid value for '--format'"),
        (["eval", "-m", "harvest", "--jobz", "2"], "parcat: error: parcat eval: No such option"),
        (["missions", "show", "nope"], "parcat: error: mission 'nope' not found"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run_main(args, capsys)
    assert code == 2
    assert err.startswith(message), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missions_and_policies_listing() -> None:
    listed = runner.invoke(app, ["missions", "list", "--format", "json"])
    assert {m["name"] for m in json.loads(listed.stdout)} >= {"harvest", "evade", "goal_tasks"}
    shown = runner.invoke(app, ["missions", "show", "harvest", "--format", "json"])
    info = json.loads(shown.stdout)
    assert info["params"]["agents"] == 4 and len(info["agents"]) == 4
    policies = runner.invoke(app, ["policies", "list"])
    assert "greedy" in policies.stdout and "mlp" in policies.stdout


def test_real_subprocess_python_m_parcat(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "2", "-o", str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "harvest" in proc.stdout and "+--" in proc.stdout  # plain table when not a TTY
    assert "\x1b[" not in proc.stdout
    assert json.loads(out.read_text())["status"] == "complete"
    bad = subprocess.run([sys.executable, "-m", "parcat", "eval", "-m", "nope"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
