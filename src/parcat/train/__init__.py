"""Training for ``parcat train``: independent learners (one per agent) or one shared."""

from __future__ import annotations

from parcat.train.buffer import ReplayBuffer
from parcat.train.dqn import DQNConfig, DQNLearner
from parcat.train.learner import Learner, Transitions, decode_rng, encode_rng
from parcat.train.ppo import PPOConfig, PPOLearner

__all__ = ["DQNConfig", "DQNLearner", "Learner", "PPOConfig", "PPOLearner", "ReplayBuffer",
           "Transitions", "decode_rng", "encode_rng"]
