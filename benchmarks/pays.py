"""Keep only what pays (issue 21): each speed mechanism against parcat without it, whole commands.

Every "without" variant is a small patch in ``benchmarks/variants/NAME.patch``. This script
copies ``src/`` of this tree once per variant (the base too) into a temporary directory,
applies the patch there with ``git apply``, byte-compiles it, and runs whole ``python -m
parcat ...`` commands with ``PYTHONPATH`` at that copy (and at this directory, for
``work_policy`` and ``BusyStep-v0``). The copies are deleted at the end.

Each comparison runs its variants interleaved repeat by repeat (order alternating) and
quotes, per variant, the median wall time and the paired median of (variant / first
variant) ratios. It runs quiet and then beside one foreign busy process (``python -c
'while 1: pass'``, started and stopped here); ``/proc/loadavg`` is printed before each.

1. The policy-worker fallback (``stepping/fallback.py``; patch ``nofallback``): harvest, 2
   agents, 1 episode of 1,000 steps, ``work_policy:Work`` at ~0.2 ms and ~2 ms a step (as
   ``handoff_load.py``), ``--jobs 2 --parallel-policy --policy-strategy process`` with
   ``PARCAT_FREE_CPUS=all`` vs the same without fallback vs ``--jobs 1``; and the planner's
   own strategy (no ``--policy-strategy``, no ``PARCAT_FREE_CPUS``), with and without.
2. The adaptive spin budget (``ipc/spin.py``; patches ``fixedspin``: always spin up to the
   ceiling, ``nospin``: park at once): the forced-process commands of 1. With sections 1
   and 2 together the forced commands run once, with every variant.
3. The hybrid executor (``parallel/hybrid_executor.py``): ``parcat eval -m harvest``
   default vs ``--executor process`` vs ``--jobs 1``; ``-n 64 -p mlp,width=256`` default,
   ``--jobs 2``, ``--jobs 2 --executor process``, ``--jobs 1``.
4. Async learning: ``parcat train -c configs/train.yaml`` sync vs ``--mode async``, and a
   0.5 ms-step environment (``BusyStep-v0``, 8 environments, 10 epochs of 50 steps) with
   enough ``--gradient-steps`` that a training round costs about as much as collection.
5. The in-flight episode record for checkpoints (``train/vecenv.py`` ``EpisodeHistory``;
   patch ``nohistory``): ``parcat train -c configs/train.yaml``, base vs not recording.
   With 4 and 5 together the train.yaml commands run once, with every variant.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/pays.py [--repeats 5]
        [--only quiet|load] [--sections 12345] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from handoff_load import FELL_BACK, STEPS, reps_for
from neighbour import busy_neighbour

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PATCHES = HERE / "variants"
BUSY_MISSION = ("name: busy500\nenv: gymnasium:train:BusyStep-v0\nmax_steps: 200\n"
                "params:\n  busy_us: 500\n")
BUSY_ARGS = ["--epochs", "10", "--steps-per-epoch", "50", "--envs-per-worker", "8"]
BUSY_TRAIN_STEPS = 1000
"""Gradient updates a round that make training cost about as much as collecting (~0.2 s);
the script prints both, per epoch, so the balance can be checked."""


@dataclass
class Variant:
    """One command: which tree (``base`` or a patch's name), its arguments, extra env."""

    tree: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    train: bool = False  # a ``parcat train`` command: its own run dir, epoch times read


def load_line() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Trees:
    """One patched copy of ``src`` per variant name, in a temporary directory."""

    def __init__(self, names: set[str]) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="parcat-pays-"))
        self.paths: dict[str, Path] = {}
        for name in sorted(names):
            top = self.tmp / name
            shutil.copytree(ROOT / "src", top / "src",
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            if name != "base":
                subprocess.run(["git", "apply", str(PATCHES / f"{name}.patch")], cwd=top,
                               check=True)
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(top / "src")],
                           check=True)
            self.paths[name] = top / "src"

    def env(self, name: str, extra: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PARCAT_FREE_CPUS"}
        return {**env, "PYTHONPATH": f"{self.paths[name]}{os.pathsep}{HERE}", **extra}

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


class Runner:
    def __init__(self, trees: Trees) -> None:
        self.trees = trees
        self.count = 0

    def run(self, variant: Variant) -> tuple[float, bool, list[tuple[float, float]], str]:
        """Wall seconds, whether it fell back inline, (collect_s, train_s + idle_s) of each
        epoch but the first of a train command, and the plan the command printed."""
        args = [sys.executable, "-m", "parcat", *variant.args]
        if variant.train:
            self.count += 1
            args += ["-o", str(self.trees.tmp / "runs" / str(self.count)), "--format", "json"]
        start = time.perf_counter()
        done = subprocess.run(args, cwd=ROOT, env=self.trees.env(variant.tree, variant.env),
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{variant.tree}: {' '.join(args[1:])} failed:\n"
                             f"{done.stderr[-2000:]}")
        report = json.loads(done.stdout)
        epochs = [(e["collect_s"], e["train_s"] + e["idle_s"]) for e in report.get("epochs", [])]
        return wall, FELL_BACK in done.stderr, epochs[1:], plan_label(report)


def plan_label(report: dict[str, Any]) -> str:
    """A short description of the plan a ``--format json`` report carries."""
    if "execution" not in report:  # parcat train
        plan = report["plan"]
        return f"{plan['env_workers']} env worker(s), spin {plan['spin']}"
    plan = report["execution"]["plan"]
    text = f"{plan['executor']}{' + this process' if plan['local_lane'] else ''}"
    text += f" x{plan['episode_workers']}"
    if plan["strategy"] != "inline":
        text += f", {plan['strategy']} x{plan['policy_workers']}"
    return text + (", spin" if plan["spin"] and plan["strategy"] == "process" else "")


def compare(runner: Runner, title: str, variants: dict[str, Variant], repeats: int,
            load: str, out: list[dict[str, object]]) -> None:
    """Run ``variants`` interleaved; print median walls and paired ratios to the first."""
    walls: dict[str, list[float]] = {name: [] for name in variants}
    fell = dict.fromkeys(variants, 0)
    plans: dict[str, set[str]] = {name: set() for name in variants}
    epochs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    before = load_line()
    order = list(variants)
    for repeat in range(repeats):
        for name in order if repeat % 2 == 0 else order[::-1]:
            wall, fell_back, times, plan = runner.run(variants[name])
            plans[name].add(plan)
            walls[name].append(wall)
            fell[name] += fell_back
            epochs[name] += times
    base = order[0]
    print(f"  {title}   [{load}; loadavg before {before}, after {load_line()}]", flush=True)
    for name in order:
        ratio = statistics.median(b / a for a, b in zip(walls[base], walls[name], strict=True))
        line = f"    {name:<40} {statistics.median(walls[name]):7.2f} s  {ratio:6.3f} x"
        if fell[name]:
            line += f"  (fell back inline {fell[name]}/{repeats})"
        if epochs[name]:
            collect = statistics.median(c for c, _ in epochs[name]) * 1e3
            train = statistics.median(t for _, t in epochs[name]) * 1e3
            line += f"  (epoch: collect {collect:.0f} ms, train/idle {train:.0f} ms)"
        print(f"{line}\n      plan: {' | '.join(sorted(plans[name]))}", flush=True)
        out.append({"title": title, "load": load, "loadavg": before, "variant": name,
                    "tree": variants[name].tree, "args": variants[name].args,
                    "median_s": statistics.median(walls[name]), "ratio": ratio,
                    "walls": walls[name], "fell_back": fell[name],
                    "plans": sorted(plans[name])})


def handoff_args(reps: int, jobs: int, forced: bool) -> list[str]:
    strategy = ["--policy-strategy", "process"] if forced else []
    return ["eval", "-m", "harvest", "--set", "agents=2", "--set", f"max_steps={STEPS}",
            "-n", "1", "--jobs", str(jobs), "--parallel-policy", *strategy,
            "-p", f"work_policy:Work,reps={reps}", "--seed", "3", "--format", "json"]


def comparisons(sections: str, policies: dict[str, int], busy: Path
                ) -> list[tuple[str, dict[str, Variant]]]:
    """(title, variants) of every comparison the chosen sections need."""
    found: list[tuple[str, dict[str, Variant]]] = []
    pinned = {"PARCAT_FREE_CPUS": "all"}
    if "1" in sections or "2" in sections:
        for name, reps in policies.items():
            forced = {"--jobs 2 (base)": Variant("base", handoff_args(reps, 2, True), pinned)}
            if "1" in sections:
                forced["--jobs 2 nofallback"] = Variant("nofallback",
                                                        handoff_args(reps, 2, True), pinned)
            if "2" in sections:
                for patch in ("fixedspin", "nospin"):
                    forced[f"--jobs 2 {patch}"] = Variant(patch, handoff_args(reps, 2, True),
                                                          pinned)
            forced["--jobs 1"] = Variant("base", handoff_args(reps, 1, True), pinned)
            found.append((f"[1/2] {name} policy, forced --policy-strategy process, "
                          "PARCAT_FREE_CPUS=all", forced))
        if "1" in sections:
            for name, reps in policies.items():
                found.append((f"[1] {name} policy, the planner's strategy", {
                    "--jobs 2 (base)": Variant("base", handoff_args(reps, 2, False)),
                    "--jobs 2 nofallback": Variant("nofallback", handoff_args(reps, 2, False)),
                    "--jobs 1": Variant("base", handoff_args(reps, 1, False)),
                }))
    if "3" in sections:
        harvest = ["eval", "-m", "harvest", "--format", "json"]
        found.append(("[3] parcat eval -m harvest", {
            "default": Variant("base", harvest),
            "--executor process": Variant("base", [*harvest, "--executor", "process"]),
            "--jobs 1": Variant("base", [*harvest, "--jobs", "1"]),
        }))
        big = [*harvest, "-n", "64", "-p", "mlp,width=256"]
        found.append(("[3] parcat eval -m harvest -n 64 -p mlp,width=256", {
            "default": Variant("base", big),
            "--jobs 2": Variant("base", [*big, "--jobs", "2"]),
            "--jobs 2 --executor process": Variant("base", [*big, "--jobs", "2", "--executor",
                                                            "process"]),
            "--jobs 1": Variant("base", [*big, "--jobs", "1"]),
        }))
    if "4" in sections or "5" in sections:
        config = ["train", "-c", str(ROOT / "configs" / "train.yaml")]
        train = {"sync (base)": Variant("base", config, train=True)}
        if "4" in sections:
            train["--mode async"] = Variant("base", [*config, "--mode", "async"], train=True)
        if "5" in sections:
            train["sync nohistory"] = Variant("nohistory", config, train=True)
        found.append(("[4/5] parcat train -c configs/train.yaml", train))
    if "4" in sections:
        args = ["train", "-m", str(busy), *BUSY_ARGS, "--gradient-steps", str(BUSY_TRAIN_STEPS)]
        found.append((f"[4] parcat train -m busy500.yaml {' '.join(args[3:])}", {
            "sync (base)": Variant("base", args, train=True),
            "--mode async": Variant("base", [*args, "--mode", "async"], train=True),
        }))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=["quiet", "load"])
    parser.add_argument("--sections", default="12345")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args()
    policies = {"0.2 ms": reps_for(0.2e-3), "2 ms": reps_for(2e-3)}
    print(f"keep only what pays: {os.cpu_count()} CPUs, {args.repeats} interleaved repeats, "
          f"Work reps {policies}; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)
    out: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="parcat-pays-m") as tmp:
        busy = Path(tmp) / "busy500.yaml"
        busy.write_text(BUSY_MISSION)
        found = comparisons(args.sections, policies, busy)
        trees = Trees({v.tree for _, variants in found for v in variants.values()})
        try:
            runner = Runner(trees)
            for title, variants in found:
                for load in ("quiet", "load"):
                    if args.only not in (None, load):
                        continue
                    with busy_neighbour(load == "load"):
                        time.sleep(0.5 if load == "load" else 0)
                        compare(runner, title, variants, args.repeats,
                                "one busy process" if load == "load" else "quiet", out)
                    if args.json:
                        args.json.write_text(json.dumps(out, indent=1))
        finally:
            trees.close()
    print(f"done {time.strftime('%H:%M:%S')}")


if __name__ == "__main__":
    main()
