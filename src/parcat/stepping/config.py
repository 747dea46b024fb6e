"""The agent-level configuration that travels to episode workers (small and picklable)."""

from __future__ import annotations

from dataclasses import dataclass

from parcat.core.trace import Tracer
from parcat.stepping.base import InlineStepper, Stepper
from parcat.stepping.strategy import PolicyStrategy
from parcat.stepping.thread import ThreadStepper


@dataclass(frozen=True)
class StepperConfig:
    """How each episode steps its agents; built into a :class:`Stepper` where it runs."""

    strategy: PolicyStrategy = PolicyStrategy.INLINE
    """Resolved strategy (never ``auto``)."""
    workers: int = 0
    """Policy workers (processes or threads) besides the episode's own process."""
    spin: bool = True
    action_timeout_s: float | None = None
    """Late actions are replaced by the default action after this long."""
    start_method: str | None = None
    blas_threads: int = 1
    retries: int = 0
    """Times an episode is played again when one of its policy workers was lost, and an
    async policy's call is tried again after a transient error."""
    lockstep: int = 1
    """Episodes a runner plays side by side, one policy call per step for all of them
    (in lockstep; inline agents only)."""

    def make_stepper(self, tracer: Tracer | None = None) -> Stepper:
        """Build the stepper this configuration describes."""
        strategy = self.strategy
        if strategy is PolicyStrategy.PROCESS and self.workers > 0:
            from parcat.stepping.process import ProcessStepper

            return ProcessStepper(self.workers, spin=self.spin,
                                  action_timeout_s=self.action_timeout_s,
                                  start_method=self.start_method,
                                  blas_threads=self.blas_threads, tracer=tracer,
                                  retries=self.retries)
        if strategy is PolicyStrategy.THREAD and self.workers > 0:
            return ThreadStepper(self.workers, self.action_timeout_s, self.retries)
        # batch too: inline steps share a stateless policy's calls
        return InlineStepper(self.action_timeout_s, self.retries)
