"""EnvSlice: seeds and tasks depend on (seed, environment, episode), never on layout or epoch."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import pytest

from parcat.envs.missions import Mission, load_mission
from parcat.ipc.shm import ArrayBlock
from parcat.train.envslice import EnvSlice, agent_layouts, array_specs

SEED = 11
NUM_ENVS = 4
GOALS = {"agents": 2, "max_steps": 5}
LAYOUTS = [[(0, 4)], [(0, 2), (2, 2)], [(0, 1), (1, 3)], [(0, 1), (1, 1), (2, 1), (3, 1)]]


@pytest.fixture(scope="module")
def goals() -> Mission:
    return load_mission("goal_tasks", GOALS)


def zeros(mission: Mission, count: int) -> dict[str, np.ndarray]:
    specs = array_specs(agent_layouts(mission), count)
    return {key: np.zeros(shape, dtype) for key, (shape, dtype) in specs.items()}


@contextmanager
def slices(mission: Mission, layout: list[tuple[int, int]], shared: bool = False,
           seed: int = SEED) -> Iterator[list[EnvSlice]]:
    """One EnvSlice per ``(first, count)``; in shared memory as in a worker, or not."""
    with ExitStack() as stack:
        made = []
        for first, count in layout:
            if shared:
                block = ArrayBlock(array_specs(agent_layouts(mission), count))
                stack.callback(block.close)
                arrays = block.arrays
            else:
                arrays = zeros(mission, count)
            envs = EnvSlice(mission, first, count, seed, arrays)
            stack.callback(envs.close)
            made.append(envs)
        yield made


def gather(parts: list[EnvSlice]) -> dict[str, np.ndarray]:
    """Every array of the run, the slices' rows put together in environment order."""
    return {key: np.concatenate([p.arrays[key] for p in parts]) for key in parts[0].arrays}


def random_actions(steps: int, agents: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 5, (steps, agents, NUM_ENVS))


def step_all(parts: list[EnvSlice], actions: np.ndarray) -> None:
    """Write each agent's actions into every slice's rows and step the slices."""
    for envs in parts:
        rows = slice(envs.first, envs.first + len(envs.envs))
        for i, per_env in enumerate(actions):
            envs.arrays[f"act{i}"][:] = per_env[rows]
        envs.step()


def record(mission: Mission, layout: list[tuple[int, int]], actions: np.ndarray,
           shared: bool = False) -> list[dict[str, np.ndarray]]:
    """All arrays after the reset and after every step."""
    with slices(mission, layout, shared) as parts:
        for envs in parts:
            envs.reset_all()
        history = [gather(parts)]
        for step in actions:
            step_all(parts, step)
            history.append(gather(parts))
    return history


@pytest.mark.usefixtures("clean_machine")
@pytest.mark.parametrize("layout", LAYOUTS[1:], ids=str)
def test_every_layout_produces_the_same_arrays(goals: Mission,
                                               layout: list[tuple[int, int]]) -> None:
    actions = random_actions(12, 2)  # two autoresets at max_steps 5
    whole = record(goals, LAYOUTS[0], actions)
    split = record(goals, layout, actions, shared=True)
    assert len(whole) == len(split) == 13
    for t, (one, other) in enumerate(zip(whole, split, strict=True)):
        assert one.keys() == other.keys()
        for key in one:
            assert np.array_equal(one[key], other[key]), (t, key)


def test_tasks_depend_on_environment_and_episode(goals: Mission) -> None:
    with slices(goals, LAYOUTS[0]) as (envs,):
        obs = envs.arrays["obs0"]
        envs.reset_all()
        first = obs.copy()
        for _ in range(GOALS["max_steps"]):
            envs.step()  # action 0 (stand still) everywhere
        next_episode = obs.copy()
        assert envs.arrays["episode"].tolist() == [1] * NUM_ENVS
        envs.arrays["episode"][:] = 0
        envs.reset_all()  # the same episode again: the same task
        again = obs.copy()
        envs.arrays["episode"][:] = 1
        envs.reset_all()  # episode 1 reset directly, as a resumed run does
        resumed = obs.copy()
    goal = slice(3, 5)
    assert np.array_equal(first, again)
    assert np.array_equal(next_episode, resumed)
    assert len({tuple(row) for row in first[:, goal]}) == NUM_ENVS  # one task per environment
    assert not np.isclose(first[:, goal], next_episode[:, goal]).any()
    assert not first[:, :3].any() and not next_episode[:, :3].any()  # at the origin, no reward


