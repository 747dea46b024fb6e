"""Flags declared once: every command that takes one of these takes it from here.

:data:`SHARED` holds the flags several commands take: each has one short form, one metavar
and one help text in every command (tests/test_cli_flags.py walks every command to keep it
so). ``eval`` and ``plan`` share :class:`EvalFlags`. The flags' types come from light
modules, so a command's ``--help`` does not import the evaluation stack.
"""

# No `from __future__ import annotations`: the fields of EvalFlags keep their types as
# objects, so a subclass's generated __init__ (which Typer reads) resolves them in any module.
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parcat.cli.common import OutputFormat, SummaryFormat
from parcat.cli.flag_config import Settings
from parcat.cli.lazy import held_imports
from parcat.core.errors import ConfigError, clip
from parcat.core.raycluster import Backend as BackendKind
from parcat.eval.rating_model import RatingModel
from parcat.ipc.process import StartMethod as StartMethodKind
from parcat.parallel.planner import ExecutorKind, PolicyStrategy

if TYPE_CHECKING:
    from parcat.eval.eval_args import EvalArgs


RUN = "Options"
PARALLEL = "Parallelism"
LIMITS = "Failures and time limits"
OUTPUT = "Output"
COMPARE = "Comparing policies"
"""The panels ``--help`` groups options in, in the order a command first names them."""


@dataclass(frozen=True)
class Flag:
    """A flag several commands take, spelled the same in each; its help text starts the same
    and ends with what the command adds."""

    decls: tuple[str, ...]
    """The long form (with ``/--no-...`` for an on/off flag), then the short form if any."""
    help: str
    metavars: tuple[str, ...] = ()
    """What ``--help`` may show for the value (none: a choice or on/off flag)."""
    panel: str = RUN

    def option(self, metavar: str | None = None, aliases: tuple[str, ...] = (),
               more: str = "") -> Any:
        """This flag as a ``typer.Option`` showing ``metavar`` (default: the first), also
        accepting the older long forms ``aliases`` (train's ``--run-dir``), its help followed
        by the command's own words ``more``."""
        metavar = metavar or next(iter(self.metavars), None)
        if metavar is not None and metavar not in self.metavars:
            raise ValueError(f"metavar {metavar!r} of {self.decls[0]} not in {self.metavars}")
        complete = complete_missions if self.decls[0] == "--mission" else None
        return typer.Option(*self.decls, *aliases, metavar=metavar,
                            help=f"{self.help} {more}".strip(), rich_help_panel=self.panel,
                            autocompletion=complete)


def complete_missions(incomplete: str) -> list[str]:
    """The missions reachable by name that start with ``incomplete`` (shell completion)."""
    from parcat.envs.missions import mission_files
    return sorted(name for name in mission_files() if name.startswith(incomplete))


SHARED: dict[str, Flag] = {
    "mission": Flag(
        ("--mission", "-m"),
        "Mission: a name (parcat missions list), a YAML path, gymnasium:ENV_ID, "
        "module:callable or a module path.",
        ("MISSION",)),
    "policy": Flag(
        ("--policy", "-p"),
        # "\\[": rich would read "[@WEIGHT]" as markup and drop it
        "Policy NAME[,KEY=VALUE...]\\[@WEIGHT]: a built-in (parcat policies list), "
        "module:Class or a run directory of parcat train, with its settings and its share "
        "of the agents.",
        ("SPEC",)),
    "config": Flag(
        ("--config", "-c"),
        "YAML file of settings; flags given on the command line win over it.",
        ("FILE",)),
    "set": Flag(
        ("--set",),
        "Set a mission parameter, KEY=VALUE (e.g. max_steps=200; parcat missions show "
        "MISSION lists them); repeat for several.",
        ("KEY=VALUE",)),
    "seed": Flag(
        ("--seed",),
        "Base seed; every random number of the command derives from it.",
        ("N",)),
    "jobs": Flag(
        ("--jobs", "-j"),
        "How many CPUs (worker processes) parcat may use at most.",
        ("N",), PARALLEL),
    "output": Flag(
        ("--output", "-o"),
        "Where the results go.",
        ("FILE", "DIR"), OUTPUT),
    "format": Flag(("--format", "-f"), "How the results print on stdout.", (), OUTPUT),
    "progress": Flag(
        ("--progress/--no-progress",),
        "Show progress on stderr while the command works (only on a terminal).", (), OUTPUT),
    "trust_code": Flag(
        ("--trust-code",),
        "Run code from outside parcat that a file names (a replay's environment, a run's "
        "mission or policy class). Without it a file may name only parcat's own; give it "
        "only for files you trust."),
    "trace": Flag(
        ("--trace",),
        "Write the run's timeline to FILE (Chrome trace-event JSON: ui.perfetto.dev).",
        ("FILE",), OUTPUT),
}
"""Every shared flag by name."""

