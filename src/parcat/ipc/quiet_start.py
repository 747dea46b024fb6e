"""Imported by the fork server alone (last in its preload).

A worker whose start its parent cut off (the parent gone before it sent the descriptors)
ends without a traceback. The fork server ignores SIGTERM, as it ignores Ctrl-C: a SIGTERM
to the process group must not end it while the parent needs it (workers' exit statuses
come through it); it ends when the parent closes their pipe. Workers restore SIGTERM first.
"""

from __future__ import annotations

import signal
import sys
from types import TracebackType

_default = sys.excepthook


def _quiet_when_the_parent_left(kind: type[BaseException], value: BaseException,
                                traceback: TracebackType | None) -> None:
    if issubclass(kind, EOFError | ConnectionError):
        return
    _default(kind, value, traceback)


sys.excepthook = _quiet_when_the_parent_left
signal.signal(signal.SIGTERM, signal.SIG_IGN)
