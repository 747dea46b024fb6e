"""Training for ``parcat train``: independent learners, one per agent."""

from __future__ import annotations

from parcat.train.buffer import ReplayBuffer
from parcat.train.dqn import DQNConfig, DQNLearner
from parcat.train.learner import Learner, Transitions, decode_rng, encode_rng

__all__ = ["DQNConfig", "DQNLearner", "Learner", "ReplayBuffer", "Transitions", "decode_rng",
           "encode_rng"]