Missions = Annotated[list[str] | None, SHARED["mission"].option(more="Repeat for several.")]
Policies = Annotated[list[str] | None, SHARED["policy"].option(
    more="Repeat for several: they share the agents (default: the mission's heuristic).")]
Overrides = Annotated[list[str] | None, SHARED["set"].option()]
Seed = Annotated[int | None, SHARED["seed"].option()]
OutputFile = Annotated[Path | None, SHARED["output"].option("FILE")]
Format = Annotated[OutputFormat, SHARED["format"].option()]
Rating = Annotated[RatingModel, typer.Option(
    "--rating", help="Rank a --cross population by Bradley–Terry ratings (strength is one "
    "number), or by α-Rank's mass (a beats b beats c beats a: the cycle shares it).")]
TableOrJson = Annotated[SummaryFormat, SHARED["format"].option()]
Progress = Annotated[bool, SHARED["progress"].option()]
Trace = Annotated[Path | None, SHARED["trace"].option()]
TrustCode = Annotated[bool, SHARED["trust_code"].option()]
Backend = Annotated[BackendKind | None, typer.Option(
    "--backend", rich_help_panel=PARALLEL, help="local: worker processes on this machine; "
    "ray: on a Ray cluster (episodes as tasks, environment workers as actors).")]
Address = Annotated[str | None, typer.Option(
    "--address", metavar="HOST:PORT", rich_help_panel=PARALLEL,
    help="Ray cluster address with --backend ray (default: start a local cluster).")]


def one_value(values: list[str] | None, flag: str, command: str) -> str | None:
    """The one value of a shared flag a command takes once (``train -m``, ``compare -p``)."""
    if not values:
        return None
    if len(values) > 1:
        named = ", ".join(clip(v, 40) for v in values[:3]) + (", ..." if len(values) > 3
                                                               else "")
        raise ConfigError(f"parcat {command} takes one {flag}, got {len(values)} ({named}); "
                          f"give one")
    return values[0]


@dataclass(frozen=True)
class EvalFlags(Settings):
    """The flags ``eval`` and ``plan`` share (their settings classes extend it)."""

    missions: Missions = None
    policies: Policies = None
    config: Annotated[Path | None, SHARED["config"].option(
        more="Its keys are the flags' long names (missions, policies, episodes, set, ...).")
    ] = None
    episodes: Annotated[int, typer.Option(
        "--episodes", "-n", metavar="N", rich_help_panel=RUN,
        help="Episodes per mission.")] = 10
    seed: Seed = 0
    set: Overrides = None
    jobs: Annotated[int | None, SHARED["jobs"].option(
        more="Default: every CPU this process may use.")] = None
    executor: Annotated[ExecutorKind, typer.Option(
        rich_help_panel=PARALLEL, help="Where episodes run: inline (one at a time in this "
        "process), thread, process (worker processes), ray; auto: the planner picks.")
    ] = ExecutorKind.AUTO
    parallel_policy: Annotated[bool, typer.Option(
        "--parallel-policy", rich_help_panel=PARALLEL,
        help="Also compute the agents' actions of one step in parallel.")] = False
    policy_strategy: Annotated[PolicyStrategy, typer.Option(
        rich_help_panel=PARALLEL, help="How, with --parallel-policy.")] = PolicyStrategy.AUTO
    concurrency: Annotated[int | None, typer.Option(
        metavar="N", rich_help_panel=PARALLEL, help="Agent calls in flight at most when the "
        "policy's step waits (a server, an API) rather than computes (default: every agent "
        "of every episode, up to 256).")] = None
    lockstep: Annotated[int | None, typer.Option(
        metavar="K", rich_help_panel=PARALLEL, help="Episodes each worker plays side by side, "
        "one policy call per step for all of them (default: the planner's choice; 1: one at "
        "a time).")] = None
    action_timeout_ms: Annotated[float | None, typer.Option(
        metavar="MS", rich_help_panel=LIMITS, help="Late actions get the mission's default "
        "action (for an async policy: each call, its retries included).")] = None
    gpus: Annotated[int | None, typer.Option(
        metavar="N", rich_help_panel=PARALLEL, help="GPUs to use (default: detected).")
    ] = None
    start_method: Annotated[StartMethodKind | None, typer.Option(
        rich_help_panel=PARALLEL, help="How worker processes start (default: forkserver "
        "where the platform has it).")] = None
    retries: Annotated[int, typer.Option(
        metavar="N", rich_help_panel=LIMITS, help="Re-runs of an episode whose worker died, "
        "and retries of an async policy's call after a transient error (a dropped "
        "connection, HTTP 429 or 5xx, parcat.TransientError).")] = 1
    episode_timeout: Annotated[float | None, typer.Option(
        metavar="SECONDS", rich_help_panel=LIMITS,
        help="Stop an episode after this many seconds.")] = None
    fail_fast: Annotated[bool, typer.Option(
        "--fail-fast", rich_help_panel=LIMITS, help="Stop at the first failed episode.")
    ] = False
    backend: Backend = BackendKind.LOCAL
    address: Address = None
    trust_code: TrustCode = False

    def args(self, trace: Path | None = None) -> "EvalArgs":
        """These flags as one :class:`EvalArgs` (not yet validated: its ``build`` does)."""
        with held_imports():
            from parcat.eval.eval_args import EvalArgs
            from parcat.parallel.run_options import RunOptions
        options = RunOptions(
            jobs=self.jobs,
            # --backend ray is the CLI's other word for --executor ray
            executor=ExecutorKind.RAY if self.backend is BackendKind.RAY else self.executor,
            parallel_policy=self.parallel_policy, policy_strategy=self.policy_strategy,
            action_timeout_ms=self.action_timeout_ms, gpus=self.gpus,
            start_method=self.start_method, retries=self.retries,
            episode_timeout_s=self.episode_timeout, fail_fast=self.fail_fast,
            address=self.address, concurrency=self.concurrency, lockstep=self.lockstep,
        )
        return EvalArgs(
            missions=tuple(self.missions or ()), policies=tuple(self.policies or ()),
            episodes=self.episodes, seed=0 if self.seed is None else self.seed,
            overrides=tuple(self.set or ()), options=options, trace=trace,
            trust_code=self.trust_code,
        )


