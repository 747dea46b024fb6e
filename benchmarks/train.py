"""Training on this machine: env-worker collection vs Gymnasium, async vs sync learning, memory.

Three measurements in one run, printed as one table with targets. Within each, the variants
compared are interleaved repeat by repeat (the order alternating) and medians are quoted,
because per-core speed drifts up to 2x here; ratios are medians of per-repeat ratios of
variants that ran back to back, so slow drift cancels.

1. Collection throughput (env steps/s, random actions) of ``parcat.train.vecenv.VecEnv``
   (2 worker processes x M environments, ``vec.step`` then ``vec.gather("obs")`` as a
   trainer does) vs ``gymnasium.vector.AsyncVectorEnv`` (2 processes, one env each, default
   settings) and a plain in-process ``env.step`` loop.
   a. CartPole-v1 (a mission YAML ``env: gymnasium:CartPole-v1`` in a temp dir).
   b. ``BusyStep-v0``, a gymnasium Env defined here whose step busy-waits 0.1 ms or 1 ms;
      efficiency = throughput / (2 x the in-process loop on the same env).
   parcat runs ``spin=False``: 2 workers + the main process are 3 processes on 2 cores, so
   (as the trainer decides) nobody spins; a ``spin=True`` row shows why. What-if rows (no
   verdict) measure DESIGN.md's pattern, which ``VecEnv`` does not offer: the main process
   steps a share of the environments itself while one spinning worker steps the rest.
   AsyncVectorEnv counts its autoreset steps as steps (a few % on CartPole, in its favour).
2. ``Trainer`` epoch time, ``mode=async`` vs ``sync``, with ``train_steps`` calibrated so
   that training takes as long as collection in sync mode. Per-epoch time is
   ``collect_s + train_s`` (sync) and ``collect_s + idle_s`` (async) from ``report.epochs``,
   the first epochs skipped. Run on goal_tasks as in configs/train.yaml, and on an
   env-bound mission (``BusyStep-v0`` at 0.5 ms, 1 worker) where a core is left for the
   learning thread; a what-if row repeats it with the trainer's process not spinning.
3. Resident memory (RSS, USS) of an environment worker vs a bare
   ``python -c "import numpy, gymnasium"``, measured in a fresh ``python -c`` child (so
   workers do not re-import this script as their ``__main__``); replay-buffer bytes per
   transition for goal_tasks' and harvest's observations.

The machine is shared: each section prints the CPU that processes outside this benchmark's
process tree used meanwhile (a repeat under such load is run again, a few times at most);
figures taken under load are flagged. A full run takes about 2 minutes.

    .venv/bin/python benchmarks/train.py [--quick] [--repeats N] [--settle SECONDS]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # workers import this module (as ``train``) for BusyStep-v0

ENV_ID = "BusyStep-v0"
QUIET_CORES = 0.15
"""Other processes using less CPU than this (in cores) count as a quiet machine."""
BARE_CODE = "import sys, numpy, gymnasium; print('ready', flush=True); sys.stdin.read()"
GOALS = {"agents": 2, "task_kind": "direction", "max_steps": 50}
"""goal_tasks as configs/train.yaml trains it."""


class BusyEnv(gymnasium.Env):  # type: ignore[type-arg]
    """CartPole-shaped spaces; every step burns ``busy_us`` microseconds of CPU."""

    def __init__(self, busy_us: int = 100) -> None:
        self.busy_us = busy_us
        self.observation_space = gymnasium.spaces.Box(-1e6, 1e6, (4,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.t = 0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        end = time.perf_counter() + self.busy_us * 1e-6
        while time.perf_counter() < end:
            pass
        self.t += 1
        obs = np.array([self.t, action, 0.0, 1.0], np.float32)
        return obs, float(action), False, False, {}


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=BusyEnv, max_episode_steps=200)


# -- reporting ------------------------------------------------------------------------------


class Table:
    """Rows of figures, printed as they come; targets are checked and counted."""

    def __init__(self) -> None:
        self.checks: list[tuple[str, bool]] = []
        self.noisy: list[str] = []

    def section(self, title: str, *notes: str) -> None:
        print(f"\n{title}", flush=True)
        for note in notes:
            print(f"    {note}", flush=True)

    def row(self, label: str, value: float, unit: str, target: str = "",
            ok: bool | None = None) -> None:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        digits = 3 if unit in ("x", "of ideal") else 1
        line = f"  {label:<54} {value:>11,.{digits}f} {unit:<8} {target:<9} {verdict}"
        print(line.rstrip(), flush=True)
        if ok is not None:
            self.checks.append((label, ok))

    def load(self, name: str, other: float, runs: Runs | None = None) -> None:
        loaded = other >= QUIET_CORES if runs is None else runs.loaded > 0
        flag = "   <-- LOADED: figures above are disturbed" if loaded else ""
        kept = "" if runs is None else (
            f"; repeats re-run for load {runs.discarded}, kept loaded {runs.loaded}")
        print(f"    [{name}: other processes used {other:.2f} cores{kept}]{flag}", flush=True)
        if flag:
            self.noisy.append(name)

    def summary(self) -> None:
        passed = sum(ok for _, ok in self.checks)
        print(f"\n{passed}/{len(self.checks)} targets met", flush=True)
        for label, ok in self.checks:
            if not ok:
                print(f"  FAIL: {label.strip()}", flush=True)
        if self.noisy:
            print(f"  other processes loaded the machine during: {', '.join(self.noisy)}")


class LoadMonitor:
    """CPU used by processes outside this benchmark's process tree, over a time window."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.busy0 = self._system()
        self.tree0 = self._tree()

    @staticmethod
    def _tree() -> float:
        me = psutil.Process()
        total = 0.0
        for process in (me, *me.children(recursive=True)):
            try:
                t = process.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    @staticmethod
    def _system() -> float:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system + t.irq + t.softirq

    def stop(self) -> float:
        """Other processes' CPU, in cores, since construction."""
        wall = max(time.perf_counter() - self.t0, 1e-9)
        other = (self._system() - self.busy0) - (self._tree() - self.tree0)
        return max(0.0, other / wall)


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


