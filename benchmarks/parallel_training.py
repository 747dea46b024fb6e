"""--parallel-training: threads vs one agent after another, for small and large networks.

    python benchmarks/parallel_training.py

Each agent's DQN trains ``STEPS`` updates on its own warm buffer. Numpy releases the GIL
inside its kernels, so threads help once the matrices are large; the BLAS pools are
limited to one thread per update, so two agents can use two cores.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from parcat.train.dqn import DQNConfig, DQNLearner
from parcat.train.learner import Transitions

STEPS = 100
AGENTS = 2


def make(width: int, seed: int) -> DQNLearner:
    config = DQNConfig(width=width, depth=2, batch_size=128, learning_starts=128,
                       buffer_size=4096, seed=seed)
    learner = DQNLearner(64, 5, config)
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(2048, 64)).astype(np.float32)
    rewards = rng.normal(size=2048).astype(np.float32)
    learner.observe(Transitions(obs, rng.integers(5, size=2048), rewards, obs,
                                np.zeros(2048, bool)))
    return learner


def train(learner: DQNLearner) -> None:
    for _ in range(STEPS):
        learner.train_step()


def main() -> None:
    print(f"{AGENTS} agents x {STEPS} updates, batch 128, medians of 5 interleaved repeats")
    for width in (64, 256, 1024):
        learners = [make(width, s) for s in range(AGENTS)]
        one_by_one, threads = [], []
        pool = ThreadPoolExecutor(AGENTS)
        for _ in range(5):
            start = time.perf_counter()
            for learner in learners:
                train(learner)
            one_by_one.append(time.perf_counter() - start)
            start = time.perf_counter()
            list(pool.map(train, learners))
            threads.append(time.perf_counter() - start)
        pool.shutdown()
        a, b = statistics.median(one_by_one), statistics.median(threads)
        print(f"  width {width:5d}: one by one {a * 1e3:8.1f} ms, threads {b * 1e3:8.1f} ms, "
              f"speedup {a / b:5.2f}x")


if __name__ == "__main__":
    main()
