"""Sim configs that are too big, that name files they should not, or are plain garbage:
one ConfigError line, before anything is allocated, never echoing a file's content."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from parcat.core.errors import ConfigError, UsageError
from parcat.sim import load_sim_config
from tests.sim.helpers import sim_data, write_yaml
from tests.sim.test_cli import app

GREEDY = {"agent": "evader", "policy": "greedy", "cycle_time": 0.02}
SECRET = "hunter2-s3cret"


def load(tmp_path: Path, data: Any) -> Any:
    return load_sim_config(write_yaml(tmp_path / "sim.yaml", data))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(iters=10**11), "'iters' must be an integer from 1 to 100,000,000, "
         "got a larger number"),
        (lambda d: d.update(seed=2**64), "'seed' must be an integer from 0 to "),
        (lambda d: d["environment"].update(period=1e-9), "'environment.period' must be a "
         "number of seconds from 1e-06 to 3600, got a smaller number"),
        (lambda d: d["environment"].update(period=1e300), "'environment.period' must be a "
         "number of seconds from 1e-06 to 3600, got a larger number"),
        (lambda d: d["agents"][0].update(cycle_time=float("inf")), "agent 'evader': "
         "'cycle_time' must be a number of seconds from 1e-06 to 3600, got a larger number"),
        (lambda d: d.update(iters=90_000_000), "'iters' times 'environment.period' is longer "
         "than 7 days; at most 60,480,000 steps fit at this period"),
        (lambda d: (d.update(iters=50_000_000, debug={"log_agent_state": True}),
                    d["environment"].update(period=1e-6)),
         "the record of 'iters' steps would exceed 2 GiB; at most "),
        (lambda d: d["agents"].extend([{"policy": "noop", "cycle_time": 1}] * 10**4),
         "10,001 agents are listed under 'agents'; at most 128 run at their own cycle_time"),
    ],
)
def test_sizes_are_capped_with_one_line(tmp_path: Path, change: Any, message: str) -> None:
    data = sim_data([dict(GREEDY)])
    change(data)
    with pytest.raises(ConfigError) as info:
        load(tmp_path, data)
    assert str(info.value).startswith(f"{tmp_path / 'sim.yaml'}: {message}"), str(info.value)


def test_a_huge_sequential_run_is_exit_2_not_a_crash(tmp_path: Path) -> None:
    path = str(write_yaml(tmp_path / "sim.yaml", sim_data([dict(GREEDY)])))
    for args in (["--iters", "100000000000"], ["--iters", "60000000"]):
        result = CliRunner().invoke(app, ["sim", "-c", path, "--mode", "sequential", *args])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("parcat: error: command line: ")
        assert "--iters" in result.stderr
        assert result.stderr.count("\n") == 1


def secret_files(tmp_path: Path) -> dict[str, Path]:
    """Files a config may name that hold something no error message may show."""
    shadow = tmp_path / "etc/shadow"
    shadow.parent.mkdir(parents=True)
    shadow.write_text(f"zq_admin:*:{SECRET}:0:99999:7:::\nzq_daemon:*:19000:0:99999:7:::\n")
    values = tmp_path / "etc/values.yaml"
    values.write_text(yaml.safe_dump({"policy": SECRET, "cycle_time": SECRET, "agent": SECRET}))
    params = tmp_path / "etc/params.yaml"
    params.write_text(yaml.safe_dump({"pursuers": SECRET}))
    steps = tmp_path / "etc/steps.yaml"
    steps.write_text(yaml.safe_dump({"max_steps": -987654}))
    return {"shadow": shadow, "values": values, "params": params, "steps": steps}


@pytest.mark.parametrize(
    ("where", "file"),
    [("environment", "shadow"), ("agent", "shadow"), ("main", "shadow"),
     ("agent", "values"), ("environment", "params"), ("environment", "steps"),
     ("policy", "values"), ("cycle_time", "values"), ("mission", "values")],
)
def test_errors_never_echo_a_file_s_content(tmp_path: Path, where: str, file: str) -> None:
    path = secret_files(tmp_path)[file]
    config = tmp_path / "configs/sim.yaml"
    data = sim_data([dict(GREEDY)])
    relative = f"../etc/{path.name}"
    if where == "environment":
        data["environment"]["config"] = relative
    elif where == "agent":
        data["agents"] = [{"config": relative}]
    elif where in ("policy", "cycle_time"):
        data["agents"][0][where] = SECRET
    elif where == "mission":
        data["environment"]["mission"] = SECRET
    write_yaml(config, data)
    with pytest.raises(ConfigError) as info:
        load_sim_config(path if where == "main" else config)
    text = str(info.value)
    for leaked in (SECRET, "zq_", "99999", "987654"):
        assert leaked not in text, text
    shown = path if where in ("main", "environment", "agent") else config
    assert text.startswith(f"{shown}: "), text  # the file is named


# huge numbers, wrong types, junk keys, nested garbage — small enough to stay quick
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.sampled_from(["greedy", "noop", "random", "mlp", "evade", "harvest", "sim.yaml", "",
                     "0.01", "1e11", ".inf"]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
small = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.floats(allow_nan=True),
                  st.text(max_size=6))
good_period = st.sampled_from([0.01, 0.02, 0.005])
environment = st.fixed_dictionaries(
    {"mission": st.one_of(*[st.sampled_from(["evade", "harvest", "goal_tasks"])] * 3, values),
     "period": st.one_of(good_period, good_period, st.floats(), st.integers(), values)},
    optional={"params": st.one_of(st.dictionaries(
                  st.sampled_from(["pursuers", "agents", "arena", "max_steps", "size", "x"]),
                  small, max_size=3), values),
              "config": values})
agent = st.fixed_dictionaries(
    {"cycle_time": st.one_of(good_period, st.floats(), st.integers(), values)},
    optional={"agent": st.one_of(st.sampled_from(["evader", "pursuer_0", "agent_0"]),
                                 values),
              "policy": st.one_of(st.sampled_from(["greedy", "noop", "random", "gredy"]),
                                  values),
              "args": values, "config": values})
shaped = st.fixed_dictionaries(
    {"environment": environment},
    optional={"agents": st.one_of(st.lists(agent, max_size=3), values),
              "iters": st.one_of(st.integers(), values), "seed": st.one_of(st.integers(),
                                                                           values),
              "default_policy": values, "render": values, "debug": values, "output": values})
sim_configs = st.one_of(shaped, shaped, shaped, st.dictionaries(
    st.one_of(st.sampled_from(["environment", "agents", "iters", "iter"]), st.text(max_size=6)),
    values, max_size=4))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=sim_configs)
@example(data={"environment": {"mission": "evade", "period": 0.01}, "iters": 10**11})
@example(data={"environment": {"mission": "evade", "period": 1e-300}, "seed": 2**70,
               "agents": [{"policy": "noop", "cycle_time": 1e300}]})
def test_fuzzed_sim_configs_load_or_raise_a_usage_error(
        tmp_path_factory: pytest.TempPathFactory, data: dict[str, Any]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "sim.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        config = load_sim_config(path)
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:  # within the caps
        assert 1 <= config.iters <= 100_000_000 and 0 <= config.seed < 2**63
        assert 1e-6 <= config.period <= 3600
        assert all(1e-6 <= a.cycle_time <= 3600 for a in config.agents)
