"""Training on this machine: env-worker collection vs Gymnasium, async vs sync learning, memory.

Three measurements in one run, printed as one table with targets. Within each, the variants
compared are interleaved repeat by repeat (the order alternating) and medians are quoted,
because per-core speed drifts up to 2x here; ratios are medians of per-repeat ratios of
variants that ran back to back, so slow drift cancels.

1. Collection throughput (env steps/s, random actions) of ``parcat.train.vecenv.VecEnv``
   (``vec.step`` then ``vec.gather("obs")`` as a trainer does) vs
   ``gymnasium.vector.AsyncVectorEnv`` (2 processes, one env each, default settings) and a
   plain in-process ``env.step`` loop.
   a. CartPole-v1 (a mission YAML ``env: gymnasium:CartPole-v1`` in a temp dir).
   b. ``BusyStep-v0``, a gymnasium Env defined here whose step busy-waits 0.1 ms or 1 ms;
      efficiency = throughput / (2 x the in-process loop on the same env).
   Targets apply to the layout ``parcat train`` itself would use on this machine in sync
   mode with one environment worker: ``make_vecenv`` with ``env_workers=1`` and
   ``envs_per_worker=2M`` -- on 2 free cores ``VecEnv(m, 1, 2M, spin=True, local_share=True)``,
   1 worker and this process stepping M environments each, both spinning: 2 processes
   stepping environments, as many as AsyncVectorEnv with 2 envs. Context rows (no verdict):
   ``VecEnv(m, 2, M, spin=False)``, AsyncVectorEnv's own shape (2 stepping workers and a
   waiting main process, 3 processes on 2 cores, so nobody spins), and a ``spin=True`` row
   that shows why not. AsyncVectorEnv counts its autoreset steps as steps (a few % on
   CartPole, in its favour).
2. ``Trainer`` epoch time, ``mode=async`` vs ``sync``, each laid out as the trainer lays it
   out (``make_vecenv``: sync steps a share in the trainer's process; async leaves that
   process to the learning thread), with ``gradient_steps`` calibrated so that training takes as
   long as collection in sync mode. Per-epoch time is ``collect_s + train_s`` (sync) and
   ``collect_s + idle_s`` (async) from ``report.epochs``, the first epochs skipped. Run on
   goal_tasks as in configs/train.yaml, and on an env-bound mission (``BusyStep-v0`` at
   0.5 ms, 1 worker). A missed target comes with a one-line reason from the figures.
3. Resident memory (RSS, USS) of an environment worker vs a bare
   ``python -c "import numpy, gymnasium"``, measured in a fresh ``python -c`` child (so
   workers do not re-import this script as their ``__main__``); replay-buffer bytes per
   transition for goal_tasks' and harvest's observations.

The machine is shared: each section prints the CPU that processes outside this benchmark's
process tree used meanwhile (a repeat under such load is run again, a few times at most);
figures taken under load are flagged. A full run takes about 90 s.

    .venv/bin/python benchmarks/train.py [--quick] [--repeats N] [--settle SECONDS]
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # workers import this module (as ``train``) for BusyStep-v0

import harness  # noqa: E402
from harness import med, paired  # noqa: E402

ENV_ID = "BusyStep-v0"
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


class Table(harness.Table):
    """The harness's table, wider, with 1 digit but for ratios."""

    LABEL_WIDTH = 70
    VALUE_WIDTH = 11
    TARGET_WIDTH = 9

    def digits(self, unit: str) -> int:
        return 3 if unit in ("x", "of ideal") else 1

    def load(self, name: str, other: float, runs: harness.Runs | None = None) -> None:
        kept = "" if runs is None else (
            f"; repeats re-run for load {runs.discarded}, kept loaded {runs.loaded}")
        self.load_line(name, f"{name}: other processes used {other:.2f} cores{kept}", other, runs)


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


