"""A served policy against the same policy in process, whole ``parcat eval`` commands, quiet
and beside a busy neighbour (issue 22's figures for ``parcat serve``).

One ``parcat serve -p mlp,width=256 -m harvest`` runs for the whole benchmark (a model
server is started once, not per run); each row is an eval command timed whole, the rows
interleaved repeat by repeat (``field.compare``). Printed: the times, the served run's
agent-steps/s over ``--jobs 1`` in process (target ≥ 1.5x with 16 episodes in flight) and
the server's mean batch size over each served run, from its ``GET /stats`` (target > 4).

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


def stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/stats", timeout=30) as reply:
        return dict(json.load(reply))


def served(url: str, batches: list[float], *flags: str) -> Callable[[], float]:
    """``parcat eval -p URL FLAGS``, timed; the server's mean batch size over it noted."""
    run = command(*EVAL, "-p", url, *flags)

    def timed() -> float:
        before = stats(url)
        seconds = run()
        after = stats(url)
        calls = after["batches"] - before["batches"]
        batches.append((after["observations"] - before["observations"]) / max(calls, 1))
        return seconds
    return timed


def suite(url: str, repeats: int) -> None:
    batches: dict[str, list[float]] = {"default": [], "--jobs 1": []}
    rows = {
        "in process (--jobs 1)": command(*EVAL, "-p", "mlp,width=256", "--jobs", "1"),
        "served (default plan)": served(url, batches["default"]),
        "served (--jobs 1)": served(url, batches["--jobs 1"], "--jobs", "1"),
    }

    def figures(times: dict[str, list[float]]) -> str:
        local = statistics.median(times["in process (--jobs 1)"])
        remote = statistics.median(times["served (default plan)"])
        return (f"agent-steps/s served (default) / in process (--jobs 1) = "
                f"{local / remote:.2f}x ({AGENT_STEPS / remote:,.0f} vs "
                f"{AGENT_STEPS / local:,.0f}); mean batch size on the server: default "
                f"{statistics.median(batches['default']):.2f}, --jobs 1 "
                f"{statistics.median(batches['--jobs 1']):.2f}")

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
            suite(url, args.repeats)
        if args.only != "quiet":
            with busy_neighbour():
                time.sleep(0.5)
                print("one foreign busy process")
                suite(url, args.repeats)
    finally:
        server.terminate()  # prints the server's counters on stderr
        server.wait()


if __name__ == "__main__":
    main()
