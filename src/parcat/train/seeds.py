"""Several seeds of one run in parallel (``parcat train --seeds 0-4``).

Each seed is a ``parcat train`` process of its own writing ``RUN/seed-N`` (a usual run
directory, so ``parcat plot``, ``eval -p`` and ``--resume`` read it as any other). ``--jobs``
is split: as many seeds at a time as it allows (more, time-sharing the jobs, where that ends
sooner), each with an equal share of the rest (its environment workers) and planning its
layout on that share, BLAS on one thread; a seed that ends starts the next. A process per
seed, rather than a worker of :mod:`parcat.ipc.process`, because a seed's trainer starts
worker processes of its own. Ctrl-C or SIGTERM passes SIGTERM to every seed running, which
checkpoints its last finished epoch and exits; a seed that does not within
:data:`STOP_S` is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from parcat.core.errors import ConfigError, brief
from parcat.core.resources import (
    BLAS_VARIABLES,
    FREE_CPUS_VARIABLE,
    available_cpus,
    free_cpus,
)
from parcat.ipc.process import SHUTTING_DOWN
from parcat.train.config import TrainConfig
from parcat.train.metrics import read_metrics

MAX_SEEDS = 1000
SHARED_PER_JOB = 4
"""Most seeds that share one job when that ends sooner (:func:`split_jobs`)."""
STOP_S = 120.0
"""How long an interrupted seed may take to write its checkpoint before it is killed."""
_PR_SET_PDEATHSIG = 1
SEED_DIR = "seed-{}"
"""A seed's run directory inside ``RUN`` (``RUN/seed-0``, ...)."""


def parse_seeds(text: str) -> list[int]:
    """``0-4``, ``1,3,7`` or ``0-2,9`` as the seeds, in order, each once;
    :class:`ConfigError` naming the form for anything else."""
    seeds: list[int] = []
    try:
        for part in str(text).split(","):
            low, dash, high = part.strip().partition("-")
            first, last = int(low), int(high if dash else low)
            if first < 0 or last < first:
                raise ValueError
            seeds += range(first, min(last, first + MAX_SEEDS) + 1)
    except ValueError:
        raise ConfigError(f"--seeds: expected seeds as 0-4, 1,3,7 or 0-2,9 (integers >= 0), "
                          f"got {brief(text)}") from None
    seeds = list(dict.fromkeys(seeds))
    if len(seeds) > MAX_SEEDS:
        raise ConfigError(f"--seeds: {len(seeds):,} seeds, more than the limit of {MAX_SEEDS}")
    return seeds


def split_jobs(jobs: int | None, seeds: int) -> tuple[int, int]:
    """(seeds at a time, ``--jobs`` of each): one job per seed first, the rest shared.

    More seeds than jobs run together (time-shared, up to :data:`SHARED_PER_JOB` a job)
    only where that ends sooner than rounds of ``jobs``: 5 seeds on 2 jobs all at once take
    about 2.5 seeds' time, rounds of 2 take 3 (a seed counted as one job's work)."""
    budget = jobs or available_cpus()
    if seeds <= budget:
        return max(1, seeds), budget // max(1, seeds)

    at_once = min(range(budget, min(seeds, SHARED_PER_JOB * budget) + 1),
                  key=lambda n: _wall(seeds, n, budget))
    return at_once, 1


