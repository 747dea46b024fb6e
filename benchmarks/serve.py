"""A served policy against the same policy in process, whole ``parcat eval`` commands, quiet
and beside a busy neighbour (issue 22's figures for ``parcat serve``).

One ``parcat serve -p mlp,width=256 -m harvest`` runs for the whole benchmark (a model
server is started once, not per run); each row is an eval command timed whole, the rows
interleaved repeat by repeat (``field.compare``). Printed: the times, the served run's
agent-steps/s over ``--jobs 1`` in process (target ≥ 1.5x with 16 episodes in flight) and
over ``--jobs 1 --lockstep 1`` (one episode at a time: what ``--jobs 1`` meant when the
target was set; today's ``--jobs 1`` plays all 16 in lockstep, one batch a step), the
server's mean batch size over each served run, from its ``GET /stats`` (target > 4), and
the CPU seconds the server spent on each served run (from its process's counters).

    PYTHONPATH=src .venv/bin/python benchmarks/serve.py [--repeats N] [--only quiet|load]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from field import PARCAT, command, compare
from neighbour import busy_neighbour

ROOT = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = str(ROOT / "src")
EPISODES = 16
EVAL = ("eval", "-m", "harvest", "-n", str(EPISODES))
AGENT_STEPS = EPISODES * 4 * 200  # harvest: 4 agents, 200 steps an episode


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the server process has used so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/stats", timeout=30) as reply:
        return dict(json.load(reply))


def served(url: str, pid: int, noted: dict[str, list[float]], *flags: str
           ) -> Callable[[], float]:
    """``parcat eval -p URL FLAGS``, timed; the server's mean batch size and CPU seconds
    over it noted (``noted["batch"]``, ``noted["cpu"]``)."""
    run = command(*EVAL, "-p", url, *flags)

    def timed() -> float:
        before, cpu = stats(url), server_cpu(pid)
        seconds = run()
        after = stats(url)
        noted["cpu"].append(server_cpu(pid) - cpu)
        calls = after["batches"] - before["batches"]
        noted["batch"].append((after["observations"] - before["observations"]) / max(calls, 1))
        return seconds
    return timed


def suite(url: str, pid: int, repeats: int) -> None:
    noted = {plan: {"batch": [], "cpu": []} for plan in ("default", "--jobs 1")}
    local = (*EVAL, "-p", "mlp,width=256", "--jobs", "1")
    rows = {
        "in-process (--jobs 1)": command(*local),
        "one-at-a-time (in process, --jobs 1 --lockstep 1)": command(*local, "--lockstep", "1"),
        "served (default plan)": served(url, pid, noted["default"]),
        "served (--jobs 1)": served(url, pid, noted["--jobs 1"], "--jobs", "1"),
    }

    def figures(times: dict[str, list[float]]) -> str:
        remote = statistics.median(times["served (default plan)"])
        ratios = ", ".join(f"over {name} {statistics.median(times[name]) / remote:.2f}x"
                           for name in ("in-process (--jobs 1)",
                                        "one-at-a-time (in process, --jobs 1 --lockstep 1)"))
        server = "; ".join(
            f"{plan}: mean batch {statistics.median(n['batch']):.2f}, server CPU "
            f"{statistics.median(n['cpu']):.2f} s" for plan, n in noted.items())
        return (f"agent-steps/s served (default, {AGENT_STEPS / remote:,.0f}) {ratios} "
                f"(target 1.5x); {server}")

    compare(f"served mlp,width=256: eval -m harvest -n {EPISODES}", rows, repeats, figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["quiet", "load"])
    args = parser.parse_args()
    server = subprocess.Popen([*PARCAT, "serve", "-p", "mlp,width=256", "-m", "harvest",
                               "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http://"):
            sys.exit(f"parcat serve did not start (exit code {server.poll()})")
        if args.only != "load":
            print("no other load")
            suite(url, server.pid, args.repeats)
        if args.only != "quiet":
            with busy_neighbour():
                time.sleep(0.5)
                print("one foreign busy process")
                suite(url, server.pid, args.repeats)
    finally:
        server.terminate()  # prints the server's counters on stderr
        server.wait()


if __name__ == "__main__":
    main()
