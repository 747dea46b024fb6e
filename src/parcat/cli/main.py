"""The ``parcat`` command: sub-apps composed here; each lives in its own module."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

import typer

from parcat import __version__
from parcat.cli import common, missions_cmd, policies_cmd
from parcat.cli.bench_cmd import bench_command
from parcat.cli.common import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE
from parcat.cli.compare_cmd import compare_command
from parcat.cli.eval_cmd import eval_command
from parcat.cli.plan_cmd import plan_command
from parcat.cli.plot_cmd import plot_command
from parcat.cli.sim_cmd import sim_command
from parcat.cli.train_cmd import train_command

app = typer.Typer(
    name="parcat",
    help="Parallel evaluation, training and simulation for multi-agent RL.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
app.command("eval")(eval_command)
app.command("plan")(plan_command)
app.command("train")(train_command)
app.command("compare")(compare_command)
app.command("bench")(bench_command)
app.command("plot")(plot_command)
app.command("sim")(sim_command)
app.add_typer(missions_cmd.app, name="missions")
app.add_typer(policies_cmd.app, name="policies")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"parcat {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Parallel evaluation, training and simulation for multi-agent RL."""


# Typer vendors click from 0.2x on; reach its exception classes through a public name so
# this works whichever click Typer carries.
_CLICK_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: end the run like Ctrl-C, but exit with 143."""


def _on_sigterm(signum: int, frame: object) -> None:
    common.TERMINATED.set()
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; bad flags get one line on stderr and exit code 2."""
    command = typer.main.get_command(app)
    common.TERMINATED.clear()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = command.main(
            args=list(argv) if argv is not None else None,
            prog_name="parcat",
            standalone_mode=False,
        )
    except _CLICK_USAGE_ERROR as exc:
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":
            return 0  # Typer has already printed the help
        where = f"{ctx.command_path}: " if ctx is not None else ""
        message = exc.format_message()  # type: ignore[attr-defined]
        print(f"parcat: error: {where}{message}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated:
        return EXIT_TERMINATED
    except (typer.Abort, KeyboardInterrupt):
        # a second Ctrl-C while the first was being handled: stop at once
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code == EXIT_INTERRUPTED and common.TERMINATED.is_set():
        return EXIT_TERMINATED
    return code if isinstance(code, int) else 0


def run() -> None:
    """Run the CLI and exit (the console script is :func:`parcat.cli.entry.run`)."""
    from parcat.cli.entry import run as entry

    entry()
