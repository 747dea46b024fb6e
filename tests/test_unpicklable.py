"""A mission or policy built in Python that cannot be pickled runs inline, with one warning
naming it, instead of stopping the run."""

from __future__ import annotations

import threading

import pytest

from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.eval.report import strip_timings
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import PolicySpec, parse_policy_spec
from tests.fakes import StatefulPolicy, scripted_mission


class TaggedPolicy(StatefulPolicy):
    """A policy handed an object at construction, as users hand theirs a model."""

    def __init__(self, spec: object, tag: object = None) -> None:
        super().__init__(spec)  # type: ignore[arg-type]
        self.tag = tag


def test_an_unpicklable_policy_argument_runs_inline_with_one_warning() -> None:
    lock = threading.Lock()  # a typical unpicklable object handed to a policy
    policy = PolicySpec("tests.test_unpicklable:TaggedPolicy", {"tag": lock})
    config = EvalConfig((scripted_mission(),), (policy,), episodes=4, seed=1)
    warned: list[str] = []
    with pytest.warns(RuntimeWarning) as caught:
        report = evaluate(config, RunOptions(jobs=2, parallel_policy=True),
                          on_warning=warned.append)
    assert len(caught) == 1 and warned == [str(caught[0].message)]
    assert warned[0].startswith("policy 'tests.test_unpicklable:TaggedPolicy,tag=<unlocked "
                                "_thread.lock")
    assert "cannot be sent to worker processes (TypeError: cannot pickle '_thread.lock' " \
        "object): running every episode inline in this process" in warned[0]
    assert report.status == "complete" and report.plan is not None
    assert report.plan.executor.value == "inline"


def test_an_unpicklable_mission_parameter_runs_inline_and_gives_the_same_numbers() -> None:
    mission = scripted_mission(tag=threading.Lock())
    plain = scripted_mission()
    policies = (parse_policy_spec("random"),)
    with pytest.warns(RuntimeWarning, match="mission 'scripted' cannot be sent to worker"):
        report = evaluate(EvalConfig((mission,), policies, 3, 2), RunOptions(jobs=2))
    reference = evaluate(EvalConfig((plain,), policies, 3, 2), RunOptions(jobs=1))
    episodes = [strip_timings(e.to_dict()) for e in report.episodes]
    assert episodes == [strip_timings(e.to_dict()) for e in reference.episodes]


def test_picklable_runs_warn_nothing(recwarn: pytest.WarningsRecorder) -> None:
    config = EvalConfig((scripted_mission(),), (parse_policy_spec("random"),), 2, 0)
    evaluate(config, RunOptions(jobs=1))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
