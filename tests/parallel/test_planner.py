"""The planner as a pure function: never over budget, sane from 1 to 128 CPUs."""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parcat.parallel.planner import BatchCost, ExecutorKind, PolicyStrategy, Workload, make_plan

strategies = st.sampled_from(list(PolicyStrategy))
executors = st.sampled_from([ExecutorKind.AUTO, ExecutorKind.INLINE, ExecutorKind.PROCESS,
                             ExecutorKind.THREAD])


@given(
    jobs=st.integers(1, 128), cpus=st.integers(1, 128), gpus=st.integers(0, 8),
    tasks=st.integers(0, 10_000), agents=st.integers(1, 64), parallel=st.booleans(),
    strategy=strategies, executor=executors,
    step_s=st.one_of(st.none(), st.floats(1e-7, 1.0)),
    cap=st.one_of(st.none(), st.integers(1, 256)),
)
def test_plan_never_exceeds_jobs_and_is_sane(
    jobs: int, cpus: int, gpus: int, tasks: int, agents: int, parallel: bool,
    strategy: PolicyStrategy, executor: ExecutorKind, step_s: float | None, cap: int | None,
) -> None:
    workload = Workload(tasks, agents, parallel, strategy, executor, step_s, max_processes=cap)
    plan = make_plan(jobs, cpus, gpus, workload)
    assert 1 <= plan.busy_processes <= min(jobs, cap or jobs)
    assert 1 <= plan.episode_workers <= max(1, min(jobs, tasks))
    assert plan.policy_workers <= agents - 1 or plan.policy_workers == 0
    assert plan.strategy is not PolicyStrategy.AUTO
    assert plan.blas_threads >= 1
    assert plan.blas_threads * plan.busy_processes <= max(jobs, plan.busy_processes)
    assert plan.spin == (plan.busy_processes <= cpus)
    assert len(plan.gpus) == (plan.episode_workers if gpus else 0)
    assert all(0 <= int(g) < gpus for g in plan.gpus)
    assert plan.reasons


def test_64_cpus_many_episodes_goes_episode_level() -> None:
    plan = make_plan(64, 64, 0, Workload(1000, 8, True, PolicyStrategy.PROCESS))
    assert (plan.executor, plan.episode_workers, plan.policy_workers) == (
        ExecutorKind.PROCESS, 64, 0)
    assert plan.spin and plan.blas_threads == 1


def test_64_cpus_few_episodes_fills_agents() -> None:
    plan = make_plan(64, 64, 4, Workload(8, 16, True, PolicyStrategy.PROCESS))
    assert (plan.episode_workers, plan.policy_workers) == (8, 7)
    assert plan.busy_processes == 64
    assert plan.gpus == ("0", "1", "2", "3", "0", "1", "2", "3")


def test_jobs_larger_than_work_is_trimmed_and_said() -> None:
    plan = make_plan(16, 2, 0, Workload(3, 1, False))
    assert plan.episode_workers == 3
    assert any("more than the 3 episodes" in r for r in plan.reasons)
    assert not plan.spin


def test_auto_picks_process_only_for_expensive_steps() -> None:
    cheap = make_plan(2, 2, 0, Workload(1, 2, True, PolicyStrategy.AUTO, step_s=2e-6))
    assert cheap.strategy is PolicyStrategy.INLINE
    costly = make_plan(2, 2, 0, Workload(1, 2, True, PolicyStrategy.AUTO, step_s=2e-3))
    assert (costly.strategy, costly.policy_workers) == (PolicyStrategy.PROCESS, 1)
    shared = make_plan(2, 2, 0, Workload(4, 8, True, PolicyStrategy.AUTO, step_s=1e-5,
                                         batchable=True))
    assert shared.strategy is PolicyStrategy.BATCH


def test_an_auto_plan_uses_only_the_cpus_other_processes_leave_free() -> None:
    busy = make_plan(2, 2, 0, Workload(64, 4, False, free_cpus=1))
    assert (busy.executor, busy.episode_workers) == (ExecutorKind.INLINE, 1)
    assert "1 of the 2 CPU(s) are busy with other processes: --jobs 2 trimmed to 1" \
        in busy.reasons
    # agent-level parallelism has no spare job either: agents are stepped inline
    agents = make_plan(2, 2, 0, Workload(1, 2, True, PolicyStrategy.AUTO, step_s=2e-3,
                                         free_cpus=1))
    assert agents.busy_processes == 1 and agents.strategy is PolicyStrategy.INLINE
    big = make_plan(64, 64, 0, Workload(1000, 4, False, free_cpus=40))
    assert big.episode_workers == 40
    # an explicit executor is obeyed as asked
    asked = make_plan(2, 2, 0, Workload(64, 4, False, executor=ExecutorKind.PROCESS,
                                        free_cpus=1))
    assert (asked.executor, asked.episode_workers) == (ExecutorKind.PROCESS, 2)