class Runs(dict[str, list[float]]):
    """Per-repeat figures of each variant, and how many repeats ran under outside load."""

    discarded = 0
    """Repeats thrown away (and run again) because other processes loaded the machine."""
    loaded = 0
    """Loaded repeats kept anyway (no retries left)."""


def interleave(variants: dict[str, Callable[[], float]], repeats: int) -> Runs:
    """Call every variant once per repeat, alternating the order; collect what they return.

    A repeat during which other processes used more than ``QUIET_CORES`` is run again, at
    most ``repeats // 2`` times in all; after that loaded repeats are kept and counted.
    """
    runs = Runs({name: [] for name in variants})
    names = list(variants)
    while len(runs[names[0]]) < repeats:
        monitor = LoadMonitor()
        order = names if (len(runs[names[0]]) + runs.discarded) % 2 == 0 else names[::-1]
        row = {name: variants[name]() for name in order}
        if monitor.stop() >= QUIET_CORES:
            if runs.discarded < repeats // 2:
                runs.discarded += 1
                continue
            runs.loaded += 1
        for name, value in row.items():
            runs[name].append(value)
    return runs


def settle(limit_s: float) -> None:
    """Wait (up to ``limit_s``) for a second in which other processes stay quiet."""
    deadline = time.perf_counter() + limit_s
    while limit_s > 0:
        monitor = LoadMonitor()
        time.sleep(1.0)
        if monitor.stop() < QUIET_CORES or time.perf_counter() > deadline:
            return


def paired(runs: Runs, num: str, den: str, scale: float = 1.0) -> float:
    """Median over repeats of ``num / (scale * den)``."""
    return med([a / (scale * b) for a, b in zip(runs[num], runs[den], strict=True)])


