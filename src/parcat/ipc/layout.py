"""Every shared-memory header layout, in one place: each block starts with
:data:`HEADER_SLOTS` ``int64`` slots; layouts sharing a block never share a slot (checked)."""

from __future__ import annotations

HEADER_SLOTS = 8  # ``int64`` slots at the start of every block


class HandoffSlots:
    """A request/done handoff between a parent and one worker (:mod:`parcat.ipc.handoff`)."""

    REQUEST = 0
    """Sequence number of the last request (the parent bumps it)."""
    DONE = 1
    """Sequence number of the last finished request (the worker sets it)."""
    WORKER_PARKED = 2
    """The worker stopped spinning and waits on its pipe: wake it with a message."""
    ERROR = 3
    """The last request failed; the error report waits on the pipe."""
    MAIN_PARKED = 4
    """The parent stopped spinning and waits on the pipe: tell it when done."""


class EnvCommandSlots:
    """What a training environment worker is asked to do (beside its handoff slots)."""

    CMD = 5
    """:data:`STEP` or :data:`RESET`."""
    STEP = 1
    RESET = 2


class SimSlots:
    """A parallel simulation's shared block (no handoff: every process runs on its clock)."""

    STOP = 0
    """Set by the parent: every process ends its loop."""
    STEP = 1
    """Environment steps done so far."""
    EPISODE = 2
    """The environment's current episode."""


def _slots(layout: type) -> set[int]:
    return {v for k, v in vars(layout).items() if k.isupper() and isinstance(v, int)}


def _check() -> None:
    command = {EnvCommandSlots.CMD}
    assert not command & _slots(HandoffSlots), "env command slots overlap the handoff's"
    for layout in (HandoffSlots, SimSlots):
        assert max(_slots(layout)) < HEADER_SLOTS, f"{layout.__name__} exceeds the header"
    assert max(command) < HEADER_SLOTS


_check()
