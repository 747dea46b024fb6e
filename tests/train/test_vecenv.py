"""VecEnv on every backend: the same arrays whatever the lanes, lanes that recover.

One matrix, like Stable-Baselines3's ``VEC_ENV_CLASSES``: in-process, worker processes
(spinning or parked, with and without this process stepping a share), and Ray actors.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import tempfile
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest

from parcat.core.errors import WorkerError
from parcat.envs.missions import load_mission
from parcat.ipc.shm_names import block_creator, this_creator
from parcat.train.async_learning import AsyncLearning
from parcat.train.learner import Transitions
from parcat.train.vecenv import VecEnv
from tests.raytemp import shutdown_and_clean
from tests.reliability.helpers import shm_blocks, wait_until

GOALS = {"agents": 2, "task_kind": "direction", "max_steps": 7}
NUM_ENVS = 4
STEPS = 20
# (label, VecEnv keyword arguments): every layout has NUM_ENVS environments
LAYOUTS: list[tuple[str, dict[str, Any]]] = [
    ("inline", {"num_workers": 0, "envs_per_worker": 4}),
    ("1 worker", {"num_workers": 1, "envs_per_worker": 4}),
    ("2 workers parked", {"num_workers": 2, "envs_per_worker": 2, "spin": False}),
    ("2 workers spinning", {"num_workers": 2, "envs_per_worker": 2, "spin": True}),
    ("local share", {"num_workers": 2, "envs_per_worker": 2, "local_share": True}),
    ("spawn", {"num_workers": 2, "envs_per_worker": 2, "start_method": "spawn"}),
    ("ray", {"num_workers": 2, "envs_per_worker": 2, "backend": "ray"}),
]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp,
             configure_logging=False)
    yield
    shutdown_and_clean(ray, temp)


def rollout(vec: VecEnv) -> list[dict[str, np.ndarray]]:
    """Reset, then STEPS steps with actions from a fixed generator; every array each time."""
    rng = np.random.default_rng(3)
    frames = [_frame(vec, vec.reset())]
    for _ in range(STEPS):
        actions = {a: rng.integers(0, 5, size=vec.num_envs) for a in vec.agents}
        vec.step(actions)
        frames.append(_frame(vec, vec.gather("obs")))
    return frames


def _frame(vec: VecEnv, obs: dict[Any, np.ndarray]) -> dict[str, np.ndarray]:
    frame = {f"obs/{a}": v for a, v in obs.items()}
    for kind in ("rew", "term", "trunc", "alive", "final"):
        frame.update({f"{kind}/{a}": v for a, v in vec.gather(kind).items()})
    frame["reset_mask"] = vec.reset_mask()
    return frame


@pytest.fixture(scope="module")
def reference() -> list[dict[str, np.ndarray]]:
    with VecEnv(load_mission("goal_tasks", GOALS), 0, NUM_ENVS, seed=11) as vec:
        return rollout(vec)


@pytest.mark.parametrize(("label", "layout"), LAYOUTS, ids=[label for label, _ in LAYOUTS])
def test_every_backend_gives_the_inline_arrays(
    request: pytest.FixtureRequest, reference: list[dict[str, np.ndarray]],
    label: str, layout: dict[str, Any],
) -> None:
    if layout.get("backend") == "ray":
        request.getfixturevalue("ray_cluster")
    before = own_blocks()
    with VecEnv(load_mission("goal_tasks", GOALS), seed=11, **layout) as vec:
        assert vec.num_envs == NUM_ENVS
        frames = rollout(vec)
        pids = vec.worker_pids()
    assert len(frames) == len(reference)
    for step, (got, want) in enumerate(zip(frames, reference, strict=True)):
        assert got.keys() == want.keys()
        for key in want:
            assert np.array_equal(got[key], want[key]), f"{label}: step {step}, {key}"
    assert any(f["reset_mask"].any() for f in frames), "no episode ended: autoreset untested"
    assert wait_until(lambda: not any(_alive(p) for p in pids), 10)
    assert own_blocks() - before == set()


def test_layout_says_where_environments_step() -> None:
    mission = load_mission("goal_tasks", GOALS)
    with VecEnv(mission, 2, 2, seed=0, local_share=True) as vec:
        assert vec.layout == [("worker", 2), ("worker", 1), ("local", 1)]
        assert len(vec.worker_pids()) == 2


def test_a_killed_worker_is_replaced_and_its_episodes_discarded() -> None:
    events: list[str] = []
    mission = load_mission("goal_tasks", GOALS)
    with VecEnv(mission, 2, 2, seed=11, on_event=events.append) as vec:
        vec.reset()
        victim = vec.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        assert wait_until(lambda: not _alive(victim), 10)
        vec.step({a: np.zeros(vec.num_envs, dtype=np.int64) for a in vec.agents})
        assert events == ["worker restarted"]
        assert vec.discarded == 2
        assert victim not in vec.worker_pids() and len(vec.worker_pids()) == 2
        # the replacement serves the next step like any other lane
        vec.step({a: np.zeros(vec.num_envs, dtype=np.int64) for a in vec.agents})
        assert all(v.shape[0] == NUM_ENVS for v in vec.gather("obs").values())


def test_an_environment_that_cannot_be_built_fails_with_its_traceback() -> None:
    mission = load_mission("goal_tasks", GOALS)
    broken = dataclasses.replace(mission, env="tests.train.test_vecenv:only_in_the_parent")
    with pytest.raises(WorkerError, match="environment worker failed to start") as info:
        VecEnv(broken, 1, 2, seed=0)
    assert "RuntimeError: no environments in workers" in str(info.value)
    report = info.value.__cause__.__cause__.report  # type: ignore[union-attr]
    assert "only_in_the_parent" in report.traceback


def only_in_the_parent(**params: Any) -> Any:
    """goal_tasks in the test's process; raises in any worker process."""
    import multiprocessing

    from parcat.envs.goal_tasks import GoalTasksEnv

    if multiprocessing.parent_process() is not None:
        raise RuntimeError("no environments in workers")
    return GoalTasksEnv(**params)


