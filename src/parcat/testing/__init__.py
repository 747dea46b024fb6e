"""Conformance checkers for what users write: environments, policies and learners.

The checks live in :mod:`parcat.testing.checks.checks`; this package is their public name, as
PettingZoo's ``pettingzoo.test`` is.
"""

from __future__ import annotations

from parcat.testing.checks import check_env, check_learner, check_policy

__all__ = ["check_env", "check_learner", "check_policy"]
