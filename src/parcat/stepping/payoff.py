"""Whether handing agents to policy workers still pays, judged from what it cost.

Each step of :class:`~parcat.stepping.process.ProcessStepper` takes some wall time; had
every agent stepped inline, the step would have taken about the local agents' wall time
plus the CPU time the workers spent on theirs (each worker reports it with its result),
stretched as this process's own CPU time is stretched into wall time (on a loaded machine
a second of CPU takes longer than a second here, for the workers' agents too). On a
machine where the workers must wait for a core, or with policies too quick for a
handoff, the first exceeds the second: :class:`Payoff` sums both over windows of steps
and says when a whole window was lost; :mod:`parcat.stepping.fallback` then moves the
workers' agents here.
"""

from __future__ import annotations

CHECK_STEPS = 128
"""Steps in one window of the comparison."""
PAYOFF_RATIO = 1.0
"""Fall back when a window's wall time exceeds this many times its inline estimate."""
MAX_STRETCH = 10.0
"""The most the inline estimate stretches CPU time into wall time."""


class Payoff:
    """Sums a window's wall time and inline estimate; says when the window was lost.

    Args:
        check_steps: Steps in one window.
        ratio: The window is lost when its wall time exceeds ``ratio`` times the inline
            estimate (0 forces a fallback at the first check: tests).
    """

    def __init__(self, check_steps: int = CHECK_STEPS, ratio: float = PAYOFF_RATIO) -> None:
        if check_steps < 1 or ratio < 0:
            raise ValueError("check_steps must be >= 1 and ratio >= 0")
        self.check_steps = check_steps
        self.ratio = ratio
        self._restart()
        self.verdict = ""
        """Why the last lost window was lost (for the note)."""

    def add(self, wall_s: float, local_wall_s: float, local_cpu_s: float,
            worker_cpu_s: float) -> bool:
        """Count one step; True when it closes a lost window.

        Args:
            wall_s: The step's wall time.
            local_wall_s: Wall time of the agents stepped here.
            local_cpu_s: CPU time of the agents stepped here.
            worker_cpu_s: CPU time the workers reported for theirs.
        """
        self.steps += 1
        self.wall_s += wall_s
        self.local_wall_s += local_wall_s
        self.local_cpu_s += local_cpu_s
        self.worker_cpu_s += worker_cpu_s
        if self.steps < self.check_steps:
            return False
        stretch = 1.0
        if self.local_cpu_s > 0:
            stretch = min(MAX_STRETCH, max(1.0, self.local_wall_s / self.local_cpu_s))
        inline_s = self.local_wall_s + stretch * self.worker_cpu_s
        lost = self.wall_s > self.ratio * inline_s
        if lost:
            n = self.steps
            self.verdict = (f"{self.wall_s / n * 1e3:.3f} ms a step with policy workers vs "
                            f"{inline_s / n * 1e3:.3f} ms estimated inline over {n} steps")
        self._restart()
        return lost

    def _restart(self) -> None:
        self.steps = 0
        self.wall_s = self.local_wall_s = self.local_cpu_s = self.worker_cpu_s = 0.0