def describe(vec: Any) -> str:
    """Where ``vec``'s environments step, from its public ``layout``, ``spin``, ``parent_spin``."""
    counts = [count for _, count in vec.layout]
    workers = sum(1 for kind, _ in vec.layout if kind == "worker")
    local = any(kind == "local" for kind, _ in vec.layout)
    who = f"{workers} worker{'s' if workers != 1 else ''}" + (" + this process" if local else "")
    spinners = workers * vec.spin + (1 if workers and vec.parent_spin else 0)
    how = ["local_share"] if local else []
    how.append(f"spin, {spinners} spinners" if spinners > 2 else
               "spin" if spinners else "no spin")
    if len(set(counts)) == 1:
        envs = f"{counts[0]} env{'s' if counts[0] != 1 else ''} each"
    else:
        envs = f"envs {'+'.join(map(str, counts))}"
    return f"{who} ({', '.join(how)}), {envs}"


def trainer_vecenv(mission: Any, workers: int, per_worker: int, mode: str = "sync") -> Any:
    """The VecEnv ``parcat train`` builds for this layout and mode (``make_vecenv``)."""
    from parcat.train.config import TrainConfig
    from parcat.train.trainer import make_vecenv

    config = TrainConfig(mission=mission.name, env_workers=workers, envs_per_worker=per_worker,
                         mode=mode, seed=0)
    return make_vecenv(mission, config)


def plain_vecenv(mission: Any, workers: int, per_worker: int, spin: bool) -> Any:
    """``VecEnv(mission, workers, per_worker)``: workers only, this process just waits."""
    from parcat.train.vecenv import VecEnv

    return VecEnv(mission, workers, per_worker, seed=0, spin=spin)


class ParcatVec:
    """parcat's env workers: ``vec.step(actions)`` then ``vec.gather("obs")``."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.vec = build()
        self.label = "parcat " + describe(self.vec)
        self.vec.reset()
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


Layout = tuple[str, Callable[[Any], Any], str]
"""(key, mission -> VecEnv, target); the row's label comes from the VecEnv built."""


def trainer_layout(m: int) -> Callable[[Any], Any]:
    """The trainer's sync layout with 1 worker: 2M environments, M in each process."""
    return lambda mission: trainer_vecenv(mission, 1, 2 * m)


def plain_layout(workers: int, m: int, spin: bool = False) -> Callable[[Any], Any]:
    return lambda mission: plain_vecenv(mission, workers, m, spin)


def measure(variants: dict[str, Callable[[], Any]], budget_s: float, repeats: int,
            budgets: dict[str, float] | None = None) -> harness.Runs:
    """Build the variants, warm them up, interleave ``repeats`` timed runs; close them."""
    budgets = budgets or {}
    built: dict[str, Any] = {}
    try:
        for name, make in variants.items():
            built[name] = make()
            built[name].run(0.05)  # first steps, lazy imports in workers
        runs = harness.interleave(
            {name: functools.partial(v.run, budgets.get(name, budget_s))
             for name, v in built.items()},
            repeats, retries=repeats // 2, flip_on_retry=True,
        )
        runs.labels = {name: getattr(v, "label", name) for name, v in built.items()}
        return runs
    finally:
        for v in built.values():
            v.close()


def collection(env_id: str, kwargs: dict[str, Any], mission: Any, layouts: Sequence[Layout],
               budget_s: float, repeats: int,
               budgets: dict[str, float] | None = None) -> harness.Runs:
    variants: dict[str, Callable[[], Any]] = {
        "single": functools.partial(SingleLoop, env_id, kwargs),
        "gymnasium": functools.partial(GymAsync, env_id, kwargs, 2),
    }
    for key, build, _ in layouts:
        variants[key] = functools.partial(ParcatVec, functools.partial(build, mission))
    return measure(variants, budget_s, repeats, budgets)


def layout_notes() -> tuple[str, ...]:
    from parcat.core.resources import available_cpus

    return (
        "verdict rows (the 'T' keys): the trainer's sync layout with env_workers=1, "
        f"envs_per_worker=2M, as make_vecenv builds it on this machine ({available_cpus()} "
        "CPUs) --",
        "  2 processes step environments (1 worker + this process, M each), as many as "
        "AsyncVectorEnv with 2 envs, and it is what `parcat train` runs",
        "context rows (no verdict): VecEnv(m, 2, M, spin=False) has AsyncVectorEnv's shape -- "
        "2 stepping workers + a waiting main,",
        "  3 processes on 2 cores, so nobody spins; the spin=True row shows why",
    )


