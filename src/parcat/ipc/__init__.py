"""Processes and shared memory: the layer eval, train and sim all build their workers on.

Nothing here knows about missions, episodes, training or simulation, and nothing here
imports from them:

- :mod:`~parcat.ipc.process`: the one place worker processes are started, watched and
  stopped (:class:`~parcat.ipc.process.Worker`), and the worker side's set-up and
  error report (:class:`~parcat.ipc.process.ErrorReport`);
- :mod:`~parcat.ipc.layout`: every shared-memory header layout;
- :mod:`~parcat.ipc.shm`: named arrays in one shared-memory block, and value codecs;
- :mod:`~parcat.ipc.handoff`: the request/done handoff (spin, then park on the pipe);
- :mod:`~parcat.ipc.seqlock`: single-writer slots readers snapshot without waiting.
"""
