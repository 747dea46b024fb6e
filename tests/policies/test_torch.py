"""A torch policy through ``step_batch`` (``examples/torch_policy.py``): the same actions
whatever the batch, the same results at any ``--jobs`` and lockstep, and an auto plan that
finds its batch form in the calibration worker and plays its episodes in lockstep.
Skipped where torch is not installed (``pip install torch``; CI installs the CPU wheel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from examples.torch_policy import TorchMLP  # noqa: E402

from parcat.envs.missions import load_mission  # noqa: E402
from parcat.eval.report import strip_timings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
POLICY = "examples.torch_policy:TorchMLP,width=64"
RUN = ["-m", "harvest", "--set", "agents=4", "--set", "max_steps=20", "-n", "8", "-p", POLICY]


def parcat(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # examples/ importable in every worker
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def observations(device: str, threads: int) -> tuple[TorchMLP, list[np.ndarray]]:
    torch.set_num_threads(threads)
    agent = load_mission("harvest", {"agents": 24}).agents()[0]
    rng = np.random.default_rng(0)
    obs = [rng.uniform(0, 1, agent.observation_space.shape).astype(np.float32)
           for _ in range(300)]
    return TorchMLP(agent, width=256, device=device), obs


def same_rows_in_every_batch(policy: TorchMLP, obs: list[np.ndarray]) -> None:
    whole = policy.step_batch(obs)
    for size in (1, 7, 64, 300):
        for start in (0, 5, 200):
            part = obs[start:start + size]
            assert policy.step_batch(part) == whole[start:start + len(part)], (size, start)


# the GPU's path (every call of one shape) runs on the CPU too; on a GPU where torch sees one
DEVICES = [("cpu", False), ("cpu", True)] + [("cuda", True)] * torch.cuda.is_available()


@pytest.mark.parametrize(("device", "fixed_shape"), DEVICES)
@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_s_action_is_the_same_in_a_batch_of_any_size(threads: int, device: str,
                                                           fixed_shape: bool) -> None:
    before = torch.get_num_threads()
    try:
        policy, obs = observations(device, threads)
        policy.fixed_shape = fixed_shape
        same_rows_in_every_batch(policy, obs)
    finally:
        torch.set_num_threads(before)


def results(*flags: str) -> list[Any]:
    done = parcat("eval", *RUN, "-f", "json", *flags)
    assert done.returncode == 0, done.stderr
    return strip_timings(json.loads(done.stdout))["episodes"]


def test_the_same_results_at_any_jobs_and_lockstep() -> None:
    reference = results("--jobs", "1")
    for flags in ([], ["--lockstep", "7"], ["--jobs", "2", "--lockstep", "3"],
                  ["--jobs", "2", "--executor", "process"]):
        assert results(*flags) == reference, flags


def test_an_auto_plan_finds_the_batch_form_and_plays_episodes_in_lockstep() -> None:
    done = parcat("plan", *RUN, "-f", "json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["lockstep"] > 1
    assert any("step_batch measured at" in reason for reason in plan["reasons"])