def cartpole(table: Table, tmp: Path, repeats: int, quick: bool, settle_s: float) -> None:
    from parcat.envs.missions import load_mission

    mission = load_mission(str(write_mission(tmp, "cartpole", "gymnasium:CartPole-v1")))
    layouts: list[Layout] = [
        ("T1", trainer_layout(1), ">= 10"),
        ("T16", trainer_layout(16), ">= 10"),
        ("T64", trainer_layout(64), ">= 10"),
        ("2x1", plain_layout(2, 1), ""),
        ("2x16", plain_layout(2, 16), ""),
        ("2x64", plain_layout(2, 64), ""),
        ("2x1 spin", plain_layout(2, 1, spin=True), ""),
    ]
    budget = 0.15 if quick else 0.4
    monitor = harness.settle(settle_s)
    runs = collection("CartPole-v1", {}, mission, layouts, budget, repeats,
                      {"2x1 spin": min(budget, 0.2)})
    table.section(
        "1a. CartPole-v1 collection, env steps/s (random actions; x = / AsyncVectorEnv, "
        "paired)",
        "gymnasium: AsyncVectorEnv, 2 envs = 2 processes (one env each), default settings",
        *layout_notes(),
    )
    table.row("in-process CartPole loop (reference)", med(runs["single"]), "steps/s")
    table.row("gymnasium AsyncVectorEnv, 2 envs", med(runs["gymnasium"]), "steps/s")
    for key, _, target in layouts:
        table.row(f"{key}: {runs.labels[key]}", med(runs[key]), "steps/s")
        ratio = paired(runs, key, "gymnasium")
        verdict = ratio >= 10 if target else None
        table.row(f"  {key}: x AsyncVectorEnv", ratio, "x", target, verdict)
    table.load("1a", monitor.other(), runs)


def busy(table: Table, tmp: Path, repeats: int, quick: bool, settle_s: float) -> None:
    from parcat.envs.missions import load_mission

    layouts: list[Layout] = [
        ("T16", trainer_layout(16), ">= 0.85"),
        ("2x1", plain_layout(2, 1), ""),
        ("2x16", plain_layout(2, 16), ""),
    ]
    table.section(
        "1b. Env step burning CPU (BusyStep-v0): efficiency = steps/s / (2 x in-process steps/s)",
        "same gymnasium.make(BusyStep-v0) everywhere; verdict on the trainer's layout (T16), "
        "the 2-worker rows are context, as in 1a",
    )
    for busy_us in (100, 1000):
        kwargs = {"busy_us": busy_us}
        path = write_mission(tmp, f"busy{busy_us}", f"gymnasium:train:{ENV_ID}", kwargs, 200)
        mission = load_mission(str(path))
        budget = (0.15 if quick else 0.4) * (2.0 if busy_us >= 1000 else 1.0)
        monitor = harness.settle(settle_s)
        runs = collection(ENV_ID, kwargs, mission, layouts, budget, repeats)
        ms = f"{busy_us / 1000:g} ms"
        table.row(f"{ms}: in-process loop (reference)", med(runs["single"]), "steps/s")
        table.row(f"{ms}: gymnasium AsyncVectorEnv, 2 envs",
                  paired(runs, "gymnasium", "single", 2.0), "of ideal")
        for key, _, target in layouts:
            eff = paired(runs, key, "single", 2.0)
            verdict = eff >= 0.85 if target else None
            label = runs.labels[key].removeprefix("parcat ")
            table.row(f"{ms} {key}: {label}", eff, "of ideal", target, verdict)
        table.load(f"1b {ms}", monitor.other(), runs)


# -- 2. async vs sync learning ------------------------------------------------------------------


LEARNER = {"width": 64, "depth": 2, "lr": 0.001, "gamma": 0.95, "batch_size": 64,
           "buffer_size": 50000, "learning_starts": 64, "target_update_interval": 200,
           "eps_decay_steps": 20000}
