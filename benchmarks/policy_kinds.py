"""Three kinds of policy, whole ``parcat eval`` commands, quiet and beside a busy neighbour.

Each row is a command timed whole (process start to exit), its variants interleaved repeat
by repeat; ratios are paired medians of each variant's time over ``--jobs 1``'s (below 1:
faster). Each kind is set against its own limit:

1. **CPU-bound numpy** (``mlp,width=256``, 4 agents, 64 episodes): the limit is the shell
   split, two ``--jobs 1`` processes of half the episodes started together.
2. **A policy that waits** (``wait_policy:Wait,ms=5``: 5 ms of sleep a step; 8 episodes × 4
   agents × 50 steps, issue 22's workload): the limit is ideal concurrency, every agent's
   wait overlapped: the ``--jobs 1`` start-up plus the sequential time / (episodes × agents).
2b. **An async policy calling a model server** (``examples/http_policy.py``'s
   ``AsyncHttpPolicy`` against tests' aiohttp server on loopback answering after 5 ms, in
   a process of its own, the waiting workload): the same limit; with 503 to every 10th
   request (retried); and its batch form (``AsyncHttpBatchPolicy``: one request a step).
   Sequential is its sync twin ``HttpPolicy`` at ``--jobs 1``, a request at a time (the
   async policy's ``--jobs 1`` already has an episode's 4 calls in flight); the twin's
   default plan (threads) sets the async policy beside a sync one on the same server.
3. **A neural net over many agents** (``mlp,width=256``, 24 agents, 64 episodes, issue 23's
   workload): the limit is the batched arithmetic, the forward pass of every observation of
   the run in batches of 1,536, timed alone. parcat's own cost an observation is the run's
   time less the same run with ``noop`` (the environment and start-up), over its
   observations. ``--baseline DIR`` adds a row: ``--jobs 1`` of another checkout's source
   (issue 23 compares with release 4cab202: ``git worktree add --detach DIR 4cab202``).
3b. **A torch network over many agents** (``examples/torch_policy.py``'s ``TorchMLP``, the
   same workload; needs torch): against the same network without a batch form
   (``TorchMLPOneByOne``: a forward pass per agent and step, what per-agent calls cost) at
   ``--jobs 1``, and the batched forward of the run's observations timed alone.

    PYTHONPATH=src .venv/bin/python benchmarks/policy_kinds.py [--repeats N] [--only quiet|load]
        [--kinds cpu,wait,async,neural,torch] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from field import QUIET, command, compare, shell_split
from neighbour import busy_neighbour

ROOT = Path(__file__).resolve().parents[1]
# the commands (field.py's) find parcat's source and wait_policy here, wherever run from
os.environ["PYTHONPATH"] = f"{ROOT / 'src'}:{ROOT / 'benchmarks'}:{ROOT}"

CPU = ("eval", "-m", "harvest", "-p", "mlp,width=256", "-n", "64")
WAIT = ("eval", "-m", "harvest", "--set", "agents=4", "--set", "max_steps=50", "-n", "8",
        "-p", "wait_policy:Wait,ms=5")
WAIT_CALLS = 8 * 4
NEURAL = ("eval", "-m", "harvest", "--set", "agents=24", "-n", "64", "-p", "mlp,width=256")
NEURAL_OBSERVATIONS = 64 * 24 * 200  # harvest's max_steps; its agents live to the end


def other_source(source: Path, *args: str) -> Callable[[], float]:
    """``parcat ARGS`` run from another checkout's ``src`` (an older release)."""
    env = {**os.environ, "PYTHONPATH": f"{source / 'src'}:{ROOT / 'benchmarks'}"}

    def run() -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "parcat", *args], cwd=source, env=env, check=True,
                       **QUIET)  # type: ignore[call-overload]
        return time.perf_counter() - start
    return run


def startup() -> float:
    """``parcat eval`` of one one-step episode: the start-up every command pays."""
    return statistics.median(command("eval", "-m", "harvest", "-n", "1", "--set",
                                     "max_steps=1", "--jobs", "1")() for _ in range(3))


def ideal(startup_s: float, sequential_s: float) -> float:
    return startup_s + (sequential_s - startup_s) / WAIT_CALLS


