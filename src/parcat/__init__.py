"""parcat: parallel evaluation, training and simulation for multi-agent RL."""

from __future__ import annotations

from parcat.core.errors import TransientError

__version__ = "0.1.0"
__all__ = ["TransientError", "__version__"]
