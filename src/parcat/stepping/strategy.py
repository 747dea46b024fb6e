"""The names of the agent-level strategies (imports nothing, so the planner stays light)."""

from __future__ import annotations

import enum


class PolicyStrategy(str, enum.Enum):
    """How an episode steps its agents' policies (``--policy-strategy``)."""

    AUTO = "auto"
    INLINE = "inline"
    THREAD = "thread"
    PROCESS = "process"
    BATCH = "batch"
