"""Policy specs, built-ins, user classes and checkpoints."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from parcat.core.errors import PolicyError
from parcat.envs.missions import load_mission
from parcat.policies import checkpoint
from parcat.policies.base import AgentSpec
from parcat.policies.builtin import MLPPolicy
from parcat.policies.specs import make_policy, parse_policy_spec
from parcat.testing import check_policy


def agent_spec(mission_name: str = "harvest", index: int = 0) -> AgentSpec:
    mission = load_mission(mission_name)
    env = mission.make_env()
    agent = env.possible_agents[index]
    return AgentSpec(mission.name, agent, index, env.observation_space(agent),
                     env.action_space(agent), dict(mission.params))


def test_parse_spec_grammar() -> None:
    spec = parse_policy_spec("mlp,width=256,depth=3@2.5")
    assert (spec.target, dict(spec.kwargs), spec.weight) == ("mlp", {"width": 256, "depth": 3}, 2.5)
    assert spec.name == "mlp,width=256,depth=3"
    assert parse_policy_spec("pkg.mod:Cls").target == "pkg.mod:Cls"
    with pytest.raises(PolicyError, match=re.escape("weight after '@' must be a positive number")):
        parse_policy_spec("random@0")
    with pytest.raises(PolicyError, match=re.escape("expected KEY=VALUE after ',', got 'oops'")):
        parse_policy_spec("mlp,oops")


@pytest.mark.parametrize("mission", ["harvest", "evade", "goal_tasks"])
@pytest.mark.parametrize("name", ["random", "noop", "greedy", "mlp"])
def test_builtins_conform_on_every_mission(mission: str, name: str) -> None:
    m = load_mission(mission)
    spec = agent_spec(mission)
    check_policy(make_policy(parse_policy_spec(name), m, spec), spec)


def test_user_class_with_and_without_agent_spec() -> None:
    m = load_mission("harvest")
    policy = make_policy(parse_policy_spec("tests.fakes:NoKwargsPolicy,action=3"), m, agent_spec())
    assert policy.step(None) == 3
    crash = make_policy(parse_policy_spec("tests.fakes:CrashingPolicy,at_step=5"), m, agent_spec())
    assert crash.step(None) == 0


def test_bad_specs_name_the_problem() -> None:
    m = load_mission("harvest")
    with pytest.raises(PolicyError, match=re.escape("policy 'gredy' is not a built-in")):
        make_policy(parse_policy_spec("gredy"), m, agent_spec())
    with pytest.raises(PolicyError, match=re.escape("cannot import 'nosuch.mod:X'")):
        make_policy(parse_policy_spec("nosuch.mod:X"), m, agent_spec())
    with pytest.raises(PolicyError, match=re.escape("policy 'mlp,widht=3': ")):
        make_policy(parse_policy_spec("mlp,widht=3"), m, agent_spec())
    with pytest.raises(PolicyError, match=re.escape("mlp: 'width' must be an integer between "
                                                    "1 and 8,192, got 0")):
        make_policy(parse_policy_spec("mlp,width=0"), m, agent_spec())


def test_policy_checkpoint_round_trip(tmp_path: Path) -> None:
    spec = agent_spec()
    original = MLPPolicy(spec, width=16, depth=1, init_seed=5)
    saved = checkpoint.PolicyCheckpoint("parcat.policies.builtin:MLPPolicy",
                                        {"width": 16, "depth": 1}, original.state_dict(),
                                        {"mission": "harvest"})
    path = checkpoint.save_run(tmp_path / "run", {"agent_0": saved}, {}) / "agent_0"
    loaded = make_policy(parse_policy_spec(str(path)), load_mission("harvest"), spec)
    obs = np.ones(spec.observation_space.shape, dtype=np.float32)  # type: ignore[arg-type]
    assert loaded.step(obs) == original.step(obs)
    assert isinstance(loaded, MLPPolicy)
    for a, b in zip(loaded.weights, original.weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_run_checkpoint_gives_each_agent_its_own(tmp_path: Path) -> None:
    m = load_mission("harvest")
    agents = {}
    for index in range(4):
        policy = MLPPolicy(agent_spec(index=index), width=8, depth=1, init_seed=index)
        agents[f"agent_{index}"] = checkpoint.PolicyCheckpoint(
            "parcat.policies.builtin:MLPPolicy", {"width": 8, "depth": 1}, policy.state_dict()
        )
    run = checkpoint.save_run(tmp_path / "run", agents, {"mission": "harvest", "epoch": 3})
    for index in range(4):
        loaded = make_policy(parse_policy_spec(str(run)), m, agent_spec(index=index))
        assert isinstance(loaded, MLPPolicy)
        np.testing.assert_array_equal(loaded.weights[0], agents[f"agent_{index}"].arrays["w0"])
    bigger = load_mission("harvest", {"agents": 5})
    with pytest.raises(PolicyError, match=re.escape("has no agent 'agent_4'; it has: agent_0")):
        make_policy(parse_policy_spec(str(run)), bigger, agent_spec(index=0).__class__(
            "harvest", "agent_4", 4, agent_spec().observation_space, agent_spec().action_space))
    message = "is not a parcat checkpoint: no manifest.json"
    with pytest.raises(PolicyError, match=re.escape(message)):
        make_policy(parse_policy_spec(str(tmp_path)), m, agent_spec())
