"""Sim configuration: defaults, files named by the config, and one exact line per error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from parcat.core.errors import ConfigError
from parcat.sim import load_sim_config
from tests.sim.helpers import sim_data, write_yaml

GREEDY = {"policy": "greedy", "cycle_time": 0.02}


def load(tmp_path: Path, data: Any) -> Any:
    return load_sim_config(write_yaml(tmp_path / "configs" / "sim.yaml", data))


def expect(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        load(tmp_path, data)


def test_shipped_config_loads() -> None:
    config = load_sim_config(Path(__file__).parents[2] / "configs" / "sim.yaml")
    assert config.mission.name == "evade" and config.period == 0.01
    kinds = {str(a.agent_id): (a.lockstep, a.cycle_time) for a in config.agents}
    assert kinds == {"evader": (False, 0.02), "pursuer_0": (False, 0.01),
                     "pursuer_1": (False, 0.05), "pursuer_2": (True, 0.01)}


def test_files_inline_keys_and_defaults(tmp_path: Path) -> None:
    write_yaml(tmp_path / "configs/sim/env.yaml", {"pursuers": 2, "max_steps": 40})
    write_yaml(tmp_path / "configs/sim/slow.yaml", {"policy": "noop", "cycle_time": 0.5})
    data = sim_data([{"config": "sim/slow.yaml", "cycle_time": 0.03},
                     {"agent": "evader", **GREEDY, "args": {"wall_weight": 1.0}}])
    data["environment"].update(config="sim/env.yaml", params={"max_steps": 30})
    config = load(tmp_path, data)
    assert config.mission.params["pursuers"] == 2 and config.mission.max_steps == 30
    first, second, evader = config.agents
    assert (first.agent_id, first.policy.target, first.cycle_time, first.lockstep) == (
        "pursuer_0", "noop", 0.03, False)
    assert first.source == str(Path(tmp_path / "configs/sim/slow.yaml"))
    assert second.lockstep and second.policy.target == "greedy" and second.cycle_time == 0.01
    assert evader.policy.kwargs == {"wall_weight": 1.0}
    assert config.output is None and config.iters == 50


def test_missing_cycle_time_names_the_agent_file(tmp_path: Path) -> None:
    write_yaml(tmp_path / "configs/sim/slow.yaml", {"policy": "greedy"})
    data = sim_data([{"agent": "evader", "config": "sim/slow.yaml"}])
    path = tmp_path / "configs/sim/slow.yaml"
    expect(tmp_path, data, f"{path}: agent 'evader' has no 'cycle_time' (seconds between its "
           "actions, e.g. cycle_time: 0.05)")


def test_missing_cycle_time_inline_names_the_main_file(tmp_path: Path) -> None:
    data = sim_data([{"policy": "greedy"}])
    expect(tmp_path, data, f"{tmp_path / 'configs/sim.yaml'}: agent 'pursuer_0' has no "
           "'cycle_time' (seconds between its actions, e.g. cycle_time: 0.05)")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(iter=3), "unknown key #6 (did you mean 'iters'?); valid: "
         "agents, debug, default_policy, environment, iters, output, render, seed"),
        (lambda d: d.pop("environment"), "missing key 'environment' (a mapping with 'mission' "
         "and 'period')"),
        (lambda d: d["environment"].pop("period"), "'environment' has no 'period' (seconds per "
         "environment step, e.g. period: 0.01)"),
        (lambda d: d["environment"].update(period=0), "'environment.period' must be a number "
         "of seconds from 1e-06 to 3600, got 0"),
        (lambda d: d["environment"].update(mission="evad"), "'environment.mission': mission "
         "'...' not found in "),
        (lambda d: d["agents"][0].update(cycle_time="fast"), "agent 'pursuer_0': 'cycle_time' "
         "must be a number of seconds from 1e-06 to 3600, got text"),
        (lambda d: d["agents"][0].update(agent="pursuer_9"), "'agents[0].agent' is no agent of "
         "mission 'evade' (did you mean 'pursuer_2'?); its agents: pursuer_0, pursuer_1, "
         "pursuer_2, evader"),
        (lambda d: d["agents"][0].update(speed=1), "unknown key #3 of 'agents[0]'; valid: agent, "
         "args, config, cycle_time, policy"),
        (lambda d: d["agents"][0].update(policy="gredy"), "agent 'pursuer_0': policy '...' is "
         "not a built-in, a module:Class or a checkpoint directory (did you mean 'greedy'?); "
         "built-ins: random, noop, greedy, mlp"),
        (lambda d: d["agents"][0].update(config="sim/none.yaml"), "'agents[0].config': file "),
        (lambda d: d.update(iters=0), "'iters' must be an integer from 1 to 100,000,000, got 0"),
        (lambda d: d.update(debug={"render_trajectory": True}), "unknown key #1 of 'debug' "
         "(did you mean 'debug.render_traj'?); valid: log_agent_state, render_traj"),
        (lambda d: d["agents"].extend([{"agent": "evader", **GREEDY}] * 2),
         "agent 'evader' is listed twice"),
    ],
)
def test_errors_are_one_line_naming_the_key(tmp_path: Path, change: Any, message: str) -> None:
    data = sim_data([dict(GREEDY)])
    change(data)
    with pytest.raises(ConfigError) as info:
        load(tmp_path, data)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{tmp_path / 'configs/sim.yaml'}: {message}"), text


def test_unreadable_files(tmp_path: Path) -> None:
    missing = re.escape(f"sim config '{tmp_path / 'nope.yaml'}' does not exist")
    with pytest.raises(ConfigError, match=f"^{missing}$"):
        load_sim_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("environment: [\n")
    with pytest.raises(ConfigError, match=r"bad.yaml' line \d+: invalid YAML"):
        load_sim_config(bad)
    write_yaml(tmp_path / "configs/sim/env.yaml", {"speed": 1})
    data = sim_data([])
    data["environment"]["config"] = "sim/env.yaml"
    with pytest.raises(ConfigError, match=re.escape(
            f"{tmp_path / 'configs/sim/env.yaml'}: key #1 is no parameter of mission 'evade'; "
            "known: arena, ")):
        load(tmp_path, data)


def test_command_line_values_are_checked(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "sim.yaml", sim_data([]))
    config = load_sim_config(path, flags={"iters": 7, "seed": 3, "output": "", "render": True})
    assert (config.iters, config.seed, config.output, config.render) == (7, 3, None, True)
    with pytest.raises(ConfigError, match=re.escape("command line: --iters must be an integer "
                                                    "from 1 to 100,000,000, got 0")):
        load_sim_config(path, flags={"iters": 0})


def test_set_overrides_win_over_the_files(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "sim.yaml", sim_data([], params={"pursuers": 2}))
    assert len(load_sim_config(path).agents) == 3
    assert len(load_sim_config(path, {"pursuers": 4}).agents) == 5
    with pytest.raises(ConfigError, match=re.escape("--set: mission 'evade' has no parameter "
                                                    "'pursuerz'")):
        load_sim_config(path, {"pursuerz": 4})
    hidden = sim_data([])
    hidden["environment"]["command_line"] = {"pursuers": 4}  # --set is no YAML key
    with pytest.raises(ConfigError, match=re.escape("unknown key #4 of 'environment'")):
        load(tmp_path, hidden)
