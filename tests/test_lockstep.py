"""Episodes in lockstep (:mod:`parcat.episode.lockstep`): the same results as one at a
time, whatever K and whatever an episode is played with, and one policy call per step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from parcat.envs.missions import Mission, load_mission
from parcat.episode import replay
from parcat.episode.lockstep import run_many
from parcat.episode.results import EpisodeResult, EpisodeStatus
from parcat.episode.rollout import EpisodeRunner, EpisodeTask, TaskList
from parcat.eval.evaluate import evaluate, make_config
from parcat.parallel.run_options import RunOptions
from parcat.policies import checkpoint
from parcat.policies.builtin import MLPPolicy
from parcat.policies.specs import has_batch_form, parse_policy_spec
from parcat.stepping.base import InlineStepper, Seat
from parcat.train.mlp import forward_acting
from tests.envs.test_turn_based import NIM
from tests.fakes import PickyBatchPolicy, scripted_mission

POLICIES = ["greedy", "random@2", "tests.fakes:StatefulPolicy", "mlp,width=32"]
MIXED = tuple(parse_policy_spec(p) for p in POLICIES)


def untimed(results: list[EpisodeResult]) -> list[dict[str, object]]:
    return [replace(r, duration_s=0.0).to_dict() for r in results]


def play(tasks: list[EpisodeTask], slots: int) -> list[EpisodeResult]:
    """The tasks' results in task order, each reported exactly once."""
    runner = EpisodeRunner()
    try:
        played = list(run_many(runner, enumerate(tasks), slots))
    finally:
        runner.close()
    assert sorted(index for index, _ in played) == list(range(len(tasks)))
    return [result for _, result in sorted(played, key=lambda item: item[0])]


def one_at_a_time(tasks: list[EpisodeTask]) -> list[EpisodeResult]:
    runner = EpisodeRunner()
    try:
        return [runner.run(task) for task in tasks]
    finally:
        runner.close()


@pytest.mark.parametrize("slots", [1, 7, 64])
def test_any_number_of_slots_gives_the_results_of_one_at_a_time(slots: int) -> None:
    config = make_config(["harvest", "evade"], POLICIES, episodes=9, seed=3,
                         overrides={"max_steps": 25})
    tasks = list(TaskList(config.missions, config.policies, 3, 9))
    assert untimed(play(tasks, slots)) == untimed(one_at_a_time(tasks))


@pytest.mark.parametrize("slots", [3, 8])
def test_a_turn_based_game_in_lockstep_equals_one_at_a_time(slots: int) -> None:
    policies = (parse_policy_spec("random"), parse_policy_spec("mlp"))
    tasks = [EpisodeTask(NIM, policies, 3, i) for i in range(10)]
    results = play(tasks, slots)
    assert all(r.ok for r in results), [r.error for r in results]
    assert untimed(results) == untimed(one_at_a_time(tasks))


def test_action_masks_of_a_pettingzoo_game_hold_in_lockstep() -> None:
    pytest.importorskip("pygame")  # PettingZoo's classic games import it
    connect_four = Mission(name="connect_four", env="pettingzoo.classic.connect_four_v3:env",
                           params={}, max_steps=42)
    tasks = [EpisodeTask(connect_four, (parse_policy_spec("mlp"),), 1, i) for i in range(6)]
    results = play(tasks, 6)
    assert all(r.ok for r in results), [r.error for r in results]  # an illegal move raises
    assert untimed(results) == untimed(one_at_a_time(tasks))


def test_a_shared_policy_acts_for_every_episode_in_one_call_per_step() -> None:
    mission = scripted_mission(agents=3, max_steps=5)
    policies = (parse_policy_spec("tests.fakes:PickyBatchPolicy,at_step=99"),)
    PickyBatchPolicy.calls.clear()
    play([EpisodeTask(mission, policies, 0, i) for i in range(4)], 4)
    assert PickyBatchPolicy.calls == [4 * 3] * 5  # 4 episodes x 3 agents, once per step


def test_a_policy_failing_in_one_episode_fails_only_that_episode() -> None:
    """The shared call fails on agent 2's observation at step 3: only the episodes where
    agent 2 plays that policy fail, as they do one at a time."""
    mission = scripted_mission(agents=3, max_steps=6)
    policies = (parse_policy_spec("random"), parse_policy_spec("tests.fakes:PickyBatchPolicy"))
    tasks = [EpisodeTask(mission, policies, 0, i) for i in range(12)]
    results = play(tasks, 12)
    failed = [r for r in results if not r.ok]
    assert failed and len(failed) < len(results)
    for result in failed:
        assert result.error is not None and result.steps == 3
        # a batch names its first agent: the call cannot say whose observation it refused
        assert (result.error.type, result.error.phase) == ("ValueError", "policy")
        assert "agent 2 is not served at step 3" in result.error.traceback
    assert untimed(results) == untimed(one_at_a_time(tasks))


def test_an_env_failing_in_one_slot_leaves_the_others_playing() -> None:
    broken = scripted_mission(name="broken", fail_at=2)
    policies = (MIXED[1], MIXED[2], parse_policy_spec("noop"))
    tasks = [EpisodeTask(broken if i % 3 == 0 else scripted_mission(), policies, 0, i)
             for i in range(9)]
    results = play(tasks, 4)
    assert [r.status for r in results] == [EpisodeStatus.FAILED, EpisodeStatus.OK,
                                           EpisodeStatus.OK] * 3
    assert untimed(results) == untimed(one_at_a_time(tasks))


