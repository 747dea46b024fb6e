"""Agent-level strategies: where each policy step of an episode runs.

Below the episode path (:mod:`parcat.episode.rollout` uses a :class:`~parcat.stepping.base.Stepper`)
and above :mod:`parcat.ipc`; the executors configure them with
:class:`~parcat.stepping.config.StepperConfig`.
"""
