"""Policies: the protocol, the built-ins, and loading them from specs and checkpoints."""

from __future__ import annotations

from parcat.policies.base import AgentSpec, BatchPolicy, Policy

__all__ = ["AgentSpec", "BatchPolicy", "Policy"]
