"""One training round: every learner trains ``train_steps`` times, on threads if asked.

The trainer's sync mode and the async learner worker both train through
:func:`train_each`, so the two modes share the per-learner loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from parcat.train.learner import Learner


def train_each(
    learners: Mapping[str, Learner],
    train_steps: int,
    pool: ThreadPoolExecutor | None = None,
    prepare: Callable[[str, Learner], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Train every learner; return each one's metrics as last reported (``loss`` NaN if it
    reported none).

    A learner may have nothing to do on some calls (``{}``: PPO after its one update of
    the round, DQN before its buffer is warm); each metric keeps the value of the last
    update that reported it.

    Args:
        learners: The learners by name.
        train_steps: Gradient updates per learner.
        pool: Train the learners at once on these threads (``--parallel-training``).
        prepare: Called with each learner before it trains (e.g. to add new transitions),
            on the same thread.
    """

    def one(name: str) -> dict[str, float]:
        learner = learners[name]
        if prepare is not None:
            prepare(name, learner)
        metrics: dict[str, float] = {"loss": math.nan}
        for _ in range(train_steps):
            metrics.update({k: float(v) for k, v in learner.train_step().items()})
        return metrics

    names = list(learners)
    results = list(pool.map(one, names)) if pool is not None else [one(n) for n in names]
    return dict(zip(names, results, strict=True))


def losses_of(metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Each learner's ``loss`` from :func:`train_each`'s metrics."""
    return {name: float(m.get("loss", math.nan)) for name, m in metrics.items()}
