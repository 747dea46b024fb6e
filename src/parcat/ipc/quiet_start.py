"""Imported by the fork server alone (the last module of its preload): a worker whose
start its parent cut off (Ctrl-C or SIGTERM while the worker was being made) ends silently.

The fork server forks each worker and the child first receives its file descriptors from
the parent; when the parent is gone by then, that read raises ``EOFError`` (or a
``ConnectionError``), and the fork server's child reports it through ``sys.excepthook``
before exiting: a traceback in the user's terminal for a run that was stopped on purpose.
Any other error keeps its traceback.

It also ignores SIGTERM, as it ignores Ctrl-C (and as multiprocessing's resource tracker
does): a SIGTERM to the whole process group must not take it down while the parent still
needs it, since a worker's exit status comes through it (without it, a live learner process
looks dead, exit code 255, and the final checkpoint goes unwritten). It ends when the parent
closes its end of their pipe, however the parent ends. Workers set their own SIGTERM
handler back to the default first thing (``_bootstrap`` in ``parcat.ipc.process``).
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
