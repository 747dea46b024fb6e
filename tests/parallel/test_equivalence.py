"""The central test: every executor, strategy and --jobs gives the sequential results."""

from __future__ import annotations

import pytest

from parcat.eval.evaluate import EvalReport, evaluate, make_config
from parcat.eval.report import strip_timings
from parcat.parallel.planner import ExecutorKind, PolicyStrategy
from parcat.parallel.run_options import RunOptions

# stateful, seeded, scripted and CPU-heavy policies mixed over Discrete and Box actions
POLICIES = ["greedy", "random@2", "tests.fakes:StatefulPolicy", "mlp,width=32"]
MISSIONS = ["harvest", "evade"]
OVERRIDES = {"max_steps": 25}


def run(episodes: int, options: RunOptions) -> EvalReport:
    config = make_config(MISSIONS, POLICIES, episodes=episodes, seed=11, overrides=OVERRIDES)
    return evaluate(config, options)


def comparable(report: EvalReport) -> dict[str, object]:
    document = strip_timings(report.to_document())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def sequential() -> dict[int, dict[str, object]]:
    one_at_a_time = RunOptions(jobs=1, executor=ExecutorKind.INLINE, lockstep=1)
    return {n: comparable(run(n, one_at_a_time)) for n in (1, 3)}


@pytest.mark.parametrize("jobs", [1, 2, 4])
@pytest.mark.parametrize("strategy", [s for s in PolicyStrategy if s is not PolicyStrategy.AUTO])
@pytest.mark.parametrize("executor", [ExecutorKind.INLINE, ExecutorKind.THREAD,
                                      ExecutorKind.PROCESS])
@pytest.mark.parametrize("episodes", [1, 3])
def test_same_results_as_sequential(
    sequential: dict[int, dict[str, object]], executor: ExecutorKind, strategy: PolicyStrategy,
    jobs: int, episodes: int,
) -> None:
    options = RunOptions(jobs=jobs, executor=executor, parallel_policy=True,
                         policy_strategy=strategy)
    report = run(episodes, options)
    assert report.status == "complete", [e.error for e in report.failed]
    assert comparable(report) == sequential[episodes]


@pytest.mark.parametrize("lockstep", [1, 7, 64])
@pytest.mark.parametrize(("jobs", "executor"), [(1, ExecutorKind.INLINE),
                                                (2, ExecutorKind.PROCESS)])
def test_episodes_in_lockstep_give_the_sequential_results(
    sequential: dict[int, dict[str, object]], jobs: int, executor: ExecutorKind, lockstep: int,
) -> None:
    report = run(3, RunOptions(jobs=jobs, executor=executor, lockstep=lockstep))
    assert report.plan is not None and report.plan.lockstep == lockstep
    assert report.status == "complete", [e.error for e in report.failed]
    assert comparable(report) == sequential[3]


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_start_methods_and_auto_agree(
    sequential: dict[int, dict[str, object]], start_method: str
) -> None:
    options = RunOptions(jobs=2, executor=ExecutorKind.PROCESS, parallel_policy=True,
                         start_method=start_method)
    assert comparable(run(3, options)) == sequential[3]
    agents = RunOptions(jobs=4, parallel_policy=True, policy_strategy=PolicyStrategy.PROCESS,
                        start_method=start_method)
    report = run(1, agents)
    assert report.plan is not None and report.plan.policy_workers >= 1
    assert comparable(report) == sequential[1]


def test_agent_level_process_plan_really_uses_policy_workers() -> None:
    options = RunOptions(jobs=4, parallel_policy=True, policy_strategy=PolicyStrategy.PROCESS)
    report = run(1, options)
    assert report.plan is not None
    assert (report.plan.episode_workers, report.plan.policy_workers) == (2, 1)