def _wall(seeds: int, at_once: int, budget: int) -> float:
    """Wall time, in one seed's time on one job, that :func:`split_jobs` plans ``seeds`` run
    ``at_once`` on ``budget`` jobs by: every round counted as a full one."""
    return -(-seeds // at_once) * at_once / budget


def schedule(jobs: int | None, seeds: int) -> str:
    """How :func:`split_jobs` runs ``seeds`` seeds on ``jobs``, for the run's header."""
    budget = jobs or available_cpus()
    at_once, each = split_jobs(jobs, seeds)
    if at_once <= budget:
        return f"{at_once} at a time, {each} job(s) each"
    return (f"{at_once} at a time sharing {budget} job(s) "
            f"(~{round(_wall(seeds, at_once, budget), 2):g} seeds' time "
            f"instead of {-(-seeds // budget)} rounds), each planned on 1 CPU")


@dataclass
class SeedRun:
    """One seed's process and how it ended."""

    seed: int
    path: Path
    proc: subprocess.Popen[bytes] | None = None
    errors: Path | None = None
    """The file its stderr goes to (read when it ends)."""
    code: int | None = None
    last_error: str = ""
    seconds: float = 0.0


def seed_configs(config: TrainConfig, seeds: Sequence[int],
                 jobs_each: int) -> list[TrainConfig]:
    """Each seed's config: its seed, ``RUN/seed-N`` and its share of ``--jobs`` (unless the
    layout is given as ``--env-workers``)."""
    jobs = None if config.env_workers is not None else jobs_each
    return [replace(config, seed=seed, jobs=jobs,
                    run_dir=str(config.run_path / SEED_DIR.format(seed))) for seed in seeds]


def run_seeds(configs: Sequence[TrainConfig], at_once: int, flags: Sequence[str],
              on_start: Callable[[SeedRun], None], on_end: Callable[[SeedRun], None],
              cpus_each: int = 1) -> list[SeedRun]:
    """Train every config in a ``parcat train`` process of its own (``flags`` added:
    ``--resume`` or ``--force``), ``at_once`` at a time, each planning its layout on
    ``cpus_each`` CPUs (at most those free now); Ctrl-C or SIGTERM stops them all (each
    checkpoints) and is raised again once they have."""
    runs = [SeedRun(c.seed, c.run_path) for c in configs]
    waiting = list(zip(runs, configs, strict=True))
    # a seed that saw the CPUs idle at its start would spin its environment worker and
    # itself on cores the other seeds need: two spinners waiting on a descheduled peer
    env = {**os.environ, **dict.fromkeys(BLAS_VARIABLES, "1"),
           FREE_CPUS_VARIABLE: str(min(cpus_each, free_cpus()))}
    with tempfile.TemporaryDirectory(prefix="parcat-seeds-") as folder:
        try:
            running: list[SeedRun] = []
            while waiting or running:
                while waiting and len(running) < at_once:
                    run, config = waiting.pop(0)
                    _start(run, config, Path(folder), flags, env)
                    running.append(run)
                    on_start(run)
                for run in _finished(running):
                    running.remove(run)
                    on_end(run)
        except KeyboardInterrupt:
            _stop(runs)
            raise
    return runs


def _start(run: SeedRun, config: TrainConfig, folder: Path, flags: Sequence[str],
           env: dict[str, str]) -> None:
    data = {k: v for k, v in config.to_dict().items() if v is not None}
    path = folder / f"seed-{run.seed}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run.seconds, run.errors = time.perf_counter(), folder / f"seed-{run.seed}.err"
    with run.errors.open("wb") as errors:
        # a session of its own: only this process decides when a seed stops
        run.proc = subprocess.Popen(
            [sys.executable, "-m", "parcat", "train", "-c", str(path), "--no-progress",
             "--format", "json", *flags], env=env, stdout=subprocess.DEVNULL,
            stderr=errors, start_new_session=True, preexec_fn=_end_with_parent)


def _end_with_parent() -> None:
    """In the seed's process before it runs: SIGTERM it when this process dies, even by
    SIGKILL (Linux), so no seed trains on as an orphan."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _finished(running: list[SeedRun]) -> list[SeedRun]:
    """The seeds whose process ended (waiting up to a second for one)."""
    deadline = time.monotonic() + 1.0
    while True:
        done = [run for run in running if run.proc is not None and run.proc.poll() is not None]
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for run in done:
        assert run.proc is not None and run.errors is not None
        run.code, run.seconds = run.proc.returncode, time.perf_counter() - run.seconds
        text = run.errors.read_text(errors="replace")
        lines = [line for line in text.splitlines() if line.startswith("parcat:")]
        run.last_error = lines[-1] if lines else ""
    return done


def _stop(runs: Sequence[SeedRun]) -> None:
    """SIGTERM to every seed still running, then wait (up to :data:`STOP_S`) for each to
    write its checkpoint; SIGKILL what is left."""
    SHUTTING_DOWN.set()  # a SIGTERM's grace does not end this process while seeds stop
    live = [r.proc for r in runs if r.proc is not None and r.proc.poll() is None]
    for proc in live:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    for proc in live:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait()


def _signal(proc: subprocess.Popen[Any], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)


def final_scores(folder: Path) -> dict[str, list[float]]:
    """Per mission, the final score of each run in ``folder`` (``folder`` itself, or each
    ``folder/*`` holding a run, as ``--seeds`` writes them): the mean per agent of its last
    greedy evaluation. :class:`ConfigError` when no run there has one."""
    from parcat.policies import checkpoint  # only for compare: train's start needs none

    runs = [folder] if (folder / checkpoint.MANIFEST).is_file() else sorted(
        p for p in folder.iterdir() if (p / checkpoint.MANIFEST).is_file())
    found: dict[str, list[float]] = {}
    for run in runs:
        log = next((run / name for name in ("metrics.jsonl", "metrics.csv")
                    if (run / name).is_file()), None)
        evaluated = [record["eval_return"] for record in (read_metrics(log) if log else [])
                     if _evaluated(record.get("eval_return"))]
        if evaluated:
            mission = str(checkpoint.read_manifest(run).get("mission", "?"))
            means = [float(v) for k, v in evaluated[-1].items() if k != "total"]
            found.setdefault(mission, []).append(sum(means) / len(means))
    if not found:
        raise ConfigError(f"compare: '{folder}' holds no training run with a greedy evaluation "
                          "(a run directory, or a folder of them such as --seeds writes)")
    return found


def _evaluated(eval_return: Any) -> bool:
    return isinstance(eval_return, dict) and any(
        isinstance(v, int | float) and v == v for k, v in eval_return.items() if k != "total")
