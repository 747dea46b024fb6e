"""The real-time simulator on this machine: schedules kept, and the state-exchange cost.

1. Achieved vs requested: ``run_sim(..., mode="parallel")`` on ``evade`` (3 pursuers and an
   evader; agents not listed are lockstep agents in the environment's process) at a few
   environment periods, each listed agent in its own process at its own ``cycle_time``;
   plus one ``--fast`` run. Per setting: the environment's achieved rate, step-interval p95
   and lateness p95 against its absolute schedule; per agent: achieved cycle time, missed
   cycles, and the age of the action in force (steps and ms).
2. State exchange: the seqlocked shared-memory slot the simulator uses
   (:class:`parcat.sim.slots.SeqSlot`, a 16-float64 state) vs a
   ``multiprocessing.Manager().dict()`` proxy holding the same array. One-sided costs in one
   process (write, read) and a cross-process round trip (write a request; another process
   sees it, reads it and writes it back; the first reads the reply). Both sides of the
   seqlock round trip spin (2 spinners on 2 cores); the manager side polls through its proxy
   (every poll is itself a round trip to the manager process). Medians; variants alternate.

The machine is shared: the CPU that processes outside this script's tree used during each
section is printed with it; figures taken under load are not comparable.

    .venv/bin/python benchmarks/sim.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from parcat.ipc.shm import ArrayBlock, Codec  # noqa: E402
from parcat.sim import parse_sim_config, run_sim, summarize  # noqa: E402
from parcat.sim.slots import SeqSlot  # noqa: E402

STATE = 16
SPECS: dict[str, tuple[tuple[int, ...], Any]] = {
    "req_meta": ((2,), np.int64), "req": ((STATE,), np.float64),
    "resp_meta": ((2,), np.int64), "resp": ((STATE,), np.float64),
}
CODEC = Codec.for_space(gymnasium.spaces.Box(-1.0, 1.0, (STATE,), np.float64))


class OtherLoad:
    """CPU used by processes outside this script's tree while a section runs."""

    def __enter__(self) -> OtherLoad:
        self.start = (time.monotonic(), self._system(), self._tree())
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self.start[0]
        busy = (self._system() - self.start[1]) - (self._tree() - self.start[2])
        self.note = f"\n(other processes used {max(0.0, busy / wall):.2f} CPUs meanwhile)"

    @staticmethod
    def _system() -> float:
        t = psutil.cpu_times()
        return float(t.user + t.system + getattr(t, "nice", 0.0))

    @staticmethod
    def _tree() -> float:
        total = 0.0
        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.NoSuchProcess:
                continue
        return total


def sim_setting(period: float, agents: list[tuple[str, str, float]], iters: int) -> Any:
    """A validated sim config for evade with the given (agent, policy, cycle_time)s."""
    return parse_sim_config({
        "environment": {"mission": "evade", "period": period},
        "agents": [{"agent": a, "policy": p, "cycle_time": c} for a, p, c in agents],
        "iters": iters,
        "output": None,
    })


def schedules(quick: bool) -> None:
    """Section 1: achieved vs requested environment rate and agent cycle times."""
    scale = 0.5 if quick else 1.0
    settings = [
        ("10 ms", 0.010, [("evader", "greedy", 0.010), ("pursuer_0", "greedy", 0.020),
                          ("pursuer_1", "mlp,width=512,depth=3", 0.050)], 300, False),
        ("5 ms", 0.005, [("evader", "greedy", 0.005), ("pursuer_0", "greedy", 0.010)], 400,
         False),
        ("2 ms", 0.002, [("evader", "greedy", 0.002), ("pursuer_0", "greedy", 0.004)], 500,
         False),
        ("1 ms", 0.001, [("evader", "greedy", 0.001)], 1000, False),
        ("fast", 0.010, [("evader", "greedy", 0.010)], 5000, True),
    ]
    print("\n## 1. Parallel mode: achieved vs requested (evade, 4 agents)\n")
    print("| setting | env Hz requested | env Hz achieved | interval p95 ms | lateness p95 ms "
          "| agent | policy | cycle ms | achieved ms | missed | age steps mean / p95 "
          "| age ms mean |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with OtherLoad() as load:
        for label, period, agents, iters, fast in settings:
            config = sim_setting(period, agents, max(50, int(iters * scale)))
            summary = summarize(run_sim(config, "parallel", fast=fast, write=False))
            env = summary["env"]
            head = (f"| {label} | {env['requested_rate_hz']:.0f} | "
                    f"{env['achieved_rate_hz']:,.1f} | {_f(env['interval_p95_ms'])} | "
                    f"{_f(env['lateness_p95_ms'])} ")
            for agent in summary["agents"]:
                if agent["kind"] == "lockstep":
                    continue
                print(f"{head}| {agent['agent']} | {agent['policy']} | "
                      f"{agent['requested_cycle_s'] * 1e3:g} | "
                      f"{_f(_ms(agent['achieved_cycle_s']))} | {agent['missed_cycles']} | "
                      f"{_f(agent['age_steps_mean'])} / {_f(agent['age_steps_p95'])} | "
                      f"{_f(agent['age_ms_mean'])} |")
                head = "| | | | | "
    print(load.note)


def _seqlock_echo(conn: Any, name: str, rounds: int) -> None:
    block = ArrayBlock(SPECS, name=name)
    arrays = block.arrays
    req = SeqSlot(arrays["req_meta"], arrays["req"], CODEC)
    resp = SeqSlot(arrays["resp_meta"], arrays["resp"], CODEC)
    conn.send("ready")
    last = 0
    for _ in range(rounds):
        while req.seq == last:
            pass
        snapshot = req.read()
        assert snapshot is not None
        last = snapshot[0]
        resp.write(snapshot[1], snapshot[2][:1])
    block.close()


def _manager_echo(conn: Any, shared: Any, rounds: int) -> None:
    conn.send("ready")
    last = -1
    for _ in range(rounds):
        while True:
            item = shared.get("req")
            if item is not None and item[0] != last:
                break
        last = item[0]
        shared["resp"] = item


@contextlib.contextmanager
def _echoing(ctx: Any, echo: Callable[..., None], *args: Any) -> Iterator[None]:
    """Another process running ``echo(conn, *args)``, ready (it said so over ``conn``) when
    the block begins; joined (for up to 10 s) when the block ends."""
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=echo, args=(theirs, *args))
    proc.start()
    ours.recv()
    yield
    proc.join(10)


