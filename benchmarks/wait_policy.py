"""A policy that waits, then acts (for ``policy_kinds.py``): ``wait_policy:Wait,ms=5`` sleeps
``ms`` milliseconds a step, a stand-in for a model behind a server or an API, then draws
``random``'s action. The actions depend only on the seed, not on the wait.

Run as a script, it times 256 agent calls in flight (issue 22: 32 episodes x 8 agents x 20
steps of 5 ms) against ``--jobs 1`` and against the ideal (the ``--jobs 1`` start-up plus
the sequential time / 256), interleaved, quiet and beside a busy neighbour, and prints the
fraction of the ideal speed-up reached (target: at least 0.5). The ideal counts only the
waiting; on this machine's cores the calls' CPU (the policy's own, the sleep's system calls,
parcat's handoffs) sets a floor too: the script prints the CPU time all the default run's
processes used and that floor (start-up + their CPU time / cores)::

    PYTHONPATH=src .venv/bin/python benchmarks/wait_policy.py [--repeats N] [--only quiet|load]
"""

from __future__ import annotations

import os
import time
from typing import Any

from parcat.policies.base import AgentSpec
from parcat.policies.builtin import RandomPolicy

CALLS = 32 * 8
MANY = ("eval", "-m", "harvest", "--set", "agents=8", "--set", "max_steps=20", "-n", "32",
        "-p", "wait_policy:Wait,ms=5")


class Wait(RandomPolicy):
    """``random``'s actions, after ``ms`` milliseconds of waiting (no CPU)."""

    def __init__(self, spec: AgentSpec, ms: float = 5.0) -> None:
        super().__init__(spec)
        self.seconds = float(ms) / 1000

    def step(self, obs: Any) -> Any:
        """Wait, then draw the action."""
        time.sleep(self.seconds)
        return super().step(obs)


def main() -> None:
    """The 256-calls comparison (imports the benchmark helpers only when run)."""
    import argparse
    import statistics

    from field import PARCAT, command, compare
    from neighbour import busy_neighbour
    from policy_kinds import startup  # sets PYTHONPATH so the commands find this module
    from tree_memory import peak_memory

    parser = argparse.ArgumentParser(description="256 agent calls of a waiting policy")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["quiet", "load"])
    args = parser.parse_args()

    def suite() -> None:
        base = startup()

        def limit(times: dict[str, list[float]]) -> str:
            sequential = statistics.median(times["sequential (--jobs 1)"])
            ideal = base + (sequential - base) / CALLS  # as policy_kinds.ideal, for 256
            default = statistics.median(times["default (no --jobs)"])
            cpu = statistics.median(peak_memory([*PARCAT, *MANY])[3]
                                    for _ in range(args.repeats))
            floor = base + cpu / (os.cpu_count() or 1)
            return (f"ideal {ideal:.2f} s (start-up {base:.2f} s + sequential / {CALLS}); "
                    f"the default reaches {ideal / default:.2f} of the ideal speed-up (target "
                    f"0.5); its processes used {cpu:.2f} s of CPU: the CPU floor on "
                    f"{os.cpu_count()} cores is {floor:.2f} s, reached to {floor / default:.2f}")

        compare(f"{CALLS} agent calls in flight: 32 episodes x 8 agents x 20 steps of 5 ms", {
            "sequential (--jobs 1)": command(*MANY, "--jobs", "1"),
            "default (no --jobs)": command(*MANY),
        }, args.repeats, limit)

    if args.only != "load":
        print("no other load")
        suite()
    if args.only != "quiet":
        with busy_neighbour():
            time.sleep(0.5)
            print("one foreign busy process")
            suite()


if __name__ == "__main__":
    main()