# -- 1. collection throughput ---------------------------------------------------------------


def write_mission(directory: Path, name: str, env: str, params: dict[str, Any] | None = None,
                  max_steps: int = 500) -> Path:
    path = directory / f"{name}.yaml"
    lines = [f"name: {name}", f"env: {env}", f"max_steps: {max_steps}"]
    if params:
        lines.append("params:")
        lines += [f"  {k}: {v}" for k, v in params.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_env(env_id: str, kwargs: dict[str, Any]) -> gymnasium.Env:  # type: ignore[type-arg]
    return gymnasium.make(env_id, **kwargs)


class SingleLoop:
    """One environment stepped in this process: the reference rate of one core."""

    def __init__(self, env_id: str, kwargs: dict[str, Any]) -> None:
        self.env = make_env(env_id, kwargs)
        self.env.reset(seed=0)
        self.actions = np.random.default_rng(0).integers(0, 2, 4096).tolist()

    def run(self, budget_s: float) -> float:
        env, actions, steps = self.env, self.actions, 0
        start = time.perf_counter()
        end = start + budget_s
        while True:
            _, _, terminated, truncated, _ = env.step(actions[steps % 4096])
            steps += 1
            if terminated or truncated:
                env.reset()
            if time.perf_counter() >= end:
                return steps / (time.perf_counter() - start)

    def close(self) -> None:
        self.env.close()


class GymAsync:
    """``gymnasium.vector.AsyncVectorEnv`` with one env per process, default settings."""

    def __init__(self, env_id: str, kwargs: dict[str, Any], num_envs: int) -> None:
        fn = functools.partial(make_env, env_id, kwargs)
        self.vec = gymnasium.vector.AsyncVectorEnv([fn] * num_envs)
        self.vec.reset(seed=0)
        self.num_envs = num_envs
        self.actions = np.random.default_rng(0).integers(0, 2, (4096, num_envs))

    def run(self, budget_s: float) -> float:
        vec, actions, steps = self.vec, self.actions, 0
        start = time.perf_counter()
        end = start + budget_s
        while True:
            vec.step(actions[steps % 4096])
            steps += 1
            if time.perf_counter() >= end:
                return steps * self.num_envs / (time.perf_counter() - start)

    def close(self) -> None:
        self.vec.close()


class ParcatVec:
    """parcat's env workers: ``vec.step(actions)`` then ``vec.gather("obs")``.

    ``local_share``: the what-if of DESIGN.md's pattern -- this process steps as many
    environments as each worker itself (an in-process slice appended to the VecEnv, which
    ``VecEnv._run`` steps between dispatching to the workers and waiting for them) and the
    workers spin; ``VecEnv`` has no option for it, so this reaches into its internals.
    """

    def __init__(self, mission: Any, workers: int, per_worker: int, spin: bool,
                 local_share: bool = False) -> None:
        from parcat.train.envslice import EnvSlice, array_specs
        from parcat.train.vecenv import VecEnv, _Slot

        self.vec = VecEnv(mission, workers, per_worker, seed=0, spin=spin)
        if local_share:
            vec, first = self.vec, self.vec.num_envs
            slot = _Slot(first, per_worker)
            slot.arrays = {k: np.zeros(shape, dtype)
                           for k, (shape, dtype) in array_specs(vec.layouts, per_worker).items()}
            slot.local = EnvSlice(mission, first, per_worker, 0, slot.arrays)
            vec._slots.append(slot)
            vec.num_envs += per_worker
        self.vec.reset(0)
        rng = np.random.default_rng(0)
        self.actions = [
            {a: rng.integers(0, 2, self.vec.num_envs) for a in self.vec.agents}
            for _ in range(256)
        ]

    def run(self, budget_s: float) -> float:
        vec, actions, steps = self.vec, self.actions, 0
        start = time.perf_counter()
        end = start + budget_s
        while True:
            vec.step(actions[steps % 256])
            vec.gather("obs")
            steps += 1
            if time.perf_counter() >= end:
                return steps * vec.num_envs / (time.perf_counter() - start)

    def close(self) -> None:
        self.vec.close()


Layout = tuple[str, str, dict[str, Any], str]
"""(key, label, ParcatVec arguments, target)."""


def measure(variants: dict[str, Callable[[], Any]], budget_s: float, repeats: int,
            budgets: dict[str, float] | None = None) -> Runs:
    """Build the variants, warm them up, interleave ``repeats`` timed runs; close them.

    A what-if variant (key starting with ``h``) that cannot be built -- it reaches into
    ``VecEnv``'s internals, which may change -- is left out with a note.
    """
    budgets = budgets or {}
    built: dict[str, Any] = {}
    try:
        for name, make in variants.items():
            try:
                built[name] = make()
            except (AttributeError, ImportError, TypeError) as exc:
                if not name.startswith("h"):
                    raise
                print(f"    [what-if {name} left out: {type(exc).__name__}: {exc}]")
                continue
            built[name].run(0.05)  # first steps, lazy imports in workers
        return interleave(
            {name: functools.partial(v.run, budgets.get(name, budget_s))
             for name, v in built.items()},
            repeats,
        )
    finally:
        for v in built.values():
            v.close()


def collection(env_id: str, kwargs: dict[str, Any], mission: Any, layouts: Sequence[Layout],
               budget_s: float, repeats: int, budgets: dict[str, float] | None = None) -> Runs:
    variants: dict[str, Callable[[], Any]] = {
        "single": functools.partial(SingleLoop, env_id, kwargs),
        "gymnasium": functools.partial(GymAsync, env_id, kwargs, 2),
    }
    for key, _, args, _ in layouts:
        variants[key] = functools.partial(ParcatVec, mission, **args)
    return measure(variants, budget_s, repeats, budgets)


SPIN_NOTE = (
    "parcat: VecEnv(mission, 2, M, spin=False) -- 2 workers + main = 3 processes on 2 cores, "
    "so nobody spins (the trainer's rule)"
)
WHAT_IF_NOTE = (
    "what-if rows (no verdict): main steps M envs itself + 1 spinning worker x M "
    "(DESIGN.md's pattern; 2 spinners on 2 cores)"
)


def cartpole(table: Table, tmp: Path, repeats: int, quick: bool, settle_s: float) -> None:
    from parcat.missions import load_mission

    mission = load_mission(str(write_mission(tmp, "cartpole", "gymnasium:CartPole-v1")))
    layouts: list[Layout] = [
        ("2x1", "parcat 2 workers x 1 env", {"workers": 2, "per_worker": 1, "spin": False}, ""),
        ("2x16", "parcat 2 workers x 16 envs", {"workers": 2, "per_worker": 16, "spin": False},
         ">= 10"),
        ("2x64", "parcat 2 workers x 64 envs", {"workers": 2, "per_worker": 64, "spin": False},
         ">= 10"),
        ("2x1 spin", "parcat 2 workers x 1 env, spin=True (3 spinners)",
         {"workers": 2, "per_worker": 1, "spin": True}, ""),
        ("h1", "what-if: main 1 env + 1 spinning worker x 1",
         {"workers": 1, "per_worker": 1, "spin": True, "local_share": True}, "(>= 10)"),
        ("h16", "what-if: main 16 envs + 1 spinning worker x 16",
         {"workers": 1, "per_worker": 16, "spin": True, "local_share": True}, "(>= 10)"),
    ]
    budget = 0.15 if quick else 0.4
    settle(settle_s)
    monitor = LoadMonitor()
    runs = collection("CartPole-v1", {}, mission, layouts, budget, repeats,
                      {"2x1 spin": min(budget, 0.2)})
    table.section(
        "1a. CartPole-v1 collection, env steps/s (random actions; x = / AsyncVectorEnv, "
        "paired)",
        "gymnasium: AsyncVectorEnv, 2 envs = 2 processes (one env each), default settings",
        SPIN_NOTE, WHAT_IF_NOTE,
    )
    table.row("in-process CartPole loop (reference)", med(runs["single"]), "steps/s")
    table.row("gymnasium AsyncVectorEnv, 2 envs", med(runs["gymnasium"]), "steps/s")
    for key, label, _, target in layouts:
        if key not in runs:
            continue
        table.row(label, med(runs[key]), "steps/s")
        ratio = paired(runs, key, "gymnasium")
        verdict = ratio >= 10 if target == ">= 10" else None
        table.row(f"  {key}: x AsyncVectorEnv", ratio, "x", target, verdict)
    table.load("1a", monitor.stop(), runs)


def busy(table: Table, tmp: Path, repeats: int, quick: bool, settle_s: float) -> None:
    from parcat.missions import load_mission

    layouts: list[Layout] = [
        ("2x1", "parcat 2 workers x 1 env", {"workers": 2, "per_worker": 1, "spin": False}, ""),
        ("2x16", "parcat 2 workers x 16 envs", {"workers": 2, "per_worker": 16, "spin": False},
         ">= 0.85"),
        ("h16", "what-if: main 16 + 1 spinning worker x 16",
         {"workers": 1, "per_worker": 16, "spin": True, "local_share": True}, "(>= 0.85)"),
    ]
    table.section(
        "1b. Env step burning CPU (BusyStep-v0): efficiency = steps/s / (2 x in-process steps/s)",
        "same gymnasium.make(BusyStep-v0) everywhere; parcat spin=False as in 1a",
    )
    for busy_us in (100, 1000):
        kwargs = {"busy_us": busy_us}
        path = write_mission(tmp, f"busy{busy_us}", f"gymnasium:train:{ENV_ID}", kwargs, 200)
        mission = load_mission(str(path))
        budget = (0.15 if quick else 0.4) * (2.0 if busy_us >= 1000 else 1.0)
        settle(settle_s)
        monitor = LoadMonitor()
        runs = collection(ENV_ID, kwargs, mission, layouts, budget, repeats)
        ms = f"{busy_us / 1000:g} ms"
        table.row(f"{ms}: in-process loop (reference)", med(runs["single"]), "steps/s")
        table.row(f"{ms}: gymnasium AsyncVectorEnv, 2 envs",
                  paired(runs, "gymnasium", "single", 2.0), "of ideal")
        for key, label, _, target in layouts:
            if key not in runs:
                continue
            eff = paired(runs, key, "single", 2.0)
            verdict = eff >= 0.85 if target == ">= 0.85" else None
            table.row(f"{ms}: {label}", eff, "of ideal", target, verdict)
        table.load(f"1b {ms}", monitor.stop(), runs)


# -- 2. async vs sync learning ------------------------------------------------------------------


LEARNER = {"width": 64, "depth": 2, "lr": 0.001, "gamma": 0.95, "batch_size": 64,
           "buffer_size": 50000, "learning_starts": 64, "target_update_every": 200,
           "eps_decay_steps": 20000}
"""configs/train.yaml's learner, but learning from the first epoch on."""
WARM_EPOCHS = 2


def train_once(case: dict[str, Any], mode: str, train_steps: int,
               epochs: int) -> tuple[float, float, float]:
    """Median (epoch_s, collect_s, train_s) over the epochs after the warm ones."""
    from parcat.train.config import TrainConfig
    from parcat.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = TrainConfig(
            mission=case["mission"], overrides=case["overrides"], epochs=epochs,
            steps_per_epoch=50, env_workers=case["workers"], envs_per_worker=case["per_worker"],
            mode=mode, train_steps=train_steps, learner=LEARNER, seed=0,
            checkpoint_every=epochs, run_dir=run_dir,
        )
        trainer = Trainer(config)
        slots = getattr(trainer.vec, "_slots", [])
        handoffs = [h for s in slots if (h := getattr(s, "handoff", None)) is not None]
        if "parent_spin" in case:  # what-if: the trainer's process waits without spinning
            for handoff in handoffs:
                handoff.spin = case["parent_spin"]
        case["spins"] = any(h.spin for h in handoffs)
        report = trainer.run()
    kept = report.epochs[WARM_EPOCHS:]
    extra = [e.train_s if mode == "sync" else e.idle_s for e in kept]
    return (med([e.collect_s + x for e, x in zip(kept, extra, strict=True)]),
            med([e.collect_s for e in kept]), med([e.train_s for e in kept]))


def calibrate(case: dict[str, Any]) -> int:
    """Train steps per round that take as long as one epoch's collection (sync mode).

    Two rounds: a guess from 20 steps, then a correction from a run at the guess.
    """
    steps = 20
    for _ in range(2):
        _, collect_s, train_s = train_once(case, "sync", steps, WARM_EPOCHS + 3)
        steps = max(1, round(steps * collect_s / train_s))
    return steps


def learning(table: Table, tmp: Path, repeats: int, quick: bool, settle_s: float) -> None:
    busy = str(write_mission(tmp, "busy500", f"gymnasium:train:{ENV_ID}", {"busy_us": 500}, 200))
    cases: list[dict[str, Any]] = [
        {"short": "goal_tasks", "name": "goal_tasks as configs/train.yaml, 2 workers x 4 envs",
         "mission": "goal_tasks", "overrides": GOALS, "workers": 2, "per_worker": 4},
        {"short": "busy", "name": "BusyStep-v0 0.5 ms, 1 worker x 4 envs",
         "mission": busy, "overrides": {}, "workers": 1, "per_worker": 4},
        {"short": "busy, what-if", "name": "what-if: same, the trainer's process not spinning",
         "mission": busy, "overrides": {}, "workers": 1, "per_worker": 4,
         "parent_spin": False},
    ]
    epochs = WARM_EPOCHS + (3 if quick else 5)
    table.section(
        "2. Trainer epoch time, async vs sync (Trainer + TrainConfig; x = async / sync, paired)",
        "DQN of configs/train.yaml but learning_starts 64; 50 vector steps per epoch; "
        "train_steps calibrated so that train_s ~ collect_s in sync mode",
        "epoch = collect_s + train_s (sync), collect_s + idle_s (async), medians over epochs "
        f"after the first {WARM_EPOCHS}; in brackets: median collect_s, train round (ms)",
    )
    for case in cases:
        settle(settle_s)
        monitor = LoadMonitor()
        steps = calibrate(case)
        figures: dict[str, list[tuple[float, float, float]]] = {"sync": [], "async": []}

        def run(mode: str, case: dict[str, Any] = case, steps: int = steps,
                figures: dict[str, list[tuple[float, float, float]]] = figures) -> float:
            figures[mode].append(train_once(case, mode, steps, epochs))
            return figures[mode][-1][0]

        runs = interleave({m: functools.partial(run, m) for m in ("sync", "async")}, repeats)
        table.section(f"  {case['name']}: train_steps {steps}, trainer's process spins: "
                      f"{case['spins']}")
        for mode in ("sync", "async"):
            collect = med([f[1] for f in figures[mode]]) * 1e3
            train = med([f[2] for f in figures[mode]]) * 1e3
            table.row(f"    {mode} epoch (collect {collect:.0f}, train round {train:.0f})",
                      med(runs[mode]) * 1e3, "ms")
        ratio = paired(runs, "async", "sync")
        what_if = "parent_spin" in case
        table.row(f"    {case['short']}: async / sync", ratio, "x",
                  "(<= 0.6)" if what_if else "<= 0.6", None if what_if else ratio <= 0.6)
        table.load(f"2 {case['short']}", monitor.stop(), runs)


# -- 3. memory --------------------------------------------------------------------------------


def memory_of(pid: int) -> tuple[float, float]:
    """(RSS, USS) in MB."""
    info = psutil.Process(pid).memory_full_info()
    return info.rss / 2**20, info.uss / 2**20


def bare_memory() -> tuple[float, float]:
    child = subprocess.Popen([sys.executable, "-c", BARE_CODE], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        return memory_of(child.pid)
    finally:
        child.communicate("")


def memory_child() -> None:
    """Section 3's worker measurements; runs in a fresh ``python -c`` and prints JSON."""
    from parcat.missions import load_mission
    from parcat.train.vecenv import VecEnv

    monitor = LoadMonitor()
    out: dict[str, Any] = {}
    for name, overrides in (("goal_tasks", GOALS), ("harvest", {})):
        vec = VecEnv(load_mission(name, overrides), 2, 4, seed=0, spin=False)
        try:
            vec.reset(0)
            rng = np.random.default_rng(0)
            for _ in range(200):
                vec.step({a: rng.integers(0, 2, vec.num_envs) for a in vec.agents})
            out[name] = [memory_of(pid) for pid in vec.worker_pids()]
        finally:
            vec.close()
    bare = [bare_memory() for _ in range(3)]
    out["bare"] = [med([b[0] for b in bare]), med([b[1] for b in bare])]
    out["other"] = monitor.stop()
    print(json.dumps(out))


def memory(table: Table) -> None:
    """Worker memory (measured in a fresh child process) and replay-buffer sizes."""
    from parcat.missions import load_mission
    from parcat.train.buffer import ReplayBuffer
    from parcat.train.envslice import agent_layouts

    code = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        f"spec = importlib.util.spec_from_file_location('train', {str(Path(__file__))!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['train'] = module\n"
        "spec.loader.exec_module(module)\n"
        "module.memory_child()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    bare_rss, bare_uss = data["bare"]
    table.section(
        "3. Memory: an env worker (VecEnv 2 workers x 4 envs, after 200 steps) vs a bare process",
        f"bare `python -c \"import numpy, gymnasium\"`: RSS {bare_rss:.1f} MB, USS "
        f"{bare_uss:.1f} MB; USS of a forkserver child excludes pages shared with the fork server",
    )
    for name in ("goal_tasks", "harvest"):
        rss = max(m[0] for m in data[name])
        uss = max(m[1] for m in data[name])
        table.row(f"{name} worker RSS ({rss:.1f} MB) / bare RSS", rss / bare_rss, "x",
                  "<= 1.3", rss / bare_rss <= 1.3)
        table.row(f"{name} worker USS ({uss:.1f} MB) / bare USS", uss / bare_uss, "x",
                  "<= 1.3", uss / bare_uss <= 1.3)
    for name, overrides in (("goal_tasks", GOALS), ("harvest", {})):
        mission = load_mission(name, overrides)
        layouts = agent_layouts(mission)
        obs_dim = int(np.prod(layouts[0].obs_shape))
        per = ReplayBuffer(1, obs_dim).bytes_per_transition
        table.row(f"replay buffer, {name} (obs {obs_dim} float32): per transition", per, "B")
        table.row(f"  per 1M transitions (one buffer per agent, {len(layouts)} agents)",
                  per * 1e6 / 2**20, "MB/agent")
    table.load("3 (child process)", data["other"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats, short runs")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    parser.add_argument("--settle", type=float, default=8.0,
                        help="seconds to wait for a quiet machine before each measurement")
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 7)
    settle_s = min(args.settle, 2.0) if args.quick else args.settle
    began = time.perf_counter()
    print(f"parcat train benchmarks: {psutil.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}, {repeats} interleaved repeats, medians"
          + (" (--quick)" if args.quick else ""), flush=True)
    table = Table()
    with tempfile.TemporaryDirectory() as tmp:
        cartpole(table, Path(tmp), repeats, args.quick, settle_s)
        busy(table, Path(tmp), max(2, repeats - 2), args.quick, settle_s)
        learning(table, Path(tmp), max(2, repeats - 4), args.quick, settle_s)
    settle(settle_s)
    memory(table)
    table.summary()
    print(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
