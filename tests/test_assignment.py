"""Policy assignment: proportional, deterministic, every policy plays every role."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from parcat.policies.assignment import assign_policies


@given(
    st.lists(st.floats(0.1, 10.0), min_size=1, max_size=5),
    st.integers(1, 64),
    st.integers(0, 2**32 - 1),
)
def test_counts_are_the_rounded_shares(weights: list[float], agents: int, seed: int) -> None:
    seats = assign_policies(weights, agents, seed)
    assert len(seats) == agents
    counts = Counter(seats)
    total = sum(weights)
    for i, w in enumerate(weights):
        exact = agents * w / total
        assert int(exact) <= counts.get(i, 0) <= int(exact) + 1
    assert seats == assign_policies(weights, agents, seed)


def test_one_agent_two_policies_alternate_by_seed() -> None:
    counts = Counter(assign_policies([1, 1], 1, seed)[0] for seed in range(2000))
    assert abs(counts[0] - 1000) < 120


def test_weights_set_proportions() -> None:
    assert sorted(assign_policies([3, 1], 8, 0)) == [0] * 6 + [1] * 2
