"""A policy from outside parcat (for ``isolation.py``): parcat's random policy, reached
through a ``module:Class`` reference, so parcat runs it isolated in a worker process."""

from __future__ import annotations

from parcat.policies.builtin import RandomPolicy


class Random(RandomPolicy):
    """Exactly ``random``; only where it comes from differs."""