def batched_forward_s(observations: int) -> tuple[float, float]:
    """Seconds an observation through mlp,width=256 in batches of 1,536, timed alone: with
    the policy's own ``step_batch`` and with plain float32 matmuls of its weights (BLAS:
    the arithmetic limit)."""
    import numpy as np

    from parcat.envs.missions import load_mission
    from parcat.policies.specs import make_policy, parse_policy_spec

    mission = load_mission("harvest", {"agents": 24})
    env = mission.make_env()
    obs, _ = env.reset(seed=0)
    agent = mission.agent_specs(env)[0]
    policy = make_policy(parse_policy_spec("mlp,width=256"), mission, agent)
    batch = [obs[env.possible_agents[0]]] * 1536
    calls = max(1, observations // 1536)
    policy.step_batch(batch)
    start = time.perf_counter()
    for _ in range(calls):
        policy.step_batch(batch)
    own = (time.perf_counter() - start) / (calls * 1536)
    x = np.stack([np.asarray(o, np.float32).ravel() for o in batch])
    start = time.perf_counter()
    for _ in range(calls):
        h = x
        for w, b in zip(policy.weights, policy.biases, strict=True):
            h = np.maximum(h @ w + b, 0.0)
    return own, (time.perf_counter() - start) / (calls * 1536)


def forward_limit(observations: int) -> str:
    own, blas = batched_forward_s(observations)
    return (f"batched forward, batches of 1,536: {own * 1e6:.2f} µs an observation with the "
            f"policy's step_batch, {blas * 1e6:.2f} µs with BLAS matmuls (the arithmetic "
            f"limit); the run's {observations:,} observations: {own * observations:.2f} s / "
            f"{blas * observations:.2f} s")


def per_observation(times: dict[str, list[float]], name: str) -> float:
    """parcat's seconds an observation in row ``name``: its time less the ``noop`` row's."""
    return ((statistics.median(times[name]) - statistics.median(times["noop (environment only)"]))
            / NEURAL_OBSERVATIONS)


def neural_limit(times: dict[str, list[float]]) -> str:
    own, blas = batched_forward_s(NEURAL_OBSERVATIONS)
    default = per_observation(times, "default (no --jobs)")
    return (f"{forward_limit(NEURAL_OBSERVATIONS)}; parcat's default: "
            f"{default * 1e6:.2f} µs an observation beyond the environment "
            f"({default / blas:.2f}x the BLAS limit, {default / own:.2f}x step_batch's)")


def suite(kinds: set[str], repeats: int, baseline: Path | None = None) -> None:
    if "cpu" in kinds:
        compare("1. CPU-bound numpy: eval -m harvest -n 64 -p mlp,width=256", {
            "sequential (--jobs 1)": command(*CPU, "--jobs", "1"),
            "default (no --jobs)": command(*CPU),
            "parallel (--jobs 2)": command(*CPU, "--jobs", "2"),
            "shell split (2 x --jobs 1 -n 32, the limit)": shell_split(
                *CPU[:-1], "32", "--jobs", "1"),
        }, repeats)
    if "wait" in kinds:
        base = startup()
        compare("2. waiting policy (5 ms a step): 8 episodes x 4 agents x 50 steps", {
            "sequential (--jobs 1)": command(*WAIT, "--jobs", "1"),
            "default (no --jobs)": command(*WAIT),
            "concurrent (--jobs 32 --parallel-policy)": command(
                *WAIT, "--jobs", "32", "--parallel-policy"),
        }, repeats, lambda t: (
            f"ideal concurrency {ideal(base, statistics.median(t['sequential (--jobs 1)'])):.2f} s"
            f" (start-up {base:.2f} s + sequential / {WAIT_CALLS})"))
    if "async" in kinds:
        async_http(repeats)
    if "torch" in kinds:
        torch_kind(repeats)
    if "neural" in kinds:
        rows = {"sequential (--jobs 1)": command(*NEURAL, "--jobs", "1"),
                "default (no --jobs)": command(*NEURAL),
                "parallel (--jobs 2)": command(*NEURAL, "--jobs", "2"),
                "noop (environment only)": command(*NEURAL[:-1], "noop")}
        if baseline is not None:
            rows[f"{baseline.name} --jobs 1"] = other_source(baseline, *NEURAL, "--jobs", "1")
        compare("3. neural net over many agents: harvest agents=24 -n 64 -p mlp,width=256",
                rows, repeats, neural_limit)


def torch_kind(repeats: int) -> None:
    """Kind 3b: a torch network with and without its batch form."""
    spec = "examples.torch_policy:TorchMLP,width=256"
    run = (*NEURAL[:-1], spec)

    def limit(times: dict[str, list[float]]) -> str:
        default = per_observation(times, "default (no --jobs)")
        return (f"{torch_forward_s(NEURAL_OBSERVATIONS)}; parcat's default: "
                f"{default * 1e6:.2f} µs an observation beyond the environment")

    compare("3b. torch network over many agents: harvest agents=24 -n 64, TorchMLP width 256", {
        "sequential (--jobs 1)": command(*run, "--jobs", "1"),
        "default (no --jobs)": command(*run),
        "no batch form (--jobs 1, a forward pass per agent)": command(
            *NEURAL[:-1], spec.replace("TorchMLP", "TorchMLPOneByOne"), "--jobs", "1"),
        "noop (environment only)": command(*NEURAL[:-1], "noop"),
    }, repeats, limit)


def torch_forward_s(observations: int) -> str:
    """The torch network's own step_batch at 1,536 rows, one thread, timed alone."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT))
    from examples.torch_policy import TorchMLP

    from parcat.envs.missions import load_mission

    torch.set_num_threads(1)
    agent = load_mission("harvest", {"agents": 24}).agents()[0]
    policy = TorchMLP(agent, width=256)
    batch = list(np.random.default_rng(0).uniform(
        0, 1, (1536, *agent.observation_space.shape)).astype(np.float32))
    policy.step_batch(batch)
    calls = 20
    start = time.perf_counter()
    for _ in range(calls):
        policy.step_batch(batch)
    seconds = (time.perf_counter() - start) / (calls * 1536)
    return (f"TorchMLP.step_batch alone at 1,536 rows: {seconds * 1e6:.2f} µs an observation "
            f"(the run's {observations:,}: {seconds * observations:.2f} s)")


@contextlib.contextmanager
def model_server(*args: str) -> Iterator[str]:
    """tests' aiohttp model server (``DELAY_S [FAIL_EVERY]``) in a process of its own, its
    URL: its CPU is not the measured command's, but it shares the machine's cores."""
    server = subprocess.Popen([sys.executable, str(ROOT / "tests/policies/model_server.py"),
                               *args], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        server.terminate()
        server.wait(timeout=30)


def async_http(repeats: int) -> None:
    """Kind 2b: the async policy from the docs against a loopback server (5 ms answers)."""
    base = startup()
    policy = "examples.http_policy:AsyncHttpPolicy,url="
    with model_server("0.005") as url, model_server("0.005", "10") as failing:
        run = (*WAIT[:-1], policy + url)
        compare("2b. async HTTP policy (5 ms answers): 8 episodes x 4 agents x 50 steps", {
            "sequential (its sync twin HttpPolicy, --jobs 1: a request at a time)": command(
                *run[:-1], policy.replace("Async", "") + url, "--jobs", "1"),
            "--jobs 1 (an episode's 4 calls at once)": command(*run, "--jobs", "1"),
            "default (no --jobs)": command(*run),
            "its sync twin HttpPolicy, default (threads: the same server and requests)":
                command(*run[:-1], policy.replace("Async", "") + url),
            "concurrent (--jobs 32 --parallel-policy)": command(
                *run, "--jobs", "32", "--parallel-policy"),
            "retrying (default, 503 to every 10th request)": command(
                *run[:-1], policy + failing),
            "batch form (default, AsyncHttpBatchPolicy: a request a step)": command(
                *run[:-1], policy.replace("Policy,", "BatchPolicy,") + url),
        }, repeats, lambda t: (
            f"ideal concurrency "
            f"{ideal(base, statistics.median(next(iter(t.values())))):.2f} s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["quiet", "load"])
    parser.add_argument("--kinds", default="cpu,wait,async,neural")
    parser.add_argument("--baseline", type=Path, help="a checkout of an older release")
    args = parser.parse_args()
    kinds = set(args.kinds.split(","))
    with open("/proc/loadavg") as handle:
        print(f"load average before: {handle.read().split()[:3]}")
    if args.only != "load":
        print("no other load")
        suite(kinds, args.repeats, args.baseline)
    if args.only != "quiet":
        with busy_neighbour():
            time.sleep(0.5)
            print("one foreign busy process")
            suite(kinds, args.repeats, args.baseline)


if __name__ == "__main__":
    main()
