"""Flags declared once: every command that takes one of these takes it from here.

:data:`SHARED` is the one source of truth for the flags several commands take (``-m``,
``-p``, ``-c``, ``--set``, ``--seed``, ``-j``, ``-o``, ``-f``, ``--progress``, ``--trace``,
``--trust-code``):
each has one short form, one metavar (``-o``: ``FILE`` or ``DIR``, what the command writes)
and one help text in every command; tests/test_cli_flags.py walks every command to keep
it so. What a flag does in a given command (which file extensions ``-o`` takes, whether
``-m`` repeats) is in that command's own help.

``eval`` and ``plan`` share all of :class:`~parcat.eval.eval_args.EvalArgs`'s flags through
:func:`with_eval_args`, which also reads ``-c FILE`` (:mod:`parcat.cli.flag_config`).
The flags' types come from light modules (the planner, ``parcat.ipc.process``,
``parcat.core.raycluster``: the same enums :mod:`parcat.parallel.launch` re-exports), so a
command's ``--help`` does not import the evaluation stack.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parcat.cli.common import OutputFormat, SummaryFormat, user_errors
from parcat.cli.lazy import held_imports
from parcat.core.errors import ConfigError, clip
from parcat.core.raycluster import Backend as BackendKind
from parcat.ipc.process import StartMethod as StartMethodKind
from parcat.parallel.planner import ExecutorKind, PolicyStrategy

if TYPE_CHECKING:
    from parcat.eval.eval_args import EvalArgs


@dataclass(frozen=True)
class Flag:
    """A flag several commands take, spelled and explained the same in each."""

    decls: tuple[str, ...]
    """The long form (with ``/--no-...`` for an on/off flag), then the short form if any."""
    help: str
    """The help text, the same in every command."""
    metavars: tuple[str, ...] = ()
    """What ``--help`` shows for the value: one of these (none: a choice or on/off flag)."""

    def option(self, metavar: str | None = None, aliases: tuple[str, ...] = ()) -> Any:
        """This flag as a ``typer.Option``.

        Args:
            metavar: One of :attr:`metavars` (default: the first).
            aliases: Older long forms the command still accepts (train's ``--run-dir``).
        """
        if metavar is None and self.metavars:
            metavar = self.metavars[0]
        if metavar is not None and metavar not in self.metavars:
            raise ValueError(f"metavar {metavar!r} of {self.decls[0]} not in {self.metavars}")
        return typer.Option(*self.decls, *aliases, metavar=metavar, help=self.help)


SHARED: dict[str, Flag] = {
    "mission": Flag(
        ("--mission", "-m"),
        "Mission: a name (./missions/ first, then the built-in ones), a YAML path, "
        "gymnasium:ENV_ID, module:callable or a module path. eval and plan take several "
        "(repeat -m); train takes one.",
        ("MISSION",)),
    "policy": Flag(
        ("--policy", "-p"),
        # "\\[": rich would read "[@WEIGHT]" as markup and drop it
        "Policy NAME[,KEY=VALUE...]\\[@WEIGHT]: a built-in (parcat policies list), "
        "module:Class or a run directory of parcat train, with its settings and its share "
        "of the agents. eval and plan take several (repeat -p).",
        ("SPEC",)),
    "config": Flag(
        ("--config", "-c"),
        "YAML file of the command's settings (its help says which keys); flags given on the "
        "command line win over it, and it wins over the defaults.",
        ("FILE",)),
    "set": Flag(
        ("--set",),
        "Override a mission parameter, KEY=VALUE (e.g. max_steps=200); train: "
        "learner.KEY=VALUE sets a learner setting; repeat for several. Flags win over a "
        "YAML file.",
        ("KEY=VALUE",)),
    "seed": Flag(
        ("--seed",),
        "Base seed; every random number of the command derives from it.",
        ("N",)),
    "jobs": Flag(
        ("--jobs", "-j"),
        "Worker budget the planner splits (eval and plan default to the CPUs this process "
        "may use; train plans only when given).",
        ("N",)),
    "output": Flag(
        ("--output", "-o"),
        "Where the command's results go: a file whose extension sets its format (the "
        "command's help lists them; another is refused), or a folder.",
        ("FILE", "DIR")),
    "format": Flag(("--format", "-f"), "How the results print on stdout."),
    "progress": Flag(
        ("--progress/--no-progress",),
        "Show progress on stderr while the command works (only on a terminal)."),
    "trust_code": Flag(
        ("--trust-code",),
        "Run code from outside parcat that a file names (a replay's environment, a run's "
        "mission or policy class). Without it a file may name only parcat's own; give it "
        "only for files you trust."),
    "trace": Flag(
        ("--trace",),
        "Write the run's timeline to FILE (Chrome trace-event JSON: ui.perfetto.dev).",
        ("FILE",)),
}
"""Every shared flag by name (the YAML key of ``-c``; ``set``: ``--set``)."""

Missions = Annotated[list[str] | None, SHARED["mission"].option()]
Policies = Annotated[list[str] | None, SHARED["policy"].option()]
Config = Annotated[Path | None, SHARED["config"].option()]
Overrides = Annotated[list[str] | None, SHARED["set"].option()]
Seed = Annotated[int | None, SHARED["seed"].option()]
Jobs = Annotated[int | None, SHARED["jobs"].option()]
OutputFile = Annotated[Path | None, SHARED["output"].option("FILE")]
OutputDir = Annotated[Path | None, SHARED["output"].option("DIR")]
Format = Annotated[OutputFormat, SHARED["format"].option()]
TableOrJson = Annotated[SummaryFormat, SHARED["format"].option()]
Progress = Annotated[bool, SHARED["progress"].option()]
Trace = Annotated[Path | None, SHARED["trace"].option()]
TrustCode = Annotated[bool, SHARED["trust_code"].option()]

Episodes = Annotated[
    int, typer.Option("--episodes", "-n", metavar="N", help="Episodes per mission.")
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
    typer.Option("--action-timeout-ms", metavar="MS",
                 help="Late actions get the mission's default action."),
]
Gpus = Annotated[
    int | None, typer.Option("--gpus", metavar="N", help="GPUs to use (default: detected).")
]
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
    typer.Option("--address", metavar="HOST:PORT", help="Ray cluster address with --backend "
                 "ray (default: start a local cluster)."),
]
Retries = Annotated[
    int, typer.Option("--retries", metavar="N", help="Re-runs of an episode whose worker died.")
]
EpisodeTimeout = Annotated[
    float | None,
    typer.Option("--episode-timeout", metavar="SECONDS",
                 help="Stop an episode after this many seconds."),
]
FailFast = Annotated[bool, typer.Option("--fail-fast", help="Stop at the first failed episode.")]


def one_value(values: list[str] | None, flag: str, command: str) -> str | None:
    """The one value of a shared flag a command takes once (``train -m``, ``compare -p``).

    Raises:
        ConfigError: the flag was given more than once, naming what arrived.
    """
    if not values:
        return None
    if len(values) > 1:
        named = ", ".join(clip(v, 40) for v in values[:3]) + (", ..." if len(values) > 3
                                                               else "")
        raise ConfigError(f"parcat {command} takes one {flag}, got {len(values)} ({named}); "
                          f"give one")
    return values[0]


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
    trust_code: TrustCode = False,
) -> EvalArgs:
    """The flags ``eval`` and ``plan`` share, as one :class:`EvalArgs` (Typer reads this
    signature through :func:`with_eval_args`)."""
    with held_imports():
        from parcat.eval.eval_args import EvalArgs
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
        trust_code=trust_code,
    )


def with_eval_args(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the flags of :func:`eval_args` and ``-c FILE`` as well as its own.

    Typer sees ``-c``, every flag of :func:`eval_args`, then ``command``'s own parameters
    but the first; ``command`` is called with one validated :class:`EvalArgs` first, then
    its own parameters, the ``-c`` file's keys applied below the flags given
    (:mod:`parcat.cli.flag_config`). A bad flag or key is one line on stderr and exit
    code 2, as in the command.
    """
    shared = {p.name: p for p in _parameters(eval_args)}
    own = _parameters(command, skip=1)
    keyword = inspect.Parameter.KEYWORD_ONLY
    config = inspect.Parameter("config", keyword, default=None, annotation=Config)
    context = inspect.Parameter("ctx", keyword, annotation=typer.Context)
    types = {p.name: p.annotation for p in [*shared.values(), *own]}

    @functools.wraps(command)
    def run(ctx: typer.Context, config: Path | None = None, **values: Any) -> None:
        with user_errors():
            if config is not None:
                from parcat.cli.flag_config import apply_config

                values = apply_config(config, ctx, values, types)
            args = eval_args(**{name: values.pop(name) for name in shared})
        command(args, **values)

    parameters = [p.replace(kind=keyword) for p in [*shared.values(), *own]]
    parameters = [context, parameters[0], parameters[1], config, *parameters[2:]]
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
