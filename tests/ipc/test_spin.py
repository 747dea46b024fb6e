"""The adaptive spin budget as a pure class: wait times in, budget out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parcat.ipc.spin import FLOOR_S, MULTIPLE, SpinBudget, contested

CEILING_S = 0.05


def fed(waits: list[float], contested_spins: bool = False) -> SpinBudget:
    budget = SpinBudget(CEILING_S)
    for waited in waits:
        budget.observe(waited, contested_spins)
    return budget


def test_before_any_answer_the_budget_is_the_ceiling() -> None:
    assert SpinBudget(CEILING_S).budget_s == CEILING_S


def test_steady_quick_answers_spin_a_small_multiple_of_them() -> None:
    budget = fed([400e-6] * 50)
    assert budget.typical_s == pytest.approx(400e-6)
    assert budget.budget_s == pytest.approx(MULTIPLE * 400e-6)
    assert budget.misses == 0


def test_very_quick_answers_keep_the_floor() -> None:
    assert fed([1e-6] * 50).budget_s == pytest.approx(FLOOR_S)


def test_answers_after_parking_shrink_the_budget_to_zero() -> None:
    # quick answers set the reach; then every answer comes a scheduler quantum later
    budget = fed([200e-6] * 20 + [8e-3] * 4)
    assert budget.budget_s == 0.0
    assert budget.misses == 4


def test_one_slow_answer_barely_moves_the_estimate() -> None:
    budget = fed([200e-6] * 20 + [20e-3])
    assert budget.typical_s is not None and budget.typical_s < 2e-3
    assert 0 < budget.budget_s < budget.reach_s


def test_quick_answers_grow_the_budget_back() -> None:
    budget = fed([200e-6] * 20 + [8e-3] * 4)
    for _ in range(8):
        budget.observe(150e-6)  # seen after parking, but within reach
    assert budget.budget_s == pytest.approx(budget.reach_s)
    assert budget.budget_s > 0


def test_spins_that_lost_their_core_shrink_the_budget_even_when_answered() -> None:
    assert fed([300e-6] * 20, contested_spins=True).budget_s == 0.0


def test_contested_needs_a_long_enough_spin_with_little_cpu() -> None:
    assert contested(1e-3, 0.5e-3)
    assert not contested(1e-3, 0.95e-3)
    assert not contested(50e-6, 0.0)  # too short to tell


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="multiple > 0"):
        SpinBudget(CEILING_S, multiple=0)


@given(st.lists(st.tuples(st.floats(0, 1.0), st.booleans()), max_size=200),
       st.floats(0, 0.1))
def test_the_budget_stays_between_zero_and_the_ceiling(
    waits: list[tuple[float, bool]], ceiling_s: float
) -> None:
    budget = SpinBudget(ceiling_s)
    for waited, lost_core in waits:
        budget.observe(waited, lost_core)
        assert 0.0 <= budget.budget_s <= ceiling_s
        assert 0.0 <= budget.scale <= 1.0
    assert budget.hits + budget.misses == len(waits)
