"""Conformance checkers for what users write: environments, policies and learners (the
public name of :mod:`parcat.testing.checks`, as PettingZoo's ``pettingzoo.test``)."""

from __future__ import annotations

from parcat.testing.checks import check_env, check_learner, check_policy

__all__ = ["check_env", "check_learner", "check_policy"]
