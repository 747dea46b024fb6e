"""How long a waiting side of a handoff spins before it parks, learned from the answers.

A spin pays only while the spinner has a core of its own and the answer is about to come;
otherwise it takes the core from someone, often the very process whose answer is awaited.
:class:`SpinBudget` keeps an estimate of the other side's usual answer time (biased towards
its quick answers) and spins up to a small multiple of it. Late answers and spins that lost
their core shrink the budget towards zero (park at once); answers within reach grow it back.
The class is pure (fed wait times, never reading a clock), so its rules are tested directly.
"""

from __future__ import annotations

MULTIPLE = 3.0  # spin up to this many times the usual answer time
FLOOR_S = 100e-6
"""The shortest reach: parking and waking costs tens of microseconds, so an answer within
this counts as quick however it was seen."""
FALL = 0.5
"""Weight of an answer quicker than the estimate (the estimate follows quick answers fast)."""
RISE = 1 / 16  # weight of an answer slower than the estimate (one slow answer barely moves it)
GROW = 1 / 8  # scale added by an answer within reach
SHRINK = 4.0  # a miss divides the scale by this
MIN_SCALE = 1 / 64  # below this scale the budget is zero: park at once
CONTESTED_CPU = 0.75  # a spin that got less CPU time than this share of its wall time lost its core
CONTESTED_MIN_S = 200e-6
"""Spins shorter than this say nothing about contention (clock granularity, noise)."""


def contested(spun_s: float, cpu_s: float) -> bool:
    """Whether a spin of ``spun_s`` wall seconds that used ``cpu_s`` of CPU lost its core."""
    return spun_s >= CONTESTED_MIN_S and cpu_s < CONTESTED_CPU * spun_s


class SpinBudget:
    """The spin budget of one waiting side of one handoff; never more than ``ceiling_s``."""

    def __init__(self, ceiling_s: float, multiple: float = MULTIPLE,
                 floor_s: float = FLOOR_S) -> None:
        if ceiling_s < 0 or multiple <= 0 or floor_s < 0:
            raise ValueError("ceiling_s and floor_s must be >= 0, multiple > 0")
        self.ceiling_s = ceiling_s
        self.multiple = multiple
        self.floor_s = min(floor_s, ceiling_s)
        self.typical_s: float | None = None
        """Running estimate of the usual answer time (``None`` before the first answer)."""
        self.scale = 1.0
        """Share of the reach spun for, in [0, 1]."""
        self.hits = 0
        self.misses = 0

    @property
    def reach_s(self) -> float:
        """How long a spin would need to see a usual answer (bounded by the ceiling)."""
        if self.typical_s is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, self.multiple * self.typical_s))

    @property
    def budget_s(self) -> float:
        """How long to spin on the next wait before parking (0: park at once)."""
        return self.reach_s * self.scale

    def observe(self, waited_s: float, contested: bool = False) -> None:
        """Learn from an answer that came ``waited_s`` after the wait began (``contested``:
        the wait's spin lost its core to another process)."""
        waited_s = max(0.0, waited_s)
        if waited_s <= self.reach_s and not contested:
            self.hits += 1
            self.scale = min(1.0, self.scale + GROW)
        else:
            self.misses += 1
            self.scale /= SHRINK
            if self.scale < MIN_SCALE:
                self.scale = 0.0
        typical = self.typical_s
        if typical is None:
            self.typical_s = waited_s
        else:
            weight = FALL if waited_s < typical else RISE
            self.typical_s = typical + weight * (waited_s - typical)
