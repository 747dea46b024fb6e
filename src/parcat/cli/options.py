"""Options shared by ``parcat eval`` and ``parcat plan`` (same flags, same meaning)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parcat.errors import ConfigError
from parcat.evaluate import EvalConfig, make_config
from parcat.parallel import launch
from parcat.parallel.launch import RunOptions
from parcat.parallel.planner import ExecutorKind, PolicyStrategy
from parcat.parallel.ray_executor import import_ray
from parcat.settings import parse_overrides

Missions = Annotated[
    list[str],
    typer.Option("--mission", "-m", help="Mission name or YAML path; repeat for several."),
]
Policies = Annotated[
    list[str] | None,
    typer.Option(
        "--policy", "-p",
        help="Policy spec NAME[,KEY=VALUE...][@WEIGHT]; repeat to mix (default: greedy).",
    ),
]
Episodes = Annotated[int, typer.Option("--episodes", "-n", help="Episodes per mission.")]
Seed = Annotated[int, typer.Option(help="Base seed; all episode seeds derive from it.")]
Overrides = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a mission parameter, KEY=VALUE (e.g. agents=8)."),
]
Jobs = Annotated[
    int | None,
    typer.Option("--jobs", "-j", help="Worker budget (default: the CPUs this process may use)."),
]
Executor = Annotated[
    ExecutorKind, typer.Option("--executor", help="Where episodes run (auto: the planner picks).")
]
ParallelPolicy = Annotated[
    bool, typer.Option("--parallel-policy", help="Also parallelise agents within episodes.")
]
Strategy = Annotated[
    PolicyStrategy,
    typer.Option("--policy-strategy", help="Agent-level strategy with --parallel-policy."),
]
ActionTimeout = Annotated[
    float | None,
    typer.Option("--action-timeout-ms", help="Late actions get the mission's default action."),
]
Gpus = Annotated[int | None, typer.Option("--gpus", help="GPUs to use (default: detected).")]
StartMethod = Annotated[
    launch.StartMethod | None,
    typer.Option("--start-method", help="forkserver (default) or spawn."),
]
Backend = Annotated[
    launch.Backend | None,
    typer.Option("--backend", help="local (default) or ray: episodes as Ray tasks."),
]
Address = Annotated[
    str | None, typer.Option("--address", help="Ray cluster address (with --backend ray).")
]
Retries = Annotated[
    int, typer.Option("--retries", help="Re-runs of an episode whose worker died.")
]
EpisodeTimeout = Annotated[
    float | None,
    typer.Option("--episode-timeout", help="Stop an episode after this many seconds."),
]
FailFast = Annotated[bool, typer.Option("--fail-fast", help="Stop at the first failed episode.")]
Trace = Annotated[
    Path | None, typer.Option("--trace", help="Write a Chrome/Perfetto timeline here.")
]


def build(
    missions: list[str], policies: list[str] | None, episodes: int, seed: int,
    overrides: list[str] | None, jobs: int | None, executor: ExecutorKind,
    parallel_policy: bool, strategy: PolicyStrategy, action_timeout_ms: float | None,
    gpus: int | None, start_method: launch.StartMethod | None, trace: bool, retries: int = 1,
    episode_timeout: float | None = None, fail_fast: bool = False,
    backend: launch.Backend | None = None, address: str | None = None,
) -> tuple[EvalConfig, RunOptions]:
    """Validate everything the flags say, before anything runs."""
    if backend is launch.Backend.RAY:
        import_ray()
        executor = ExecutorKind.RAY
    elif address is not None:
        raise ConfigError("--address needs --backend ray")
    options = RunOptions(
        jobs=jobs, executor=executor, parallel_policy=parallel_policy,
        policy_strategy=strategy, action_timeout_ms=action_timeout_ms, gpus=gpus,
        start_method=start_method, trace=trace, retries=retries,
        episode_timeout_s=episode_timeout, fail_fast=fail_fast, address=address,
    )
    config = make_config(
        missions, policies or ["greedy"], episodes, seed, parse_overrides(overrides or [])
    )
    return config, options