def test_the_run_seed_changes_every_task(goals: Mission) -> None:
    observed = []
    for seed in (SEED, SEED + 1):
        with slices(goals, LAYOUTS[0], seed=seed) as (envs,):
            envs.reset_all()
            observed.append(envs.arrays["obs1"].copy())
    assert not np.isclose(observed[0][:, 3:5], observed[1][:, 3:5]).any()


def test_autoreset_reports_the_finished_episode_and_starts_the_next(goals: Mission) -> None:
    actions = random_actions(2 * GOALS["max_steps"] + 1, 2, seed=4)
    with slices(goals, LAYOUTS[0]) as (envs,):
        arrays = envs.arrays
        envs.reset_all()
        returns = np.zeros((NUM_ENVS, 2))
        for t, step in enumerate(actions, start=1):
            step_all([envs], step)
            rewards = np.stack([arrays["rew0"], arrays["rew1"]], axis=1)
            returns += rewards
            ended = t % GOALS["max_steps"] == 0
            assert arrays["ep_done"].tolist() == [ended] * NUM_ENVS, t
            for i in range(2):
                assert arrays[f"trunc{i}"].tolist() == [ended] * NUM_ENVS
                assert not arrays[f"term{i}"].any() and arrays[f"alive{i}"].all()
            if not ended:
                assert np.array_equal(arrays["obs0"], arrays["final0"])
                continue
            assert arrays["ep_len"].tolist() == [GOALS["max_steps"]] * NUM_ENVS
            assert np.allclose(arrays["ep_ret"], returns, rtol=1e-6)  # rewards are float32
            # (length, per-agent returns) of each episode that ended in this step
            stats = [(int(arrays["ep_len"][e]), [float(r) for r in arrays["ep_ret"][e]])
                     for e in np.flatnonzero(arrays["ep_done"])]
            assert [length for length, _ in stats] == [GOALS["max_steps"]] * NUM_ENVS
            assert np.allclose([r for _, r in stats], returns, rtol=1e-6)
            for i in range(2):
                obs, final = arrays[f"obs{i}"], arrays[f"final{i}"]
                assert not obs[:, :3].any()  # the next episode's first observation
                assert np.array_equal(final[:, 2], arrays[f"rew{i}"])  # the last step's
                assert not np.isclose(obs[:, 3:5], final[:, 3:5]).any()  # a new task
            returns[:] = 0
        assert envs.episode == [2] * NUM_ENVS and envs.steps == [1] * NUM_ENVS


def test_an_episode_the_environment_ends_itself_is_reset_too() -> None:
    # ScriptedEnv removes its agents after its own max_steps, well before the mission's
    mission = Mission(name="scripted", env="tests.fakes:ScriptedEnv",
                      params={"agents": 2, "max_steps": 3, "fail_at": -1, "busy_us": 0},
                      max_steps=100)
    with slices(mission, [(0, 2)]) as (envs,):
        arrays = envs.arrays
        envs.reset_all()
        total = np.zeros((2, 2))
        for t in range(1, 4):
            arrays["act0"][:] = [1, 2]
            arrays["act1"][:] = [0, 2]
            envs.step()
            total += np.stack([arrays["rew0"], arrays["rew1"]], axis=1)
            assert arrays["ep_done"].tolist() == [t == 3] * 2
        assert arrays["ep_len"].tolist() == [3, 3]
        assert np.allclose(arrays["ep_ret"], total, rtol=1e-6)
        low = np.array([[3, 0], [6, 6]])  # three rewards of action + noise in [0, 1)
        assert ((arrays["ep_ret"] >= low) & (arrays["ep_ret"] < low + 3)).all()
        assert arrays["trunc0"].all() and not arrays["term0"].any()
        assert arrays["final0"][:, 0].tolist() == [3, 3]  # the observation holds the step
        assert arrays["obs0"][:, 0].tolist() == [0, 0]


def test_the_mission_step_limit_truncates_a_longer_episode(goals: Mission) -> None:
    short = dataclasses.replace(goals, max_steps=3)  # the environment itself would run 5
    with slices(short, [(0, 2)]) as (envs,):
        envs.reset_all()
        done: list[Any] = []
        for _ in range(3):
            envs.step()
            done.append(envs.arrays["ep_done"].tolist())
            assert envs.arrays["trunc1"].tolist() == done[-1]
        assert done == [[False, False], [False, False], [True, True]]
        assert envs.arrays["ep_len"].tolist() == [3, 3]