"""configs/train.yaml's learner, but learning from the first epoch on."""
WARM_EPOCHS = 2


def train_once(case: dict[str, Any], mode: str, gradient_steps: int,
               epochs: int) -> dict[str, Any]:
    """Medians over the epochs after the warm ones (seconds), and the trainer's layout."""
    from parcat.train.config import TrainConfig
    from parcat.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = TrainConfig(
            mission=case["mission"], overrides=case["overrides"], epochs=epochs,
            steps_per_epoch=50, env_workers=case["workers"], envs_per_worker=case["per_worker"],
            mode=mode, gradient_steps=gradient_steps, learner=LEARNER, seed=0,
            checkpoint_every=epochs, run_dir=run_dir,
        )
        trainer = Trainer(config)
        vec = trainer.vec
        layout = {"label": describe(vec), "workers": len(vec.worker_pids()),
                  "local": any(kind == "local" for kind, _ in vec.layout),
                  "spin": vec.spin, "parent_spin": vec.parent_spin}
        report = trainer.run()
    kept = report.epochs[WARM_EPOCHS:]
    extra = [e.train_s if mode == "sync" else e.idle_s for e in kept]
    return {
        "epoch": med([e.collect_s + x for e, x in zip(kept, extra, strict=True)]),
        "collect": med([e.collect_s for e in kept]),
        "train": med([e.train_s for e in kept]),
        "idle": med([e.idle_s for e in kept]),
        "layout": layout,
    }


def calibrate(case: dict[str, Any]) -> int:
    """Train steps per round that take as long as one epoch's collection (sync mode).

    Two rounds: a guess from 20 steps, then a correction from a run at the guess.
    """
    steps = 20
    for _ in range(2):
        got = train_once(case, "sync", steps, WARM_EPOCHS + 3)
        steps = max(1, round(steps * got["collect"] / got["train"]))
    return steps


def why_slow(sync: dict[str, float], asyn: dict[str, float],
             layouts: dict[str, dict[str, Any]]) -> str:
    """One line: what kept async above 0.6 x sync, from the measured medians (ms)."""
    s_lay, a_lay = layouts["sync"], layouts["async"]
    where = []
    if s_lay["local"] and not a_lay["local"]:
        n = a_lay["workers"]
        where.append(f"async collection runs on {n} worker{'s' if n != 1 else ''} while sync "
                     "also steps a share in the trainer's process")
    if s_lay["spin"] and not a_lay["spin"]:
        where.append("sync spins, async does not")
    slower = asyn["collect"] - sync["collect"]
    collect = (f"async collect {asyn['collect']:.0f} ms vs sync {sync['collect']:.0f} ms"
               + (f" ({'; '.join(where)})" if where else ""))
    idle = (f"idle {asyn['idle']:.0f} ms waiting for the learner (round {asyn['train']:.0f} ms "
            f"async vs {sync['train']:.0f} ms sync)")
    parts = [collect, idle] if slower >= asyn["idle"] else [idle, collect]
    return "why: " + "; ".join(parts)


