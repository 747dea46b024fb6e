"""What ``parcat train``'s shipped configs learn (issue 14). Not a test: it takes minutes.

Every run goes through the CLI (``python -m parcat train -c configs/...``), one at a time,
with its wall time; the trained policies are then scored with ``parcat eval`` on 100
episodes (seeds of their own, not the ones training evaluated on) against the mission's
scripted heuristic (``-p greedy``):

* ``cartpole``, ``acrobot``, ``pendulum``, ``mountaincar``: the tuned configs
  (``configs/cartpole-dqn.yaml`` ..., rl-zoo's settings or near them), seeds 0, 1, 2: the greedy
  evaluation return of the best checkpoint (``RUN/best``, as training measured it, and on
  100 fresh episodes) and of the last. Targets (:data:`SEEDED`): CartPole >= 475 on 3 of 3
  seeds, Acrobot >= -100 on 3 of 3, Pendulum >= -250 on 3 of 3, MountainCar >= -130 on 2
  of 3.
* ``harvest``: ``configs/harvest-ppo.yaml`` vs ``-p greedy``. Target: >= 0.75x greedy's
  mean return within 10 minutes.
* ``evade``: ``configs/evade-ppo.yaml`` (IPPO: pursuers and evader learn against each
  other). Capture rate over 100 episodes of the trained pursuers against the scripted
  evader, beside the scripted pursuers' (and both against the trained evader).
* ``goal_tasks``: ``configs/train.yaml`` vs ``-p greedy`` on the same task parameters.
  Target: >= 0.9x greedy.
* ``connect_four``: ``configs/connect_four-dqn.yaml`` (self-play against a pool of past
  selves, PettingZoo's Connect Four), then ``parcat eval --cross`` of the last checkpoint
  against ``random`` and against a scripted player (tests/train/connect_four_heuristic.py:
  win if it can, block if it must, else centre-ish), 100 games in each seat. Target: a
  training of <= 600 CPU seconds (10 minutes of one quiet core), >= 90% won against random
  and > 50% against the heuristic, in both seats.

Learning curves (per-epoch training reward) are drawn with ``parcat plot RUN -o
OUT/NAME.svg``. The machine's load (``/proc/loadavg``) is printed before and after.

    .venv/bin/python benchmarks/learning.py [--quick] [--only NAME] [--out DIR]

``--quick``: one CartPole seed and shorter harvest/evade runs (their targets then do not
apply). Runs go to ``--out`` (default ``runs/learning``), replaced on every run.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("cartpole", "acrobot", "pendulum", "mountaincar", "harvest", "evade", "goal_tasks",
         "connect_four")
EVAL_EPISODES = 100
GOAL_TASKS_SET = ("agents=2", "task_kind=direction", "max_steps=50")
"""configs/train.yaml's mission overrides, for the heuristic's evaluation."""


def parcat(*args: str) -> tuple[str, float]:
    """Run ``python -m parcat ARGS`` from the repository; its stdout and wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "parcat", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"parcat {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout, wall


def train(config: str, run: Path, *flags: str) -> float:
    """Train ``configs/CONFIG`` into ``run`` (replaced); the wall seconds."""
    _, wall = parcat("train", "-c", f"configs/{config}", "--run-dir", str(run), "--force",
                     *flags)
    return wall


def eval_mean(*args: str) -> float:
    """The mean per-agent return of ``parcat eval ARGS`` over :data:`EVAL_EPISODES`."""
    out, _ = parcat("eval", *args, "-n", str(EVAL_EPISODES), "--format", "json",
                    "--no-progress")
    return float(json.loads(out)["summary"][0]["mean"])


def evaluations(run: Path) -> list[tuple[int, float]]:
    """(env steps, total greedy evaluation return) at every checkpoint of ``run``."""
    rows = []
    with (run / "metrics.jsonl").open() as log:
        for line in log:
            record = json.loads(line)
            total = (record.get("eval_return") or {}).get("total")
            if total is not None and not math.isnan(total):
                rows.append((int(record["total_env_steps"]), float(total)))
    return rows


def plot(run: Path, out: Path) -> str:
    """Draw ``run``'s training reward curve into ``out/RUN.svg``; its path."""
    image = out / f"{run.name}.svg"
    parcat("plot", str(run), "-o", str(image))
    return str(image.relative_to(ROOT) if image.is_relative_to(ROOT) else image)


