"""Environments nobody here wrote, run the way their users run them: PettingZoo's KAZ
(whose reset leaks state), MPE2's simple_spread, Gymnasium through the adapter, Connect
Four's dict observations, and factories that raise."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parcat.core.errors import ConformanceError, MissionError
from parcat.envs.adapters import make_gymnasium_env
from parcat.envs.missions import load_mission
from parcat.episode.probe import check_mission
from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.policies.specs import PolicySpec, parse_policy_spec
from parcat.testing import check_env
from tests.fakes import SeedlessEnv, scripted_mission

pytest.importorskip("pygame")
pytest.importorskip("pymunk")  # pettingzoo[butterfly]
pytest.importorskip("mpe2")

ROOT = Path(__file__).resolve().parents[1]
KAZ = "pettingzoo.butterfly.knights_archers_zombies_v11"
SPREAD = "mpe2.simple_spread_v3"


def parcat(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def episodes_of(stdout: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "duration_s"}
            for e in json.loads(stdout)["episodes"]]


# -- factories and policies the tests name as module:callable ---------------------------------


def raising_factory(**params: Any) -> Any:
    raise RuntimeError("no licence file found")


class _ResetRaises(SeedlessEnv):
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        raise ValueError("map file missing")


def reset_raising_factory(**params: Any) -> Any:
    return _ResetRaises(agents=2)


def recording_factory(**params: Any) -> Any:
    """Records what it was given, in the environment it returns."""
    env = SeedlessEnv(agents=2)
    env.given = dict(params)  # type: ignore[attr-defined]
    return env


class ArrayPolicy:
    """Written for array observations: ``np.asarray(obs, float)`` fails on a dict."""

    def __init__(self, spec: Any) -> None:
        self.n = int(spec.action_space.n)

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> int:
        return int(np.asarray(obs, dtype=np.float32).argmax()) % self.n


class MaskedPolicy(ArrayPolicy):
    """The documented way: the board under ``observation``, legal moves under the mask."""

    def step(self, obs: Any) -> int:
        board, mask = obs["observation"], obs["action_mask"]
        assert board.shape == (6, 7, 2)
        return int(np.flatnonzero(mask)[0])


# -- KAZ: a reset that keeps state --------------------------------------------------------------


def test_the_probe_calls_kaz_a_leak() -> None:
    check = check_mission(load_mission(KAZ, {"max_cycles": 60}))
    assert (check.reproducible, check.leaks_state) == (True, True)
    assert check.note == ("reset(seed) keeps state from the episode before (a leak): every "
                          "episode gets a fresh environment")


def test_kaz_jobs_1_equals_jobs_2_with_no_yaml() -> None:
    run = ["eval", "-m", KAZ, "--set", "max_cycles=110", "-n", "4", "--seed", "3", "-f", "json"]
    one = parcat(*run, "--jobs", "1")
    two = parcat(*run, "--jobs", "2", "--executor", "process")
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert json.loads(one.stdout)["environments"][KAZ]["leaks_state"] is True
    assert episodes_of(one.stdout) == episodes_of(two.stdout)
    # the leak is real: one env reused across the same episodes plays other ones
    reused = parcat(*run, "--jobs", "1", "--set", "mission.fresh_env=false")
    assert reused.returncode == 0, reused.stderr
    assert episodes_of(reused.stdout) != episodes_of(one.stdout)


def test_check_env_calls_kaz_a_leak_and_passes_mpe2() -> None:
    from mpe2 import simple_spread_v3
    from pettingzoo.butterfly import knights_archers_zombies_v11
    check_env(simple_spread_v3.parallel_env())
    with pytest.raises(ConformanceError, match=r"^env leaks state across resets: two runs "
                       r"with reset\(seed=0\) and the same actions differ, and a copy made "
                       r"before the first plays the first again"):
        check_env(knights_archers_zombies_v11.parallel_env())
    with pytest.raises(ConformanceError, match=r"^env is not deterministic: .* it ignores its "
                       "seed"):
        check_env(SeedlessEnv(agents=2))


# -- an env that raises while being built or reset ----------------------------------------------


@pytest.mark.parametrize(("factory", "line"), [
    ("raising_factory", "raised RuntimeError: no licence file found while being built"),
    ("reset_raising_factory", "raised ValueError: map file missing while being reset"),
])
def test_an_env_that_raises_while_built_or_reset_is_one_line_exit_2(factory: str,
                                                                    line: str) -> None:
    name = f"tests.test_outsiders:{factory}"
    for command in (["eval", "-m", name], ["train", "-m", name, "--epochs", "1"],
                    ["missions", "show", name]):
        done = parcat(*command)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"parcat: error: mission '{name}': env '{name}' {line}"], command
    with pytest.raises(MissionError, match=line):  # built in Python, checked here
        load_mission(name, {"lock": threading.Lock()})


# -- --set and the step limit -----------------------------------------------------------------


def test_set_reaches_a_factory_and_mission_keys_set_parcats_own() -> None:
    mission = load_mission("tests.test_outsiders:recording_factory", {"max_steps": 300})
    assert dict(mission.params) == {"max_steps": 300} and mission.max_steps == 1000
    with mission.open_env() as env:
        assert env.given == {"max_steps": 300}  # type: ignore[attr-defined]
    mission = load_mission("tests.test_outsiders:recording_factory",
                           {"size": 3, "mission.max_steps": 7, "mission.fresh_env": True})
    assert (dict(mission.params), mission.max_steps, mission.fresh_env) == ({"size": 3}, 7, True)
    harvest = load_mission("harvest", {"mission.max_steps": 9, "mission.fresh_env": False})
    assert (harvest.max_steps, harvest.fresh_env, harvest.params["max_steps"]) == (9, False, 200)
    with pytest.raises(MissionError, match=r"^--set mission\.steps: parcat's own mission keys "
                       r"are mission\.max_steps, mission\.fresh_env$"):
        load_mission("harvest", {"mission.steps": 3})
    with pytest.raises(MissionError, match=r"^--set mission\.fresh_env must be true or false"):
        load_mission("harvest", {"mission.fresh_env": "yes"})


def test_mpe2_has_its_real_step_limit_and_rejects_what_it_lacks() -> None:
    shown = parcat("missions", "show", SPREAD, "-f", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["max_steps"] == 25
    assert load_mission(SPREAD, {"max_cycles": 40}).max_steps == 40
    assert load_mission(SPREAD, {"max_cycles": 40, "mission.max_steps": 10}).max_steps == 10
    done = parcat("eval", "-m", SPREAD, "--set", "max_steps=30", "-n", "1")
    assert done.returncode == 2
    assert done.stderr.startswith(f"parcat: error: mission '{SPREAD}': env '{SPREAD}:parallel_env"
                                  "' rejected: ")
    assert done.stderr.endswith("unexpected keyword argument 'max_steps' (parcat's own "
                                "max_steps is --set mission.max_steps=VALUE)\n")
    run = parcat("eval", "-m", SPREAD, "--set", "max_cycles=30", "--set", "mission.max_steps=20",
                 "-n", "2", "-f", "json")
    assert run.returncode == 0, run.stderr
    assert [e["steps"] for e in json.loads(run.stdout)["episodes"]] == [20, 20]


# -- Gymnasium through the adapter --------------------------------------------------------------


def test_the_gymnasium_adapter_passes_pettingzoos_parallel_api_test() -> None:
    from pettingzoo.test import parallel_api_test, parallel_seed_test
    parallel_api_test(make_gymnasium_env("CartPole-v1"), num_cycles=200)
    parallel_api_test(load_mission("gymnasium:CartPole-v1").make_env(), num_cycles=50)
    parallel_seed_test(lambda: make_gymnasium_env("CartPole-v1"))


# -- --each, --cross and Python all check the env -----------------------------------------------


def test_each_and_cross_warn_about_an_unseeded_env(tmp_path: Path) -> None:
    mission = tmp_path / "seedless.yaml"
    mission.write_text("name: seedless\nenv: tests.fakes:SeedlessEnv\nparams: {agents: 2}\n")
    warning = ("warning: mission 'seedless': two fresh environments reset with the same seed "
               "played different episodes: the environment ignores its seed; its results are "
               "not reproducible")
    for kind in ("--each", "--cross"):
        out = tmp_path / f"{kind[2:]}.json"
        done = parcat("eval", "-m", str(mission), "-p", "random", "-p", "noop", "-n", "2",
                      kind, "-o", str(out))
        assert done.returncode == 0, done.stderr
        assert done.stderr.count(warning) == 1, done.stderr
    cross = json.loads((tmp_path / "cross.json").read_text())
    assert cross["reproducible"] is False
    assert cross["environments"]["seedless"]["reproducible"] is False


def test_a_mission_built_in_python_that_cannot_reach_a_worker_is_checked_too() -> None:
    mission = dataclasses.replace(scripted_mission("leaky", tag=lambda: None),
                                  env="tests.fakes:LeakyEnv")
    with pytest.warns(RuntimeWarning, match="cannot be sent to worker processes"):
        report = evaluate(EvalConfig((mission,), (parse_policy_spec("random"),), 2))
    assert report.to_document()["environments"]["leaky"]["leaks_state"] is True


# -- dict observations --------------------------------------------------------------------------


def test_a_policy_expecting_an_array_is_told_how_to_read_a_dict_observation() -> None:
    game = load_mission("pettingzoo.classic.connect_four_v3")
    report = evaluate(EvalConfig((game,), (PolicySpec("tests.test_outsiders:ArrayPolicy"),), 1))
    error = report.episodes[0].error
    assert error is not None and error.type == "TypeError"
    assert error.message.endswith(
        " (this agent observes a dict of action_mask, observation, not an array: a "
        "module:Class policy reads obs['observation'] and plays an action where "
        "obs['action_mask'] is 1; README: Turn-based games)")
    masked = evaluate(EvalConfig((game,), (PolicySpec("tests.test_outsiders:MaskedPolicy"),), 2))
    assert masked.status == "complete" and all(e.ok for e in masked.episodes)