@dataclass(frozen=True)
class EvalSettings(EvalFlags):
    """Everything ``parcat eval`` is told: the flags it shares with ``plan``, and its own."""

    format: Format = OutputFormat.TABLE
    output: Annotated[Path | None, SHARED["output"].option(
        "FILE", more="A file: .json (every episode) or .csv (the summary table).")] = None
    trace: Trace = None
    progress: Progress = True
    precision: Annotated[float | None, typer.Option(
        "--precision", metavar="HALF_WIDTH", rich_help_panel=RUN,
        help="Play more episodes until each mission's mean return per agent is known to "
        "within ± HALF_WIDTH (its 95% interval, in the mission's return units, e.g. 0.5); "
        "with --cross: until neighbours in the ranking are told apart to within "
        "HALF_WIDTH Elo points.")] = None
    max_episodes: Annotated[int, typer.Option(
        "--max-episodes", metavar="N", rich_help_panel=RUN,
        help="Cap for --precision (with --cross: per pair).")] = 10_000
    resume: Annotated[bool, typer.Option(
        "--resume", rich_help_panel=OUTPUT,
        help="Keep the finished episodes in --output; run the rest.")] = False
    each: Annotated[bool, typer.Option(
        "--each", rich_help_panel=COMPARE, help="Evaluate every -p on its own (all agents "
        "play it) on the same episodes; one row per policy, compared with the first.")] = False
    against: Annotated[str | None, typer.Option(
        "--against", metavar="SPEC", rich_help_panel=COMPARE, help="With --each: the "
        "opponent every -p plays, in both seats on the same seeds, on every mission "
        "(default: 'random', on turn-based games only; other missions: all agents play the "
        "policy).")] = None
    candidate: Annotated[str | None, typer.Option(
        "--candidate", metavar="SPEC", rich_help_panel=COMPARE, help="Value over "
        "replacement: play the -p policies as a pool, then SPEC in each one's place on the "
        "same seeds; print what it adds to the pool's mean score.")] = None
    cross: Annotated[bool, typer.Option(
        "--cross", rich_help_panel=COMPARE, help="Play every pair of -p policies against "
        "each other across the mission's two sides (both orders, the same seeds); print the "
        "matrix and the Bradley–Terry ratings with 95% intervals.")] = False
    rating: Rating = RatingModel.BRADLEY_TERRY
    replay_dir: Annotated[Path | None, typer.Option(
        "--replay-dir", metavar="DIR", rich_help_panel=OUTPUT, help="Record every episode "
        "into DIR (one .npz each, and index.json); play one back with `parcat replay "
        "DIR/FILE`.")] = None