def loadavg() -> str:
    """The 1, 5 and 15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def row(*cells: Any) -> None:
    """One Markdown table row, printed at once."""
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


# -- the tasks -------------------------------------------------------------------------------


SEEDED = {  # task: (config, mission, target, seeds of 3 that must reach it)
    "cartpole": ("cartpole-dqn.yaml", "gymnasium:CartPole-v1", 475.0, 3),
    "acrobot": ("acrobot-dqn.yaml", "gymnasium:Acrobot-v1", -100.0, 3),
    "pendulum": ("pendulum-ppo.yaml", "gymnasium:Pendulum-v1", -250.0, 3),
    "mountaincar": ("mountaincar-dqn.yaml", "gymnasium:MountainCar-v0", -130.0, 2),
}
"""The Gymnasium tasks with a tuned config, each trained on seeds 0, 1 and 2."""


def seeded(task: str, out: Path, quick: bool) -> bool:
    """Train ``task``'s tuned config on seeds 0-2, one after another; the best checkpoint's
    return as training measured it and on 100 fresh episodes, and the last one's."""
    config, mission, target, needed = SEEDED[task]
    seeds = (0,) if quick else (0, 1, 2)
    row(f"{task} seed", "best (train's eval, at steps)", "best on 100 ep",
        "last (train's eval)", "wall s", "curve")
    reached = 0
    for seed in seeds:
        run = out / f"{task}-{seed}"
        wall = train(config, run, "--seed", str(seed))
        evals = evaluations(run)
        steps, best = max(evals, key=lambda e: e[1])  # the first of equal bests, as RUN/best
        fresh = eval_mean("-p", str(run / "best"), "-m", mission)
        reached += fresh >= target
        row(seed, f"{best:.1f} ({steps:,})", f"{fresh:.1f}", f"{evals[-1][1]:.1f}",
            f"{wall:.0f}", plot(run, out))
    print(f"{task}: best checkpoint >= {target:g} on 100 episodes for {reached} of "
          f"{len(seeds)} seeds (target: {needed} of 3)", flush=True)
    return reached >= min(needed, len(seeds))


def versus_greedy(name: str, config: str, out: Path, target: float, flags: Sequence[str],
                  greedy_args: Sequence[str], limit_s: float | None = None) -> bool:
    run = out / name
    greedy = eval_mean(*greedy_args, "-p", "greedy")
    wall = train(config, run, *flags)
    trained = eval_mean("-p", str(run / "best"))
    last = eval_mean("-p", str(run))
    ratio = trained / greedy
    row(f"{name} ({config})", f"greedy {greedy:.3f}", f"best {trained:.3f} = {ratio:.2f}x",
        f"last {last:.3f}", f"wall {wall:.0f} s", plot(run, out))
    met = ratio >= target and (limit_s is None or wall <= limit_s)
    within = "" if limit_s is None else f" within {limit_s:.0f} s"
    print(f"{name}: {ratio:.2f}x greedy (target >= {target}x{within}): "
          f"{'met' if met else 'missed'}", flush=True)
    return met


def harvest(out: Path, quick: bool) -> bool:
    flags = ("--epochs", "100") if quick else ()
    return versus_greedy("harvest", "harvest-ppo.yaml", out, 0.75, flags,
                         ("-m", "harvest"), limit_s=600)


def goal_tasks(out: Path, quick: bool) -> bool:
    sets = [arg for pair in GOAL_TASKS_SET for arg in ("--set", pair)]
    return versus_greedy("goal_tasks", "train.yaml", out, 0.9, (),
                         ("-m", "goal_tasks", *sets))


def evade(out: Path, quick: bool) -> bool:
    run = out / "evade"
    wall = train("evade-ppo.yaml", run, *(("--epochs", "100") if quick else ()))
    rates = {(p, e): capture_rate(run, p, e)
             for p in ("greedy", "trained") for e in ("greedy", "trained")}
    row("evade pursuers \\ evader", "greedy evader", "trained evader", f"wall {wall:.0f} s",
        plot(run, out))
    for side in ("greedy", "trained"):
        cells = [f"{rates[side, e][0]:.0%} in {rates[side, e][1]:.0f} steps"
                 for e in ("greedy", "trained")]
        row(f"{side} pursuers", *cells)
    gap = rates["trained", "greedy"][0] - rates["greedy", "greedy"][0]
    print(f"evade: trained pursuers capture the scripted evader in "
          f"{rates['trained', 'greedy'][0]:.0%} of episodes, the scripted pursuers in "
          f"{rates['greedy', 'greedy'][0]:.0%} (gap {gap:+.0%})", flush=True)
    return gap > 0