def test_replays_are_the_same_with_and_without_lockstep(tmp_path: Path) -> None:
    config = make_config(["harvest"], ["mlp,width=32", "random"], episodes=5, seed=2,
                         overrides={"max_steps": 12})
    for lockstep in (1, 5):
        evaluate(config, RunOptions(jobs=1, lockstep=lockstep),
                 replay_dir=tmp_path / str(lockstep))
    for k in range(5):
        one = replay.read(tmp_path / "1" / replay.file_name("harvest", k))
        five = replay.read(tmp_path / "5" / replay.file_name("harvest", k))
        assert one.meta == five.meta
        assert all(np.array_equal(one.arrays[key], five.arrays[key]) for key in one.arrays)


@pytest.mark.parametrize("threads", [None, 1])
def test_an_mlp_row_has_the_same_bits_in_any_batch(threads: int | None) -> None:
    """BLAS picks its kernel by the matrix's shape; padded, blocked rows must not care."""
    spec = scripted_mission().agent_specs(scripted_mission().make_env())[0]
    policy = MLPPolicy(replace(spec, observation_space=_box(75)), width=256, depth=2)
    rows = np.random.default_rng(0).standard_normal((300, 75)).astype(np.float32)
    with threadpool_limits(limits=threads):
        whole = policy.forward(rows)
        for size in (1, 7, 64, 300):
            for start in {0, 3, 300 - size}:
                part = policy.forward(rows[start:start + size])
                assert np.array_equal(part, whole[start:start + size]), (size, start)
        layers = list(zip(policy.weights, policy.biases, strict=True))
        assert np.array_equal(forward_acting(layers, rows[:7]), whole[:7])
    assert policy.step_batch(list(rows[:7])) == [policy.step(row) for row in rows[:7]]


def _box(size: int):  # type: ignore[no-untyped-def]
    import gymnasium

    return gymnasium.spaces.Box(-5.0, 5.0, (size,), np.float32)


def test_each_agent_of_a_run_checkpoint_acts_with_its_own_weights(tmp_path: Path) -> None:
    """A run's agents were trained apart: sharing one agent's network would be wrong."""
    harvest = load_mission("harvest", {"agents": 4, "max_steps": 8})
    env = harvest.make_env()
    specs = harvest.agent_specs(env)
    own = [MLPPolicy(spec, width=8, depth=1, init_seed=index) for index, spec in enumerate(specs)]
    saved = {str(spec.agent_id): checkpoint.PolicyCheckpoint(
        "parcat.policies.builtin:MLPPolicy", {"width": 8, "depth": 1}, policy.state_dict())
        for spec, policy in zip(specs, own, strict=True)}
    run = parse_policy_spec(str(checkpoint.save_run(tmp_path / "run", saved, {})))
    stepper = InlineStepper()
    stepper.start(harvest, [Seat(spec, run, 0) for spec in specs])
    obs, _ = env.reset(seed=1)
    expected = {spec.agent_id: policy.step(obs[spec.agent_id])
                for spec, policy in zip(specs, own, strict=True)}
    assert stepper.act(obs, list(obs)) == expected
    tasks = [EpisodeTask(harvest, (run,), 0, i) for i in range(4)]
    assert untimed(play(tasks, 4)) == untimed(one_at_a_time(tasks))


def test_the_planner_knows_which_policies_have_a_shared_batch_form(tmp_path: Path) -> None:
    spec = load_mission("harvest").agent_specs(load_mission("harvest").make_env())[0]
    saved = checkpoint.PolicyCheckpoint("parcat.policies.builtin:MLPPolicy", {"width": 8},
                                        MLPPolicy(spec, width=8).state_dict())
    run = checkpoint.save_run(tmp_path / "run", {str(spec.agent_id): saved}, {})
    shared = {text: has_batch_form(parse_policy_spec(text))
              for text in ("mlp", "noop", str(run), "random", "greedy",
                           "tests.fakes:PickyBatchPolicy")}
    # code from outside parcat is not imported in this process to find out
    assert shared == {"mlp": True, "noop": True, str(run): True, "random": False,
                      "greedy": False, "tests.fakes:PickyBatchPolicy": False}


def test_agents_with_other_spaces_never_share_a_call() -> None:
    """mlp over agents that see and do different things (MPE's adversary and good agents):
    a network per kind of agent, in lockstep as one at a time."""
    mission = replace(scripted_mission(agents=3, max_steps=6), env="tests.fakes:MixedSpacesEnv")
    tasks = [EpisodeTask(mission, (parse_policy_spec("mlp,width=16"),), 0, i) for i in range(5)]
    results = play(tasks, 5)
    assert all(r.ok for r in results), [r.error for r in results]
    assert untimed(results) == untimed(one_at_a_time(tasks))


def test_an_agent_live_without_a_seat_fails_its_episode_not_the_run() -> None:
    stray = replace(scripted_mission(name="stray", max_steps=6), env="tests.fakes:StrayAgentEnv")
    policies = (parse_policy_spec("mlp,width=16"), parse_policy_spec("random"))
    tasks = [EpisodeTask(stray if i % 2 else scripted_mission(max_steps=6), policies, 0, i)
             for i in range(4)]
    results = play(tasks, 4)
    assert [r.ok for r in results] == [True, False, True, False]
    assert all("99" in str(r.error.message) for r in results if r.error is not None)
    assert untimed(results) == untimed(one_at_a_time(tasks))
