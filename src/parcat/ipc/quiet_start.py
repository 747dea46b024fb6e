"""Imported by the fork server alone (the last module of its preload): a worker whose
start its parent cut off (Ctrl-C or SIGTERM while the worker was being made) ends silently.

The fork server forks each worker and the child first receives its file descriptors from
the parent; when the parent is gone by then, that read raises ``EOFError`` (or a
``ConnectionError``), and the fork server's child reports it through ``sys.excepthook``
before exiting: a traceback in the user's terminal for a run that was stopped on purpose.
Any other error keeps its traceback.
"""

from __future__ import annotations

import sys
from types import TracebackType

_default = sys.excepthook


def _quiet_when_the_parent_left(kind: type[BaseException], value: BaseException,
                                traceback: TracebackType | None) -> None:
    if issubclass(kind, EOFError | ConnectionError):
        return
    _default(kind, value, traceback)


sys.excepthook = _quiet_when_the_parent_left