def test_free_cpus_sees_a_busy_neighbour(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from parcat.core.resources import FREE_CPUS_VARIABLE, free_cpus

    monkeypatch.delenv(FREE_CPUS_VARIABLE, raising=False)
    quiet = free_cpus(2)
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"])
            for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        assert free_cpus(2) == 1  # every core has a busy neighbour: one left, never 0
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    assert 1 <= quiet <= 2
    monkeypatch.setenv(FREE_CPUS_VARIABLE, "1")
    assert free_cpus(2) == 1


def test_auto_steps_agents_inline_when_the_run_cannot_pay_for_policy_workers() -> None:
    # 0.2 ms steps, 2 agents, one 1,000-step episode: ~0.2 s to save, less than starting
    short = make_plan(2, 2, 0, Workload(1, 2, True, PolicyStrategy.AUTO, step_s=2e-4,
                                        steps=1000))
    assert short.strategy is PolicyStrategy.INLINE
    assert any("less than twice" in r for r in short.reasons)
    # 2 ms steps: ~2 s to save
    long = make_plan(2, 2, 0, Workload(1, 2, True, PolicyStrategy.AUTO, step_s=2e-3,
                                       steps=1000))
    assert long.strategy is PolicyStrategy.PROCESS and long.policy_workers == 1
    # episodes of the cheap policy add up: four of them can pay (~0.8 s to save)
    many = make_plan(8, 8, 0, Workload(4, 2, True, PolicyStrategy.AUTO, step_s=2e-4,
                                       steps=1000))
    assert many.strategy is PolicyStrategy.PROCESS
    unknown = make_plan(2, 2, 0, Workload(1, 2, True, PolicyStrategy.AUTO, step_s=2e-4))
    assert unknown.strategy is PolicyStrategy.PROCESS  # no step count: the step cost decides


@pytest.mark.parametrize(("fixed_s", "row_s", "lockstep"), [
    (1e-4, 1e-8, 64),    # a call's own cost dominates: every episode the lane may take
    (1e-4, 3e-6, 42),    # ceil((100 + 50 us) / (5% x 3 us x 24 rows))
    (0.0, 1e-3, 1),      # rows dominate (a slow network): batching gains nothing
])
def test_lockstep_plays_as_many_episodes_as_the_measured_batch_cost_asks(
        fixed_s: float, row_s: float, lockstep: int) -> None:
    rows = (24, 24 * 16)
    cost = BatchCost(rows, (fixed_s + rows[0] * row_s, fixed_s + rows[1] * row_s))
    for cpus in (1, 2, 64):
        plan = make_plan(cpus, cpus, 0, Workload(64 * cpus, 24, batchable=True, batch=cost))
        assert plan.lockstep == lockstep
        if lockstep > 1:
            assert any("measured at" in reason for reason in plan.reasons)


def test_a_batch_cost_s_line_never_goes_below_zero() -> None:
    assert BatchCost((24, 384), (2e-3, 1e-3)).fit() == (2e-3, 0.0)  # noise tilted it
    assert BatchCost((24, 384), (1e-3, 1e-2)).fit() == pytest.approx((4e-4, 2.5e-5))


@pytest.mark.parametrize("cpus", [2, 8, 64])
def test_served_stateless_policies_play_in_as_few_lanes_as_hold_every_episode(cpus: int) -> None:
    # each lane's step is one request whatever its rows: more lanes only split the batches
    served = Workload(16, 4, batchable=True, served=True, steps=200)
    plan = make_plan(cpus, cpus, 0, served)
    assert (plan.executor, plan.episode_workers, plan.lockstep) == (ExecutorKind.INLINE, 1, 16)
    assert any("served" in reason for reason in plan.reasons)
    # past the 64 episodes a lane plays in lockstep, more lanes, each full
    many = make_plan(cpus, cpus, 0, replace(served, tasks=1000))
    lanes = min(cpus, 16)  # ceil(1000 / 64)
    assert many.episode_workers == lanes and many.lockstep == min(64, math.ceil(1000 / lanes))
    assert make_plan(cpus, cpus, 0, replace(served, tasks=130)).episode_workers == \
        min(cpus, 3)


@pytest.mark.parametrize("cpus", [2, 8, 64])
@pytest.mark.parametrize("asked", [
    {"lockstep": 4}, {"executor": ExecutorKind.PROCESS}, {"isolate": True},
    {"jobs_given": True}, {"action_deadline": True},
    {"parallel_policy": True, "step_s": 6e-4, "step_cpu_s": 5e-4},
    {"served": False},  # stateful served policies, or policies in this process: lanes pay
])
def test_served_policies_keep_their_lanes_where_the_user_asked_or_lockstep_cannot_batch(
        cpus: int, asked: dict[str, object]) -> None:
    workload = replace(Workload(16, 4, batchable=True, served=True, steps=200), **asked)
    plan = make_plan(cpus, cpus, 0, workload)
    assert plan.episode_workers == min(cpus, 16)
    assert not any("served" in reason for reason in plan.reasons)


@given(st.integers(1, 64), st.integers(1, 5000))
def test_a_served_plan_holds_every_episode_in_lockstep_up_to_its_lanes(
        cpus: int, tasks: int) -> None:
    plan = make_plan(cpus, cpus, 0, Workload(tasks, 4, batchable=True, served=True))
    assert plan.episode_workers * plan.lockstep >= min(tasks, cpus * 64)
