"""The parallel simulation: fresh actions, stale slow agents, on time, failures, Ctrl-C."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from parcat.core.errors import WorkerError
from parcat.sim import SimProgress, run_sim, summarize
from parcat.sim.parallel import RemoteTraceback
from tests.sim.helpers import make_config, my_blocks, settles, worker_processes

PERIOD = 0.01


def test_a_fast_agent_acts_within_one_cycle(tmp_path: Path) -> None:
    agents = [{"agent": "evader", "policy": "greedy", "cycle_time": 0.01},
              {"agent": "pursuer_0", "policy": "greedy", "cycle_time": 0.02}]
    record = run_sim(make_config(tmp_path, agents, period=PERIOD, iters=80), "parallel")
    assert record.steps == 80 and not record.meta["interrupted"]
    for agent_id, cycle in (("evader", 0.01), ("pursuer_0", 0.02)):
        i = record.agent_index(agent_id)
        based_on = record.arrays["based_on"][:, i]
        ages = record.arrays["age_steps"][based_on >= 0, i]
        assert (based_on < 0).sum() <= 2  # only before the first action arrives
        within = (ages <= round(cycle / PERIOD) + 1).mean()
        assert within >= 0.9, (agent_id, np.bincount(ages))
    agents_summary = {a["agent"]: a for a in summarize(record)["agents"]}
    assert agents_summary["pursuer_2"]["kind"] == "lockstep"
    assert agents_summary["pursuer_2"]["age_steps_max"] == 0


def test_a_slow_agent_grows_stale_and_the_run_ends_on_time(tmp_path: Path) -> None:
    iters = 60
    agents = [{"agent": "evader", "policy": "tests.sim.policies:SleepyPolicy",
               "args": {"sleep_s": 0.035}, "cycle_time": 0.01},
              {"agent": "pursuer_0", "policy": "greedy", "cycle_time": 0.01}]
    record = run_sim(make_config(tmp_path, agents, period=PERIOD, iters=iters), "parallel")
    slow, fast = record.agent_index("evader"), record.agent_index("pursuer_0")
    ages = record.arrays["age_steps"][:, slow]
    known = ages[ages >= 0]
    # staleness grows step by step while the slow agent computes, then drops
    assert (np.diff(known) == 1).sum() >= 20 and known.max() >= 3
    fast_ages = record.arrays["age_steps"][:, fast]
    assert known.mean() > fast_ages[fast_ages >= 0].mean() + 1
    summary = {a["agent"]: a for a in summarize(record)["agents"]}
    assert summary["evader"]["missed_cycles"] > 0
    assert summary["evader"]["achieved_cycle_s"] >= 0.03
    # the environment never waited for the slow agent: it took all its steps while the
    # agent finished far fewer cycles than there were steps
    assert len(record.arrays["time_s"]) == iters and not record.meta["interrupted"]
    assert summary["evader"]["cycles"] < iters // 2


def test_an_agent_frozen_until_the_end_shows_its_missed_cycles(tmp_path: Path) -> None:
    # evader freezes in its 11th computation for far longer than the (1 s) run: its own
    # count stops at 10 cycles and no missed ones; the run's wall time says otherwise
    iters = 100
    agents = [{"agent": "evader", "policy": "tests.sim.policies:StallingPolicy",
               "args": {"after": 10, "stall_s": 60.0}, "cycle_time": 0.01},
              {"agent": "pursuer_0", "policy": "greedy", "cycle_time": 0.01}]
    record = run_sim(make_config(tmp_path, agents, period=PERIOD, iters=iters), "parallel")
    summary = {a["agent"]: a for a in summarize(record)["agents"]}
    frozen, healthy = summary["evader"], summary["pursuer_0"]
    assert frozen["cycles"] <= 10
    assert frozen["missed_cycles"] >= iters // 2, frozen
    assert frozen["achieved_cycle_s"] >= 5 * 0.01, frozen
    assert frozen["age_steps_max"] >= iters // 2, frozen
    # the healthy agent next to it: about none missed (generous for a loaded machine)
    assert healthy["missed_cycles"] <= iters // 5, healthy
    assert healthy["missed_cycles"] < frozen["missed_cycles"] / 2
    assert summary["pursuer_2"]["missed_cycles"] == 0  # lockstep: one per step by design


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("RaisingPolicy", "agent 'evader' (policy tests.sim.policies:RaisingPolicy) raised at "
         "env step "),
        ("ExitingPolicy", "agent 'evader' (policy tests.sim.policies:ExitingPolicy) process died "
         "(exit code 3) at env step "),
    ],
)
def test_an_agent_crash_stops_everything_cleanly(tmp_path: Path, policy: str,
                                                 message: str) -> None:
    before = worker_processes()
    agents = [{"agent": "evader", "policy": f"tests.sim.policies:{policy}", "cycle_time": 0.01},
              {"agent": "pursuer_0", "policy": "greedy", "cycle_time": 0.01}]
    config = make_config(tmp_path, agents, period=PERIOD, iters=500)
    with pytest.raises(WorkerError, match=f"^{re.escape(message)}") as info:
        run_sim(config, "parallel")
    if policy == "RaisingPolicy":
        assert str(info.value).endswith("RuntimeError: boom on call 4")
        assert isinstance(info.value.__cause__, RemoteTraceback)
        assert "boom on call 4" in str(info.value.__cause__)
    assert settles(lambda: not (worker_processes() - before)), "orphan processes"
    assert not my_blocks(), "leaked shared memory"


def test_ctrl_c_returns_the_steps_done_so_far(tmp_path: Path) -> None:
    agents = [{"agent": "evader", "policy": "greedy", "cycle_time": 0.01}]
    config = make_config(tmp_path, agents, period=0.005, iters=1000)

    def interrupt(progress: SimProgress) -> None:
        raise KeyboardInterrupt

    record = run_sim(config, "parallel", on_progress=interrupt)
    assert record.meta["interrupted"] and 0 < record.steps < 1000
    assert len(record.arrays["time_s"]) == record.steps
    assert not my_blocks()


def test_fast_mode_outruns_the_period(tmp_path: Path) -> None:
    agents = [{"agent": "evader", "policy": "greedy", "cycle_time": 0.01}]
    record = run_sim(make_config(tmp_path, agents, period=0.01, iters=200), "parallel",
                     fast=True)
    env = summarize(record)["env"]
    assert env["achieved_rate_hz"] > 2 * env["requested_rate_hz"]
    assert env["lateness_max_ms"] is None  # no schedule to be late for


@pytest.mark.parametrize("mission", ["harvest", "goal_tasks"])
def test_discrete_missions_run_in_parallel(tmp_path: Path, mission: str) -> None:
    agents = [{"policy": "greedy", "cycle_time": 0.01}, {"policy": "random", "cycle_time": 0.02}]
    params = {"agents": 2}
    record = run_sim(make_config(tmp_path, agents, mission=mission, period=0.005, iters=40,
                                 params=params), "parallel")
    assert record.steps == 40 and record.arrays["action_0"].dtype == np.int64
    assert summarize(record)["agents"][0]["cycles"] >= 10


def test_a_frozen_environment_fails_with_the_steps_so_far_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from parcat.sim import parallel
    from parcat.sim.parallel import StalledError
    from parcat.sim.record import SimRecord
    from tests.sim.helpers import write_yaml

    monkeypatch.setattr(parallel, "STALL_TIMEOUT_S", 5.0)
    mission = write_yaml(tmp_path / "frozen.yaml", {
        "name": "frozen", "env": "tests.fakes:DyingEnv",
        "params": {"agents": 1, "max_steps": 1000, "how": "hang", "at_step": 20}})
    agents = [{"agent": "0", "policy": "noop", "cycle_time": 0.01}]
    out = tmp_path / "out"
    config = make_config(tmp_path, agents, mission=str(mission), period=PERIOD, iters=500,
                         output=str(out))
    with pytest.raises(StalledError, match=r"made no progress .* the 20 steps before are in "):
        run_sim(config, "parallel")
    assert SimRecord.load(out).steps == 20
    assert (out / "summary.json").is_file()
    assert not my_blocks()
