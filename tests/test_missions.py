"""Mission loading: names, paths, overrides and the exact messages for bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parcat.core.errors import MissionError
from parcat.core.settings import parse_overrides
from parcat.envs.missions import BUILTIN_DIR, list_missions, load_mission
from parcat.testing import check_env

BUILTINS = ["evade", "goal_tasks", "harvest"]


def test_builtin_missions_are_listed() -> None:
    names = [m.name for m in list_missions()]
    assert set(BUILTINS) <= set(names)


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_mission_passes_check_env(name: str) -> None:
    mission = load_mission(name)
    check_env(mission.make_env(), seed=1, num_steps=60)


def test_overrides_change_params_and_are_validated() -> None:
    mission = load_mission("harvest", {"agents": 8, "max_steps": 30})
    assert mission.params["agents"] == 8 and mission.max_steps == 30
    assert len(mission.make_env().possible_agents) == 8
    message = "mission 'harvest' has no parameter 'agnets'"
    with pytest.raises(MissionError, match=re.escape(message)):
        load_mission("harvest", {"agnets": 8})


def test_unknown_mission_names_the_known_ones() -> None:
    with pytest.raises(MissionError) as info:
        load_mission("harvst")
    message = str(info.value)
    assert message.startswith("mission 'harvst' not found in ")
    assert "(did you mean 'harvest'?); known: " in message
    assert "evade, goal_tasks, harvest" in message


def test_mission_from_path_and_malformed_yaml(tmp_path: Path) -> None:
    good = tmp_path / "cart.yaml"
    good.write_text("name: cart\nenv: gymnasium:CartPole-v1\nmax_steps: 50\n")
    mission = load_mission(str(good))
    assert (mission.name, mission.max_steps) == ("cart", 50)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nenv: [unclosed\n")
    with pytest.raises(MissionError, match=re.escape(f"mission file '{bad}' line 3:")):
        load_mission(str(bad))
    wrong_key = tmp_path / "wrong.yaml"
    wrong_key.write_text("name: w\nenv: gymnasium:CartPole-v1\nparms: {}\n")
    with pytest.raises(MissionError, match=re.escape("unknown key 'parms'; valid: ")):
        load_mission(str(wrong_key))
    with pytest.raises(MissionError, match=re.escape("mission file 'nope.yaml' does not exist")):
        load_mission("nope.yaml")


def test_bad_env_reference(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nenv: no_such_module:Env\n")
    with pytest.raises(MissionError, match=re.escape("mission 'x': cannot load env")):
        load_mission(str(path))


def test_parse_overrides_types() -> None:
    assert parse_overrides(["agents=8", "speed=0.5", "flag=true", "kind=direction"]) == {
        "agents": 8, "speed": 0.5, "flag": True, "kind": "direction",
    }
    with pytest.raises(MissionError, match=re.escape("--set expects KEY=VALUE")):
        parse_overrides(["agents"])


def test_local_missions_dir_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "missions").mkdir()
    (tmp_path / "missions" / "mine.yaml").write_text("env: gymnasium:CartPole-v1\n")
    monkeypatch.chdir(tmp_path)
    assert load_mission("mine").name == "mine"
    assert (BUILTIN_DIR / "harvest.yaml").is_file()


def test_a_module_callable_is_a_mission_without_yaml() -> None:
    mission = load_mission("tests.envs.nim:NimEnv", {"low": 3, "high": 4,
                                                     "mission.max_steps": 9})
    assert (mission.name, mission.env, dict(mission.params), mission.max_steps) == \
        ("tests.envs.nim:NimEnv", "tests.envs.nim:NimEnv", {"low": 3, "high": 4}, 9)
    assert mission.make_env().possible_agents == ["player_0", "player_1"]


def test_a_pettingzoo_module_path_is_a_mission_without_yaml() -> None:
    pytest.importorskip("pygame")  # PettingZoo's classic games import it
    # turn-based only: its env(); with a parallel version too: parallel_env() is preferred
    assert load_mission("pettingzoo.classic.connect_four_v3").env == \
        "pettingzoo.classic.connect_four_v3:env"
    mission = load_mission("pettingzoo.classic.rps_v2", {"mission.max_steps": 5})
    assert mission.env == "pettingzoo.classic.rps_v2:parallel_env" and mission.max_steps == 5


@pytest.mark.parametrize(("name", "message"), [
    ("no_such_pkg.envs", "mission 'no_such_pkg.envs' is no mission file or name, and no module "
     "to import (No module named 'no_such_pkg')"),
    ("json.decoder", "module 'json.decoder' has neither parallel_env() nor env(); name the "
     "factory as 'module:callable'"),
    ("tests.envs.nim:Nope", "mission 'tests.envs.nim:Nope': cannot load env "
     "'tests.envs.nim:Nope': module 'tests.envs.nim' has no attribute 'Nope'"),
])
def test_a_factory_that_cannot_be_found_is_one_clear_error(name: str, message: str) -> None:
    with pytest.raises(MissionError, match=re.escape(message)):
        load_mission(name)
