"""Which policy plays which agent: proportional to weights, deterministic from a seed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def assign_policies(weights: Sequence[float], num_agents: int, seed: int) -> list[int]:
    """Give each of ``num_agents`` agents the index of a policy.

    Each policy gets ``floor(num_agents * share)`` agents; the remaining seats are drawn
    without replacement in proportion to what each share lost to rounding, so on average
    every policy gets exactly its share. Seats are then shuffled.
    """
    if not weights:
        raise ValueError("at least one policy is needed")
    rng = np.random.default_rng(seed)
    w = np.asarray(weights, dtype=float)
    exact = num_agents * (w / w.sum())  # shares first: num_agents * 1e308 overflows
    counts = np.floor(exact).astype(int)
    missing = num_agents - int(counts.sum())
    if missing:
        remainder = exact - counts
        chosen = rng.choice(len(w), size=missing, replace=False, p=remainder / remainder.sum())
        counts[chosen] += 1
    seats = np.repeat(np.arange(len(w)), counts)
    if len(w) > 1:
        rng.shuffle(seats)
    return [int(i) for i in seats]
