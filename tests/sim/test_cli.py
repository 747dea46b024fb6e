"""``parcat sim`` through Typer's CliRunner on parcat's app, and one direct call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcat.cli.common import SummaryFormat
from parcat.cli.main import app
from parcat.cli.sim_cmd import SimSettings, sim_command
from parcat.sim import SimMode
from tests.sim.helpers import sim_data, write_yaml

runner = CliRunner()
AGENTS = [{"agent": "evader", "policy": "greedy", "cycle_time": 0.02}]


def config_file(tmp_path: Path, agents: list[dict[str, object]] = AGENTS, **extra: object) -> str:
    return str(write_yaml(tmp_path / "sim.yaml", sim_data(agents, iters=40, **extra)))


def test_sequential_json_is_deterministic_and_written(tmp_path: Path) -> None:
    args = ["sim", "-c", config_file(tmp_path), "--mode", "sequential", "-f", "json"]
    first = runner.invoke(app, [*args, "--output", str(tmp_path / "a")])
    second = runner.invoke(app, [*args, "--output", str(tmp_path / "b"), "--iters", "40"])
    assert first.exit_code == 0, first.output
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["schema"] == "parcat.sim" and a["steps"] == 40
    assert a["mission_metrics"] == b["mission_metrics"]
    assert [x["age_steps_mean"] for x in a["agents"]] == [x["age_steps_mean"] for x in b["agents"]]
    assert (tmp_path / "a/record.npz").is_file() and (tmp_path / "b/summary.json").is_file()


def test_parallel_table_with_render(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sim", "-c", config_file(tmp_path), "--render",
                                 "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "evade · parallel · 40 steps" in result.stdout and "age steps" in result.stdout
    assert (tmp_path / "out/trajectories.svg").is_file()


def test_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = config_file(tmp_path, [{"agent": "evader", "policy": "greedy"}])
    result = runner.invoke(app, ["sim", "-c", path])
    assert result.exit_code == 2
    assert result.stderr == (f"parcat: error: {path}: agent 'evader' has no 'cycle_time' "
                             "(seconds between its actions, e.g. cycle_time: 0.05)\n")


def test_agent_crash_is_one_line_and_exit_1(tmp_path: Path) -> None:
    agents = [{"agent": "evader", "policy": "tests.sim.policies:RaisingPolicy",
               "cycle_time": 0.01}]
    result = runner.invoke(app, ["sim", "-c", config_file(tmp_path, agents), "--output", ""])
    assert result.exit_code == 1
    assert result.stderr.startswith("parcat: error: agent 'evader' (policy "
                                    "tests.sim.policies:RaisingPolicy) raised at env step ")
    assert result.stderr.count("\n") == 1


def test_direct_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim_command.run(SimSettings(config=Path(config_file(tmp_path)), mode=SimMode.SEQUENTIAL,
                                iters=20, seed=1, output="", render=False,
                                format=SummaryFormat.JSON))
    document = json.loads(capsys.readouterr().out)
    assert document["steps"] == 20 and document["seed"] == 1 and document["files"] == []


def test_set_overrides_mission_parameters(tmp_path: Path) -> None:
    args = ["sim", "-c", config_file(tmp_path), "--mode", "sequential", "-f", "json",
            "--output", ""]
    result = runner.invoke(app, [*args, "--set", "pursuers=4"])
    assert result.exit_code == 0, result.output
    agents = [a["agent"] for a in json.loads(result.stdout)["agents"]]
    assert agents == ["pursuer_0", "pursuer_1", "pursuer_2", "pursuer_3", "evader"]
    bad = runner.invoke(app, [*args, "--set", "pursuerz=4"])
    assert bad.exit_code == 2