def test_learner_worker_trains_and_reports_its_death() -> None:
    from parcat.train.dqn import DQNLearner
    from parcat.train.recipes import LearnerRecipe

    recipe = LearnerRecipe(DQNLearner, gymnasium.spaces.Box(-1, 1, (4,)),
                           gymnasium.spaces.Discrete(3),
                           {"width": 8, "depth": 1, "learning_starts": 8, "batch_size": 8}, 1)
    learner = recipe.build()
    events: list[tuple[str, int]] = []
    learning = AsyncLearning({"a": learner}, {"a": recipe}, 2, lambda *e: events.append(e))
    try:
        rng = np.random.default_rng(0)
        batch = Transitions(rng.normal(size=(16, 4)), rng.integers(0, 3, 16),
                            rng.normal(size=16), rng.normal(size=(16, 4)), np.zeros(16, dtype=bool))
        before = learner.policy_arrays()
        learning.record("a", batch)
        learning.submit(epoch=0)
        learning.wait()
        assert events == [("train_start", 0), ("train_end", 0)]
        assert np.isfinite(learning.metrics["a"]["loss"])
        assert any(not np.array_equal(before[k], v) for k, v in learner.policy_arrays().items())
        learning.sync_states()
        assert learner.num_updates > 0  # the trained state, loaded into the acting learner
        pid = learning.worker.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        died = "the learner process (training parcat.train.dqn:DQNLearner) died (signal SIGKILL)"
        with pytest.raises(WorkerError, match=re.escape(died)):
            learning.submit(epoch=1)
            learning.wait()
    finally:
        learning.close()


def test_learner_state_comes_after_a_round_an_interrupt_left_unread() -> None:
    # an interrupt between submit's send and `busy = True`, or between result's read and
    # `busy = False`, leaves a round's reply unread: the state must not be taken for it
    from parcat.train.dqn import DQNLearner
    from parcat.train.recipes import LearnerRecipe

    recipe = LearnerRecipe(DQNLearner, gymnasium.spaces.Box(-1, 1, (4,)),
                           gymnasium.spaces.Discrete(3), {"width": 8, "depth": 1}, 1)
    learner = recipe.build()
    events: list[Any] = []
    learning = AsyncLearning({"a": learner}, {"a": recipe}, 1, lambda *e: events.append(e))
    try:
        learning.submit(epoch=0)
        learning.busy = False  # as if the interrupt came before the flag was set
        learning.sync_states(timeout_s=60)
        assert events == [("train_start", 0), ("train_end", 0)]
        assert not learning.busy
    finally:
        learning.close()


def own_blocks() -> set[str]:
    """Shared-memory blocks this process created (other test runs may share /dev/shm)."""
    return {b for b in shm_blocks({os.getpid()}) if block_creator(b) == this_creator()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