def capture_rate(run: Path, pursuers: str, evader: str) -> tuple[float, float]:
    """(share of :data:`EVAL_EPISODES` episodes ending in a capture, mean length) with the
    pursuers and the evader played by ``greedy`` or the ``trained`` run's best checkpoint."""
    sys.path.insert(0, str(ROOT / "src"))
    from parcat.envs.missions import load_mission
    from parcat.policies.specs import make_policy, parse_policy_spec

    mission = load_mission("evade", {})
    specs = {"greedy": parse_policy_spec("greedy"),
             "trained": parse_policy_spec(str(run / "best"))}
    policies = {agent.agent_id: make_policy(
        specs[evader if agent.agent_id == "evader" else pursuers], mission, agent)
        for agent in mission.agents()}
    captures, lengths = 0, []
    with mission.open_env() as env:
        for episode in range(EVAL_EPISODES):
            captured, length = _episode(env, policies, 10_000 + episode, mission.max_steps)
            captures += captured
            lengths.append(length)
    return captures / EVAL_EPISODES, float(np.mean(lengths))


def _episode(env: Any, policies: dict[str, Any], seed: int, max_steps: int) -> tuple[bool, int]:
    obs, _ = env.reset(seed=seed)
    for policy in policies.values():
        policy.reset(seed)
    for step in range(1, max_steps + 1):
        actions = {agent: policies[agent].step(obs[agent]) for agent in env.agents}
        obs, _, terminated, _, _ = env.step(actions)
        if any(terminated.values()):
            return True, step
        if not env.agents:
            break
    return False, max_steps


CONNECT_FOUR = "pettingzoo.classic.connect_four_v3"
HEURISTIC = "tests.train.connect_four_heuristic:WinBlockCentre"


def connect_four(out: Path, quick: bool) -> bool:
    """Self-play on Connect Four, then the last checkpoint's win rates (95% intervals) in
    each seat against ``random`` and the scripted player, by ``parcat eval --cross``."""
    run = out / "connect_four"
    # the budget is 10 minutes of one quiet core: the training's CPU seconds, which barely
    # depend on the shared machine's load (its wall time does)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = train("connect_four-dqn.yaml", run, *(("--total-steps", "40000") if quick else ()))
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    row("connect_four seat", "opponent", "won [95% CI]", "drawn", "lost", "games")
    met = cpu <= 600
    for opponent, target in (("random", 0.9), (HEURISTIC, 0.5)):
        document, _ = parcat("eval", "-m", CONNECT_FOUR, "-p", str(run), "-p", opponent,
                             "--cross", "-n", str(EVAL_EPISODES), "--seed", "1", "-f", "json",
                             "--no-progress")
        for side in json.loads(document)["sides"]:
            if side["policy"] != str(run):
                continue
            won = side["outcomes"]["win"]
            row(side["side"], opponent.split(":")[-1],
                f"{won['value']:.0%} [{won['low']:.0%}, {won['high']:.0%}]",
                f"{side['outcomes']['draw']['value']:.0%}",
                f"{side['outcomes']['loss']['value']:.0%}", side["episodes"])
            enough = won["value"] >= target if opponent == "random" else won["value"] > target
            met = met and enough
    print(f"connect_four: trained in {cpu:.0f} CPU s (target <= 600 s), {wall:.0f} s wall at "
          f"load {loadavg()}: "
          f"{'met' if met else 'missed'}", flush=True)
    return met


RUNNERS: dict[str, Callable[[Path, bool], bool]] = {
    **{task: functools.partial(seeded, task) for task in SEEDED},
    "harvest": harvest, "evade": evade, "goal_tasks": goal_tasks, "connect_four": connect_four,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, shorter runs")
    parser.add_argument("--only", choices=TASKS, action="append", help="run only this task")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "learning")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"load before: {loadavg()} (2 shared cores)", flush=True)
    began = time.perf_counter()
    verdicts = {}
    for name in args.only or TASKS:
        start = time.perf_counter()
        verdicts[name] = RUNNERS[name](args.out.resolve(), args.quick)
        print(f"{name}: {time.perf_counter() - start:.0f} s wall in all", flush=True)
    print(f"load after: {loadavg()}; {time.perf_counter() - began:.0f} s in all")
    print("verdicts: " + ", ".join(f"{k} {'met' if v else 'missed'}" for k, v in verdicts.items()))


if __name__ == "__main__":
    main()
