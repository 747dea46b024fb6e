"""Flags declared once: every command that takes one of these takes it from here.

``eval`` and ``plan`` share all of :class:`~parcat.eval_args.EvalArgs`'s flags through
:func:`with_eval_args`; ``train`` and ``sim`` take ``--seed``, ``--set``, ``--backend``,
``--address``, ``--jobs`` and ``--format`` from here too, so a flag reads and behaves the
same in every command. In ``train`` and ``sim`` a flag left out keeps the config file's
value: flags win over YAML.

The flags' types come from light modules (the planner, ``parcat.ipc.process``,
``parcat.raycluster``: the same enums :mod:`parcat.parallel.launch` re-exports), so a
command's ``--help`` does not import the evaluation stack.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parcat.cli.common import OutputFormat, SummaryFormat, user_errors
from parcat.cli.lazy import held_imports
from parcat.ipc.process import StartMethod as StartMethodKind
from parcat.parallel.planner import ExecutorKind, PolicyStrategy
from parcat.raycluster import Backend as BackendKind

if TYPE_CHECKING:
    from parcat.eval_args import EvalArgs

Missions = Annotated[
    list[str] | None,
    typer.Option("--mission", "-m", help="Mission name, gymnasium:ENV_ID or YAML path; repeat "
                 "for several (default: the mission of the -p run directory)."),
]
Policies = Annotated[
    list[str] | None,
    typer.Option(
        "--policy", "-p",
        help="Policy spec NAME[,KEY=VALUE...][@WEIGHT]; repeat to mix (default: greedy).",
    ),
]
Episodes = Annotated[int, typer.Option("--episodes", "-n", help="Episodes per mission.")]
Seed = Annotated[
    int | None,
    typer.Option("--seed", help="Base seed; every seed of the run derives from it."),
]
Overrides = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a mission parameter, KEY=VALUE (e.g. max_steps=200); "
                 "train: learner.KEY=VALUE sets a learner setting; repeat for several. "
                 "Flags win over a YAML file."),
]
Jobs = Annotated[
    int | None,
    typer.Option("--jobs", "-j", help="Worker budget the planner splits (eval and plan default "
                 "to the CPUs this process may use; train plans only when given)."),
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
    StartMethodKind | None,
    typer.Option("--start-method", help="How worker processes start (default: forkserver "
                 "where the platform has it)."),
]
Backend = Annotated[
    BackendKind | None,
    typer.Option("--backend", help="local: worker processes on this machine; ray: on a Ray "
                 "cluster (episodes as tasks, environment workers as actors)."),
]
Address = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster address with --backend ray (default: start "
                 "a local cluster)."),
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
Format = Annotated[
    OutputFormat,
    typer.Option("--format", "-f", help="stdout: a table, the JSON document or CSV."),
]
TableOrJson = Annotated[
    SummaryFormat, typer.Option("--format", "-f", help="stdout: a table or JSON.")
]


def eval_args(
    missions: Missions = None,
    policies: Policies = None,
    episodes: Episodes = 10,
    seed: Seed = 0,
    overrides: Overrides = None,
    jobs: Jobs = None,
    executor: Executor = ExecutorKind.AUTO,
    parallel_policy: ParallelPolicy = False,
    policy_strategy: Strategy = PolicyStrategy.AUTO,
    action_timeout_ms: ActionTimeout = None,
    gpus: Gpus = None,
    start_method: StartMethod = None,
    retries: Retries = 1,
    episode_timeout: EpisodeTimeout = None,
    fail_fast: FailFast = False,
    backend: Backend = BackendKind.LOCAL,
    address: Address = None,
    trace: Trace = None,
) -> EvalArgs:
    """The flags ``eval`` and ``plan`` share, as one :class:`EvalArgs` (Typer reads this
    signature through :func:`with_eval_args`)."""
    with held_imports():
        from parcat.eval_args import EvalArgs
        from parcat.parallel.launch import RunOptions
    options = RunOptions(
        jobs=jobs,
        # --backend ray is the CLI's other word for --executor ray
        executor=ExecutorKind.RAY if backend is BackendKind.RAY else executor,
        parallel_policy=parallel_policy, policy_strategy=policy_strategy,
        action_timeout_ms=action_timeout_ms, gpus=gpus, start_method=start_method,
        retries=retries, episode_timeout_s=episode_timeout, fail_fast=fail_fast,
        address=address,
    )
    return EvalArgs(
        missions=tuple(missions or ()), policies=tuple(policies or ()), episodes=episodes,
        seed=0 if seed is None else seed, overrides=tuple(overrides or ()), options=options,
        trace=trace,
    )


def with_eval_args(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the flags of :func:`eval_args` as well as its own.

    Typer sees every flag of :func:`eval_args` followed by ``command``'s own parameters
    but the first; ``command`` is called with one validated :class:`EvalArgs` first, then
    its own parameters. A bad flag is one line on stderr and exit code 2, as in the command.
    """
    shared = {p.name: p for p in _parameters(eval_args)}
    own = _parameters(command, skip=1)
    keyword = inspect.Parameter.KEYWORD_ONLY

    @functools.wraps(command)
    def run(**values: Any) -> None:
        with user_errors():
            args = eval_args(**{name: values.pop(name) for name in shared})
        command(args, **values)

    parameters = [p.replace(kind=keyword) for p in [*shared.values(), *own]]
    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    # Typer reads the types with typing.get_type_hints: give it the evaluated ones, not
    # the strings functools.wraps copied (the first among them names EvalArgs)
    run.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    return run


def _parameters(function: Callable[..., Any], skip: int = 0) -> list[inspect.Parameter]:
    """``function``'s parameters but the first ``skip``, annotations evaluated for Typer.

    What ``inspect.signature(eval_str=True)`` does, but only for the parameters Typer
    reads: the return type and a command's first parameter name classes (``EvalArgs``)
    imported when the command runs, not when its ``--help`` is shown.
    """
    names = getattr(function, "__globals__", {})
    kept = list(inspect.signature(function).parameters.values())[skip:]
    return [p.replace(annotation=eval(p.annotation, names)) if isinstance(p.annotation, str)
            else p for p in kept]
