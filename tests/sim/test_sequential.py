"""The sequential simulation: deterministic, cycle semantics, lockstep twin, any mission."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from parcat.envs.missions import load_mission
from parcat.episode.rollout import run_episode
from parcat.policies.specs import parse_policy_spec
from parcat.sim import SimProgress, SimRecord, run_sim, summarize
from tests.sim.helpers import make_config

TIMING_ARRAYS = ("step_cost_s", "compute_s")  # measured times, even in sequential mode


def same(a: SimRecord, b: SimRecord) -> bool:
    """The arrays that hold no measured times are equal."""
    left, right = ({k: v for k, v in r.arrays.items() if k not in TIMING_ARRAYS} for r in (a, b))
    return left.keys() == right.keys() and all(
        np.array_equal(left[k], right[k], equal_nan=True) for k in left)


def test_same_config_same_record_and_another_seed_differs(tmp_path: Path) -> None:
    agents = [{"agent": "evader", "policy": "random", "cycle_time": 0.025},
              {"agent": "pursuer_1", "policy": "mlp", "cycle_time": 0.03}]
    config = make_config(tmp_path, agents, iters=300)
    first, second = run_sim(config, "sequential"), run_sim(config, "sequential")
    assert same(first, second)
    assert first.meta["episodes"] == second.meta["episodes"]
    other = run_sim(replace(config, seed=1), "sequential")
    assert not np.array_equal(first.arrays["state"], other.arrays["state"])


def test_an_agent_acts_when_simulated_time_crosses_its_cycle(tmp_path: Path) -> None:
    agents = [{"agent": "evader", "policy": "greedy", "cycle_time": 0.025},
              {"agent": "pursuer_0", "policy": "greedy", "cycle_time": 0.03}]
    record = run_sim(make_config(tmp_path, agents, iters=11), "sequential")
    evader, pursuer = record.agent_index("evader"), record.agent_index("pursuer_0")
    # boundaries 0, 25, 50, 75, 100 ms fall in the steps at 0, 30, 50, 80, 100 ms
    assert record.arrays["based_on"][:, evader].tolist() == [0, 0, 0, 3, 3, 5, 5, 5, 8, 8, 10]
    assert record.arrays["age_steps"][:, pursuer].tolist() == [0, 1, 2] * 3 + [0, 1]
    assert np.allclose(record.arrays["age_s"][:, pursuer], [0, 0.01, 0.02] * 3 + [0, 0.01])
    lockstep = record.agent_index("pursuer_2")
    assert (record.arrays["age_steps"][:, lockstep] == 0).all()
    summary = summarize(record)["agents"]
    assert summary[evader]["cycles"] == 5 and summary[evader]["achieved_cycle_s"] == 0.025
    assert summary[pursuer]["age_steps_mean"] == pytest.approx(10 / 11)


def test_cycle_time_equal_to_the_period_is_a_lockstep_rollout(tmp_path: Path) -> None:
    mission = load_mission("evade")
    episode = run_episode(mission, [parse_policy_spec("greedy")], seed=0, episode_index=0)
    agents = [{"agent": "evader", "policy": "greedy", "cycle_time": 0.01},
              {"agent": "pursuer_0", "policy": "greedy", "cycle_time": 0.01}]
    record = run_sim(make_config(tmp_path, agents, iters=episode.steps), "sequential")
    first = record.meta["episodes"][0]
    assert first["complete"] and first["steps"] == episode.steps
    assert {k: first[k] for k in episode.stats} == episode.stats
    returns = record.arrays["reward"].sum(axis=0)
    assert returns.tolist() == [a.reward for a in episode.agents]


def test_episodes_reset_seeded_and_counted(tmp_path: Path) -> None:
    config = make_config(tmp_path, [], mission="goal_tasks", iters=120)
    record = run_sim(config, "sequential")
    episodes = record.arrays["episode"]
    assert episodes[0] == 0 and episodes[-1] >= 2 and (np.diff(episodes) >= 0).all()
    starts = np.flatnonzero(record.arrays["episode_step"] == 0)
    assert starts.tolist() == [np.flatnonzero(episodes == e)[0] for e in np.unique(episodes)]
    metrics = summarize(record)["mission_metrics"]
    assert metrics["episodes"] == len(np.unique(episodes)) and "final_distance" in metrics


@pytest.mark.parametrize("mission", ["harvest", "evade", "goal_tasks"])
def test_every_builtin_mission_runs_with_a_record_and_picture(tmp_path: Path,
                                                              mission: str) -> None:
    agents = [{"policy": "random", "cycle_time": 0.02}]
    config = make_config(tmp_path, agents, mission=mission, iters=30,
                         output=str(tmp_path / "out"), debug={"render_traj": True,
                                                              "log_agent_state": True})
    record = run_sim(config, "sequential")
    names = {Path(f).name for f in record.files}
    assert names == {"record.npz", "summary.json", "trajectories.svg"}
    loaded = SimRecord.load(tmp_path / "out")
    assert same(loaded, record) and loaded.meta["steps"] == 30
    assert summarize(loaded)["mission_metrics"] == summarize(record)["mission_metrics"]
    assert "obs_0" in loaded.arrays and loaded.arrays["state"].shape[0] == 30
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["schema"] == "parcat.sim" and summary["mode"] == "sequential"
    svg = ET.parse(tmp_path / "out/trajectories.svg").getroot()
    assert svg.tag.endswith("svg") and "episode 0 (30 steps)" in ET.tostring(svg, "unicode")


def test_ctrl_c_keeps_the_steps_done(tmp_path: Path) -> None:
    agents = [{"agent": "evader", "policy": "tests.sim.policies:SleepyPolicy",
               "args": {"sleep_s": 0.004}, "cycle_time": 0.01}]
    config = make_config(tmp_path, agents, iters=1000)

    def interrupt(progress: SimProgress) -> None:
        raise KeyboardInterrupt

    record = run_sim(config, "sequential", on_progress=interrupt)
    assert record.meta["interrupted"] and 0 < record.steps < 1000
    assert record.arrays["state"].shape[0] == record.steps
