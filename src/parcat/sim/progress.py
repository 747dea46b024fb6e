"""What a running simulation reports about once a second (the CLI's live line)."""

from __future__ import annotations

from dataclasses import dataclass

PROGRESS_EVERY_S = 1.0


@dataclass(frozen=True)
class SimProgress:
    """A snapshot of a running simulation."""

    step: int
    """Environment steps done."""
    iters: int
    """Environment steps to do."""
    episode: int
    """The episode running now."""
    elapsed_s: float
    """Wall time since the environment started."""

    @property
    def rate_hz(self) -> float:
        """Environment steps per wall-clock second so far."""
        return self.step / self.elapsed_s if self.elapsed_s > 0 else 0.0