def learning(table: Table, tmp: Path, repeats: int, quick: bool, settle_s: float) -> None:
    busy = str(write_mission(tmp, "busy500", f"gymnasium:train:{ENV_ID}", {"busy_us": 500}, 200))
    cases: list[dict[str, Any]] = [
        {"short": "goal_tasks", "name": "goal_tasks as configs/train.yaml, env_workers 2, "
         "envs_per_worker 4", "mission": "goal_tasks", "overrides": GOALS, "workers": 2,
         "per_worker": 4},
        {"short": "busy", "name": "BusyStep-v0 0.5 ms, env_workers 1, envs_per_worker 4",
         "mission": busy, "overrides": {}, "workers": 1, "per_worker": 4},
    ]
    epochs = WARM_EPOCHS + (3 if quick else 5)
    table.section(
        "2. Trainer epoch time, async vs sync (Trainer + TrainConfig as is; x = async / sync, "
        "paired)",
        "DQN of configs/train.yaml but learning_starts 64; 50 vector steps per epoch; "
        "gradient_steps calibrated so that train_s ~ collect_s in sync mode",
        "epoch = collect_s + train_s (sync), collect_s + idle_s (async), medians over epochs "
        f"after the first {WARM_EPOCHS}; in brackets: median collect_s, train round, idle_s (ms)",
    )
    for case in cases:
        monitor = harness.settle(settle_s)
        steps = calibrate(case)
        figures: dict[str, list[dict[str, Any]]] = {"sync": [], "async": []}

        def run(mode: str, case: dict[str, Any] = case, steps: int = steps,
                figures: dict[str, list[dict[str, Any]]] = figures) -> float:
            figures[mode].append(train_once(case, mode, steps, epochs))
            return float(figures[mode][-1]["epoch"])

        runs = harness.interleave({m: functools.partial(run, m) for m in ("sync", "async")},
                          repeats, retries=repeats // 2, flip_on_retry=True)
        layouts = {mode: figures[mode][-1]["layout"] for mode in figures}
        table.section(
            f"  {case['name']}: gradient_steps {steps}",
            *(f"  {mode} layout: {layouts[mode]['label']}" for mode in ("sync", "async")),
        )
        ms: dict[str, dict[str, float]] = {}
        for mode in ("sync", "async"):
            ms[mode] = {k: med([f[k] for f in figures[mode]]) * 1e3
                        for k in ("collect", "train", "idle")}
            table.row(f"    {mode} epoch (collect {ms[mode]['collect']:.0f}, train round "
                      f"{ms[mode]['train']:.0f}, idle {ms[mode]['idle']:.0f})",
                      med(runs[mode]) * 1e3, "ms")
        ratio = paired(runs, "async", "sync")
        table.row(f"    {case['short']}: async / sync", ratio, "x", "<= 0.6", ratio <= 0.6)
        if ratio > 0.6:
            print(f"      {why_slow(ms['sync'], ms['async'], layouts)}", flush=True)
        table.load(f"2 {case['short']}", monitor.other(), runs)


# -- 3. memory --------------------------------------------------------------------------------


def memory_child() -> None:
    """Section 3's worker measurements; runs in a fresh ``python -c`` and prints JSON."""
    from parcat.envs.missions import load_mission
    from parcat.train.vecenv import VecEnv

    monitor = harness.LoadMonitor()
    out: dict[str, Any] = {}
    for name, overrides in (("goal_tasks", GOALS), ("harvest", {})):
        vec = VecEnv(load_mission(name, overrides), 2, 4, seed=0, spin=False)
        try:
            vec.reset(0)
            rng = np.random.default_rng(0)
            for _ in range(200):
                vec.step({a: rng.integers(0, 2, vec.num_envs) for a in vec.agents})
            out[name] = [harness.memory_of(pid) for pid in vec.worker_pids()]
        finally:
            vec.close()
    out["bare"] = harness.bare_memory()
    out["other"] = monitor.other()
    print(json.dumps(out))


def memory(table: Table) -> None:
    """Worker memory (measured in a fresh child process) and replay-buffer sizes."""
    from parcat.envs.missions import load_mission
    from parcat.train.buffer import transition_bytes
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
        per = transition_bytes(obs_dim)
        table.row(f"replay buffer, {name} (obs {obs_dim} float32): per transition", per, "B")
        table.row(f"  per 1M transitions (one buffer per agent, {len(layouts)} agents)",
                  per * 1e6 / 2**20, "MB/agent")
    table.load("3 (child process)", data["other"])


def main() -> None:
    parser = harness.options(__doc__, "few repeats, short runs", 8.0,
                             "seconds to wait for a quiet machine before each measurement")
    args = parser.parse_args()
    repeats, settle_s = harness.begin("train", args, quick_repeats=2, quick_settle_s=2.0)
    table = Table()
    with tempfile.TemporaryDirectory() as tmp:
        cartpole(table, Path(tmp), repeats, args.quick, settle_s)
        busy(table, Path(tmp), max(2, repeats - 2), args.quick, settle_s)
        learning(table, Path(tmp), max(2, repeats - 4), args.quick, settle_s)
    harness.settle(settle_s)
    memory(table)
    table.summary()


if __name__ == "__main__":
    main()
