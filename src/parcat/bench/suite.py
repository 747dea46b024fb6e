"""``parcat bench``: a fixed, versioned benchmark suite with a history to compare against.

Each run appends one JSON record (machine, versions, commit, load, figures) to a history
file, which CI compares against (:func:`parcat.eval.compare.compare_bench`). A figure is the
median and range of its repeats; each repeat waits briefly for free CPUs, is measured again
when other processes took them, and is flanked by a reference loop that measures the
machine's speed. One-process figures are timed in CPU time and judged relative to that
speed; the others on the wall clock, and not judged when measured under load.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from parcat import __version__
from parcat.core.errors import ConfigError, brief
from parcat.core.readfile import read_regular
from parcat.core.resources import available_cpus, other_busy_cpus
from parcat.envs.missions import load_mission
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.eval.compare import spread, under_load
from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.parallel.planner import ExecutorKind
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from parcat.stepping.base import InlineStepper
from parcat.stepping.process import ProcessStepper

SUITE = "parcat-bench"
SUITE_VERSION = 2
SLOWDOWN_VARIABLE = "PARCAT_BENCH_SLOWDOWN"
"""``0.3`` makes every measured piece of work 30% slower: how the regression check is tested."""

Measure = Callable[[], dict[str, float]]
"""One repeat of a measurement: the figures it yields."""


@dataclass(frozen=True)
class BenchSize:
    """How much a run measures."""

    repeats: int
    scale: int
    """Work per repeat (1 for ``--quick``)."""
    max_jobs: int
    """Episode scaling is measured for ``--jobs 1..max_jobs``."""
    slowdown: float = 0.0
    settle_s: float = 2.0
    """Longest wait for free CPUs before a repeat."""
    retries: int = 2
    """Extra attempts of a repeat that ran under load."""
    patience_s: float = 30.0
    """Most seconds a run spends waiting for free CPUs and measuring again, in all."""
    budget_s: float = 30.0
    """A measurement past this many seconds stops after its third repeat."""


@dataclass(frozen=True)
class Measurement:
    """A part of the suite: how to set it up, and what its figures are."""

    name: str
    setup: Callable[[BenchSize, Work], Any]
    """A context manager yielding one repeat (a :data:`Measure`)."""
    better: str
    """``higher`` or ``lower`` is better, for every figure it yields."""
    unit: str
    cpus: int | None
    """CPUs it keeps busy (``None``: ``--max-jobs``); with 1, timed in CPU time."""


class Work:
    """Times measured work (made ``slowdown`` slower) and the reference loop beside it."""

    def __init__(self, slowdown: float) -> None:
        self.slowdown = slowdown
        self._reference = [0, 0.0]  # loops, CPU seconds

    def reference(self, loops: int = 150) -> None:
        """Run the reference loop ``loops`` times (between pieces of a repeat's work)."""
        self._reference[0] += loops
        self._reference[1] += reference_loop(loops)

    def take_speed(self) -> float:
        """Reference loops per CPU second since the last call."""
        loops, seconds = self._reference
        self._reference = [0, 0.0]
        return loops / seconds if seconds > 0 else 0.0

    def time(self, fn: Callable[[], object], clock: Callable[[], float]) -> float:
        """Seconds of ``clock`` that ``fn()`` (plus the injected slowdown) took."""
        start = clock()
        fn()
        if self.slowdown > 0:
            deadline = start + (clock() - start) * (1 + self.slowdown)
            spin = 0
            while clock() < deadline:
                spin = (spin * 31 + 7) % 1_000_003
        return clock() - start


class LoadMeter:
    """CPUs that *other* processes used on average since it was made (``/proc/stat`` less
    this process tree's)."""

    def __init__(self) -> None:
        self._start = (time.perf_counter(), _machine_busy_s(), _own_cpu_s())

    def other_cpus(self) -> float | None:
        """The average, or ``None`` where ``/proc/stat`` cannot be read."""
        wall, busy, own = time.perf_counter(), _machine_busy_s(), _own_cpu_s()
        if busy is None or self._start[1] is None or wall <= self._start[0]:
            return None
        other = (busy - self._start[1]) - (own - self._start[2])
        return round(max(0.0, other / (wall - self._start[0])), 3)


def _machine_busy_s() -> float | None:
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[1:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    import psutil
    me = psutil.Process()
    total = 0.0
    # a descendant that ended is counted in its parent's children_* times once reaped
    for process in (me, *me.children(recursive=True)):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def load_snapshot() -> dict[str, Any]:
    """The machine's load right now: load averages and CPUs other processes keep busy."""
    try:
        averages = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        averages = []
    return {"loadavg": averages, "other_busy_cpus": other_busy_cpus()}


def read_slowdown(environ: dict[str, str] | None = None) -> float:
    """The slowdown ``PARCAT_BENCH_SLOWDOWN`` asks for (0 when unset)."""
    text = (os.environ if environ is None else environ).get(SLOWDOWN_VARIABLE, "").strip()
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 10:
        raise ConfigError(f"{SLOWDOWN_VARIABLE} must be a number from 0 to 10 (0.3 makes "
                          f"the measured work 30% slower); got {brief(text)}: unset it or "
                          f"set e.g. {SLOWDOWN_VARIABLE}=0.3")
    return value


def run_suite(quick: bool = False, max_jobs: int | None = None, repeats: int | None = None,
              measurements: Sequence[Measurement] | None = None,
              on_measured: Callable[[], None] | None = None) -> dict[str, Any]:
    """Measure every figure of the suite (or of ``measurements``); return a history record.

    ``max_jobs``: episode scaling runs ``--jobs 1..max_jobs`` (default: the CPUs);
    ``on_measured`` is called after each measurement (a progress bar).
    """
    if repeats is not None and repeats < 1:
        raise ConfigError(f"repeats must be at least 1; got {repeats}")
    settings = BenchSize(repeats=repeats or 5, scale=1 if quick else 3,
                        max_jobs=max_jobs or available_cpus(), slowdown=read_slowdown(),
                        settle_s=0.5 if quick else 3.0, patience_s=6.0 if quick else 60.0,
                        budget_s=4.0 if quick else 30.0)
    before = load_snapshot()
    run_meter = LoadMeter()
    figures: dict[str, dict[str, Any]] = {}
    retried = 0
    give_up = time.monotonic() + settings.patience_s
    for measurement in MEASUREMENTS if measurements is None else measurements:
        measured, extra = _measure(measurement, settings, give_up)
        figures.update(measured)
        retried += extra
        if on_measured is not None:
            on_measured()
    speeds = [f["speed"] for f in figures.values()]
    load = {"before": before, "after": load_snapshot(), "other_cpus": run_meter.other_cpus(),
            "retried_repeats": retried,
            "speed": round(statistics.median(speeds)) if speeds else None}
    return {
        "suite": SUITE, "suite_version": SUITE_VERSION,
        "time": datetime.now(timezone.utc).isoformat(), "quick": quick,
        "repeats": settings.repeats, "slowdown": settings.slowdown,
        "machine": {"host": socket.gethostname(), "cpus": available_cpus(),
                    "machine_cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "versions": _versions(), "git_commit": _git_commit(), "load": load,
        "figures": figures,
    }


def _measure(measurement: Measurement, settings: BenchSize,
             give_up: float) -> tuple[dict[str, Any], int]:
    """Every repeat of one measurement, summarised per figure; and how many were retried.
    After three repeats, one that has taken ``budget_s`` stops."""
    values: dict[str, list[float]] = {}
    loads: list[float] = []
    speeds: list[float] = []
    retried = 0
    cpus = measurement.cpus or settings.max_jobs
    start = time.monotonic()
    work = Work(settings.slowdown)
    with measurement.setup(settings, work) as repeat:
        while len(loads) < settings.repeats:
            if len(loads) >= 3 and time.monotonic() - start > settings.budget_s:
                break
            result, other, speed, attempts = _repeat(repeat, work, cpus, settings, give_up)
            retried += attempts - 1
            loads.append(other)
            speeds.append(speed)
            for figure, value in result.items():
                values.setdefault(figure, []).append(value)
    return {figure: summarise(series, measurement, figure, loads, cpus, speeds)
            for figure, series in values.items()}, retried


def _repeat(repeat: Measure, work: Work, cpus: int, settings: BenchSize,
            give_up: float) -> tuple[dict[str, float], float, float, int]:
    """One repeat: its figures, the CPUs others used meanwhile, the machine's speed and
    the attempts it took (until ``give_up`` it waits for free CPUs, and is measured again
    when others took them)."""
    machine = os.cpu_count() or cpus
    for attempt in range(1, 2 + settings.retries):
        _wait_for_free(cpus, machine, min(settings.settle_s, give_up - time.monotonic()))
        meter = LoadMeter()
        work.take_speed()
        work.reference(300)
        result = repeat()
        work.reference(300)
        speed = work.take_speed()
        other = meter.other_cpus()
        if (other is None or not under_load(other, cpus, machine)
                or attempt > settings.retries or time.monotonic() > give_up):
            break
    return result, other or 0.0, speed, attempt


def reference_loop(loops: int) -> float:
    """CPU seconds of ``loops`` rounds of a fixed loop like parcat's own stepping (grid
    windows by fancy indexing, per-agent Python work every 16 rounds): on a shared machine
    it slows with the neighbours' load as one-process figures do."""
    import numpy as np
    grid = np.random.default_rng(0).random((64, 64, 8))
    corners = np.random.default_rng(1).integers(0, 59, size=(24, 2))
    rows = corners[:, 0, None, None] + np.arange(5)[None, :, None]
    cols = corners[:, 1, None, None] + np.arange(5)[None, None, :]
    places = {f"agent_{i}": (i, 2 * i) for i in range(24)}
    total = 0.0
    start = time.process_time()
    for index in range(loops):
        total += float(grid[rows, cols, index % 8].sum()) * 1.0001
        if index % 16 == 0:
            moves = {agent: (index + i) % 5 for i, agent in enumerate(places)}
            for agent, (row, col) in places.items():
                move = moves[agent]
                places[agent] = ((row + (move == 1) - (move == 2)) % 59,
                                 (col + (move == 3) - (move == 4)) % 59)
            total += sum(complex(*place).real for place in places.values())
    return time.process_time() - start


def summarise(values: list[float], measurement: Measurement, figure: str,
              loads: list[float], cpus: int, speeds: list[float]) -> dict[str, Any]:
    """A figure's entry in a record: median and range of its repeats, direction, load; a
    one-process figure also has ``relative``, each value scaled by the machine's speed."""
    better = measurement.better
    entry = {**spread(values), "values": values, "better": better,
             "unit": measurement.unit, "cpus": cpus,
             "other_cpus": round(statistics.median(loads), 3),
             "speed": round(statistics.median(speeds))}
    if cpus == 1:
        relative = [v / s * 1e6 if better == "higher" else v * s / 1e6
                    for v, s in zip(values, speeds, strict=True)]
        entry["relative"] = {**spread(relative), "values": relative}
    return entry


def _wait_for_free(cpus: int, machine: int, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while other_busy_cpus() + cpus > machine and time.monotonic() < deadline:
        time.sleep(0.1)


@contextmanager
def _rollout(settings: BenchSize, work: Work) -> Iterator[Measure]:
    # one process: CPU time, so other processes on the machine barely move it
    mission = load_mission("harvest", {"agents": 24, "size": 32, "resources": 40,
                                       "max_steps": 200})
    runner = EpisodeRunner()
    tasks = [EpisodeTask(mission, (parse_policy_spec("random"),), 0, i)
             for i in range(24 * settings.scale)]
    for task in tasks[:3]:
        runner.run(task)

    def repeat() -> dict[str, float]:
        seconds = 0.0
        for task in tasks:
            seconds += work.time(partial(runner.run, task), time.process_time)
            work.reference()
        return {"rollout_agent_steps_per_s": len(tasks) * 200 * 24 / seconds}

    try:
        yield repeat
    finally:
        runner.close()


@contextmanager
def _episode_scaling(settings: BenchSize, work: Work) -> Iterator[Measure]:
    # CPU-bound episodes (~0.1 s each, weights small enough to stay in cache): whole runs
    # are timed, worker start-up included
    mission = load_mission("harvest", {"max_steps": 200})
    config = EvalConfig((mission,), (parse_policy_spec("mlp,width=256,depth=2"),),
                        episodes=4 * settings.scale * max(1, settings.max_jobs // 2), seed=0)
    # start the fork server first: it is paid once per program, not once per run
    evaluate(EvalConfig((mission,), config.policies, episodes=1, seed=0),
             RunOptions(jobs=1, executor=ExecutorKind.PROCESS))

    def repeat() -> dict[str, float]:
        times: dict[int, float] = {}
        for jobs in sorted({1, *range(2, settings.max_jobs + 1)}):
            options = RunOptions(jobs=jobs, executor=ExecutorKind.INLINE if jobs == 1
                                 else ExecutorKind.PROCESS)
            times[jobs] = work.time(partial(evaluate, config, options), time.perf_counter)
        return {f"speedup_jobs_{jobs}": times[1] / t for jobs, t in times.items()}

    yield repeat


@contextmanager
def _agent_overhead(settings: BenchSize, work: Work) -> Iterator[Measure]:
    steps = 1000 * settings.scale
    mission = load_mission("goal_tasks", {"agents": 2, "max_steps": steps})
    task = EpisodeTask(mission, (parse_policy_spec("noop"),), 0, 0)
    runners = {"inline": EpisodeRunner(InlineStepper()),
               "process": EpisodeRunner(ProcessStepper(1))}
    for runner in runners.values():
        runner.run(task)

    def repeat() -> dict[str, float]:
        runs: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(settings.scale + 1):  # interleaved; the fastest of each
            for name, runner in runners.items():
                runs[name].append(work.time(partial(runner.run, task), time.perf_counter))
        # one of the two agents is handed to the worker each step
        return {"agent_overhead_us": (min(runs["process"]) - min(runs["inline"]))
                / steps * 1e6}

    try:
        yield repeat
    finally:
        for runner in runners.values():
            runner.close()


@contextmanager
def _train_collection(settings: BenchSize, work: Work) -> Iterator[Measure]:
    import numpy as np

    from parcat.train.vecenv import VecEnv
    mission = load_mission("goal_tasks", {"agents": 2, "max_steps": 50})
    with VecEnv(mission, 2, 8, seed=0) as vec:
        vec.reset()
        rng = np.random.default_rng(0)
        steps = 400 * settings.scale
        actions = [{a: rng.integers(5, size=vec.num_envs) for a in vec.agents}
                   for _ in range(steps)]

        def collect() -> None:
            for step_actions in actions:
                vec.step(step_actions)

        collect()

        def repeat() -> dict[str, float]:
            return {"train_collection_steps_per_s":
                    steps * vec.num_envs / work.time(collect, time.perf_counter)}

        yield repeat


MEASUREMENTS = (
    Measurement("rollout", _rollout, "higher", "agent-steps/s (CPU time)", 1),
    Measurement("episode scaling", _episode_scaling, "higher", "x vs --jobs 1", None),
    Measurement("agent overhead", _agent_overhead, "lower", "us per agent-step", 2),
    Measurement("train collection", _train_collection, "higher", "env-steps/s", 2),
)
"""The fixed suite, in the order it runs."""


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every record of a history file (JSON lines); an absent file is an empty history."""
    if not path.exists():
        return []
    records = []
    try:
        text = read_regular(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"history file '{path}' cannot be read ({type(exc).__name__}); pass "
                          "another --history") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:  # not JSON, a huge integer, too deep
            record = exc
        if not isinstance(record, dict):
            raise ConfigError(f"history file '{path}' line {number} is not a JSON object (one "
                              f"record per line expected): remove that line or pass another "
                              f"--history")
        records.append(record)
    return records


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a line (one ``write`` of a whole line, so lines never interleave)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _versions() -> dict[str, str]:
    import gymnasium
    import numpy
    return {"parcat": __version__, "numpy": numpy.__version__,
            "gymnasium": gymnasium.__version__}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).parent, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