def seqlock_round_trips(ctx: Any, rounds: int) -> list[float]:
    """Round-trip times (µs) through two seqlocked slots, another process echoing."""
    block = ArrayBlock(SPECS)
    arrays = block.arrays
    req = SeqSlot(arrays["req_meta"], arrays["req"], CODEC)
    resp = SeqSlot(arrays["resp_meta"], arrays["resp"], CODEC)
    state = np.random.default_rng(0).random(STATE)
    times = []
    with _echoing(ctx, _seqlock_echo, block.name, rounds):
        for i in range(rounds):
            begin = time.perf_counter_ns()
            seen = resp.seq
            req.write(state, (i,))
            while resp.seq == seen:
                pass
            snapshot = resp.read()
            assert snapshot is not None and int(snapshot[2][0]) == i
            times.append((time.perf_counter_ns() - begin) / 1e3)
    block.close()
    return times[rounds // 10:]


def manager_round_trips(ctx: Any, manager: Any, rounds: int) -> list[float]:
    """Round-trip times (µs) through a Manager dict proxy, another process echoing."""
    shared = manager.dict()
    state = np.random.default_rng(0).random(STATE)
    times = []
    with _echoing(ctx, _manager_echo, shared, rounds):
        for i in range(rounds):
            begin = time.perf_counter_ns()
            shared["req"] = (i, state)
            while True:
                item = shared.get("resp")
                if item is not None and item[0] == i:
                    break
            times.append((time.perf_counter_ns() - begin) / 1e3)
    return times[rounds // 10:]


def one_sided(fn: Callable[[], Any], calls: int) -> float:
    """Median µs per call over batches of ``calls // 10``."""
    batch = max(1, calls // 10)
    samples = []
    for _ in range(10):
        begin = time.perf_counter_ns()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter_ns() - begin) / batch / 1e3)
    return statistics.median(samples)


def exchange(quick: bool) -> None:
    """Section 2: seqlock slot vs Manager dict proxy."""
    ctx = mp.get_context("forkserver")
    rounds_shm, rounds_mgr = (2000, 300) if quick else (10000, 1000)
    manager = ctx.Manager()
    block = ArrayBlock(SPECS)
    slot = SeqSlot(block.arrays["req_meta"], block.arrays["req"], CODEC)
    shared = manager.dict()
    state = np.random.default_rng(0).random(STATE)
    shared["state"] = state
    print("\n## 2. State exchange: seqlocked shared memory vs Manager().dict() (16 float64)\n")
    with OtherLoad() as load:
        rows = {
            "write": (one_sided(lambda: slot.write(state, (1,)), 20000),
                      one_sided(lambda: shared.__setitem__("state", state), 500)),
            "read": (one_sided(slot.read, 20000),
                     one_sided(lambda: shared["state"], 500)),
        }
        trips: dict[str, list[float]] = {"shm": [], "mgr": []}
        for repeat in range(4):  # alternate, so drift hits both alike
            order = ("shm", "mgr") if repeat % 2 == 0 else ("mgr", "shm")
            for kind in order:
                if kind == "shm":
                    trips[kind] += seqlock_round_trips(ctx, rounds_shm // 4)
                else:
                    trips[kind] += manager_round_trips(ctx, manager, rounds_mgr // 4)
    block.close()
    manager.shutdown()
    print("| operation | seqlock shm µs | Manager dict µs | ratio |")
    print("|---|---|---|---|")
    for name, (shm, mgr) in rows.items():
        print(f"| {name} (one process) | {shm:.2f} | {mgr:.1f} | {mgr / shm:,.0f}× |")
    shm_med, mgr_med = statistics.median(trips["shm"]), statistics.median(trips["mgr"])
    shm_p95 = float(np.percentile(trips["shm"], 95))
    mgr_p95 = float(np.percentile(trips["mgr"], 95))
    print(f"| round trip, 2 processes (median) | {shm_med:.1f} | {mgr_med:.1f} | "
          f"{mgr_med / shm_med:,.0f}× |")
    print(f"| round trip, 2 processes (p95) | {shm_p95:.1f} | {mgr_p95:.1f} | "
          f"{mgr_p95 / shm_p95:,.0f}× |")
    print(load.note)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    """Run both sections and print markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Shorter runs.")
    args = parser.parse_args()
    print(f"# parcat sim benchmark ({psutil.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]})")
    schedules(args.quick)
    exchange(args.quick)


if __name__ == "__main__":
    main()
