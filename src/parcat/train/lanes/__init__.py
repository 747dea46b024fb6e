"""Where a share of the training environments steps: one lane per backend, one interface.

:class:`~parcat.train.lanes.base.EnvLane` is what :class:`~parcat.train.vecenv.VecEnv`
sees; ``local`` steps in the trainer's process, ``process`` in a worker process through
shared memory, ``ray`` in a Ray actor. Every lane runs the same
:class:`~parcat.train.envslice.EnvSlice`, so every layout collects the same data.
"""
