"""Time to reach 475 on CartPole: parcat's tuned DQN config against Stable-Baselines3's DQN
with rl-zoo's CartPole-v1 hyperparameters (issue 26). Not a test: it takes minutes, and its
figures mean something only on a quiet machine.

SB3 learns rl-zoo's ``hyperparams/dqn.yml`` (256 environment steps, then 128 updates of a
batch of 64; a [256, 256] network, lr 2.3e-3, epsilon to 0.04 over the first 16% of 50,000
steps); parcat ``configs/cartpole-dqn.yaml``, the same rounds on a [64, 64] network with
epsilon over 4,000 steps and updates from 500 (its header has the sweep behind them). Both
are evaluated alike: every 1,024 environment steps, the same 10 greedy episodes (reset
from parcat's evaluation seeds of the run's seed); the time to 475 is the clock, from the
first step, at the first evaluation whose mean reaches 475 (its own evaluation time
counted, on both sides). Seeds run one after another, each in a process of its own, so
imports are not timed; BLAS and torch use one thread (parcat's learner does: on these
small matrices more threads only cost).

    .venv/bin/python benchmarks/cartpole_vs_sb3.py [--seeds 0 1 2] [--total-steps 50000]

Needs ``pip install stable-baselines3`` (torch; the ``bench`` extra of pyproject.toml). A
smoke run: ``--seeds 0 --total-steps 3000`` (475 is then out of reach: "never").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = 475.0
EVAL_EVERY = 1024
EVAL_EPISODES = 10
RL_ZOO = {  # rl-zoo's hyperparams/dqn.yml, CartPole-v1
    "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1000,
    "gamma": 0.99, "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128,
    "exploration_fraction": 0.16, "exploration_final_eps": 0.04,
}


def parcat_run(seed: int, total_steps: int, out: Path) -> dict[str, Any]:
    """Train configs/cartpole-dqn.yaml (evaluated as SB3 is); its evaluations."""
    run = out / f"parcat-{seed}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OPENBLAS_NUM_THREADS": "1"}
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "parcat", "train", "-c", "configs/cartpole-dqn.yaml", "--seed",
         str(seed), "--total-steps", str(total_steps), "--checkpoint-every", "4",
         "--eval-episodes", str(EVAL_EPISODES), "-o", str(run), "--force", "--no-progress"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"parcat train exited {done.returncode}:\n{done.stderr}")
    evaluations = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        total = (record.get("eval_return") or {}).get("total")
        if total is not None:
            evaluations.append((record["time_s"], record["total_env_steps"], total))
    return {"evaluations": evaluations, "wall_s": wall}


def sb3_run(seed: int, total_steps: int) -> dict[str, Any]:
    """Train SB3's DQN with rl-zoo's settings in this process; its evaluations."""
    import gymnasium
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    from parcat.core.seeding import derive_seed
    from parcat.train.runs import EVAL_STREAM

    torch.set_num_threads(1)
    evaluations: list[tuple[float, int, float]] = []
    eval_env = gymnasium.make("CartPole-v1")

    def greedy_mean(model: DQN) -> float:  # parcat's evaluation episodes of this seed
        total = 0.0
        for episode in range(EVAL_EPISODES):
            obs, _ = eval_env.reset(seed=derive_seed(seed, EVAL_STREAM, episode))
            done = False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = eval_env.step(int(action))
                total, done = total + float(reward), terminated or truncated
        return total / EVAL_EPISODES

    class Evaluate(BaseCallback):
        def _on_training_start(self) -> None:
            self.began = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                mean = greedy_mean(self.model)
                evaluations.append((time.perf_counter() - self.began, self.num_timesteps,
                                    mean))
            return True

    began = time.perf_counter()
    model = DQN("MlpPolicy", gymnasium.make("CartPole-v1"), seed=seed, verbose=0,
                policy_kwargs={"net_arch": [256, 256]}, **RL_ZOO)
    model.learn(total_timesteps=total_steps, callback=Evaluate())
    return {"evaluations": evaluations, "wall_s": time.perf_counter() - began}


def sb3_in_a_process(seed: int, total_steps: int) -> dict[str, Any]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, __file__, "--sb3-seed", str(seed), "--total-steps",
                           str(total_steps)], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"the SB3 run exited {done.returncode}:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def time_to_target(evaluations: list[tuple[float, int, float]]) -> tuple[float, int | None]:
    """(seconds, env steps) at the first evaluation reaching :data:`TARGET` (inf: never)."""
    for seconds, steps, mean in evaluations:
        if mean >= TARGET:
            return seconds, steps
    return math.inf, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--total-steps", type=int, default=50_000)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "cartpole-vs-sb3")
    parser.add_argument("--sb3-seed", type=int, help=argparse.SUPPRESS)  # the worker's
    args = parser.parse_args()
    if args.sb3_seed is not None:
        print(json.dumps(sb3_run(args.sb3_seed, args.total_steps)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"load before: {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    print("| learner | seed | time to 475 s | at env steps | best eval | run wall s |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    medians = {}
    for name, run in (("parcat dqn", lambda s: parcat_run(s, args.total_steps, args.out)),
                      ("sb3 dqn", lambda s: sb3_in_a_process(s, args.total_steps))):
        times = []
        for seed in args.seeds:
            result = run(seed)
            seconds, steps = time_to_target(result["evaluations"])
            best = max((mean for *_, mean in result["evaluations"]), default=math.nan)
            times.append(seconds)
            shown = "never" if math.isinf(seconds) else f"{seconds:.1f}"
            print(f"| {name} | {seed} | {shown} | {steps or '-'} | {best:.1f} | "
                  f"{result['wall_s']:.1f} |", flush=True)
        medians[name] = statistics.median(times)
    ours, theirs = medians["parcat dqn"], medians["sb3 dqn"]
    verdict = (f"parcat takes {ours / theirs:.2f}x (target <= 0.5x)" if math.isfinite(theirs)
               else "SB3's median seed never reached it: no ratio")
    print(f"median time to {TARGET:g}: parcat {ours:.1f} s, SB3 {theirs:.1f} s: {verdict}")
    print(f"load after: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
