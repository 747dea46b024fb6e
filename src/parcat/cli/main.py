"""The ``parcat`` command: sub-commands, each in its own module, imported only when used."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

import typer

import parcat
from parcat import __version__
from parcat.cli import common
from parcat.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE_CLOSED,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from parcat.cli.entry import postponed, say, stop_now
from parcat.cli.lazy import LazyCommand, LazyGroup, examples_epilog
from parcat.cli.stdout import StdoutError, guarded_stdout
from parcat.core.errors import one_line_warning

COMMANDS = (
    LazyCommand("eval", "parcat.cli.eval_cmd:eval_command",
                "Evaluate policies on missions and print per-mission, per-policy statistics.",
                ("parcat eval -m harvest -n 20                  # the mission's heuristic",
                 "parcat eval -m harvest -p greedy -p random    # two policies share the agents",
                 "parcat eval -m harvest -p mlp -p random --each -o results.json",
                 "parcat eval -p runs/harvest --precision 0.5  # a trained run, its mission")),
    LazyCommand("replay", "parcat.cli.replay_cmd:replay_command",
                "Play back an episode recorded with `parcat eval --replay-dir`: in the "
                "terminal, or as a GIF, MP4 or PNG.",
                ("parcat eval -m harvest -n 2 --replay-dir replays",
                 "parcat replay replays/harvest-000000.npz",
                 "parcat replay replays/harvest-000000.npz -o episode.gif")),
    LazyCommand("plan", "parcat.cli.plan_cmd:plan_command",
                "Show how `parcat eval` with the same flags would use the machine, and why.",
                ("parcat plan -m harvest -n 100",
                 "parcat plan -m harvest -p mlp -j 4 -f json")),
    LazyCommand("train", "parcat.cli.train_cmd:train_command",
                "Train one independent learner per agent; checkpoints load with "
                "`parcat eval -p RUN`.",
                ("parcat train -c configs/cartpole-dqn.yaml",
                 "parcat train -m harvest --learner ppo --epochs 50 -o runs/harvest",
                 "parcat train -m harvest --learner ppo -o runs/harvest --epochs 80 --resume",
                 "parcat eval -m harvest -p runs/harvest/best")),
    LazyCommand("compare", "parcat.cli.compare_cmd:compare_command",
                "Difference B − A and P(B > A) per mission and overall, with bootstrap 95% "
                "intervals.",
                ("parcat eval -m harvest -p random -o a.json",
                 "parcat eval -m harvest -p greedy -o b.json",
                 "parcat compare a.json b.json")),
    LazyCommand("rank", "parcat.cli.rank_cmd:rank_command",
                "Rank the policies of a `parcat eval --cross` file: Bradley–Terry ratings "
                "with 95% intervals, P(best), and outcomes per side.",
                ("parcat eval -m evade -p greedy -p random -p noop --cross -o cross.json",
                 "parcat rank cross.json")),
    LazyCommand("bench", "parcat.cli.bench_cmd:bench_command",
                "Measure the fixed suite and append one record to the history.",
                ("parcat bench --quick",
                 "parcat bench --compare -o scaling.png")),
    LazyCommand("plot", "parcat.cli.plot_cmd:plot_command",
                "Draw training curves, results with 95% intervals, a cross-play map or a "
                "simulation's trajectories: in the terminal, or to a file with matplotlib.",
                ("parcat plot runs/harvest",
                 "parcat plot runs/harvest --field loss -o loss.png",
                 "parcat plot results.json -o results.png")),
    LazyCommand("sim", "parcat.cli.sim_cmd:sim_command",
                "Simulate a mission in real time, each agent at its own cycle_time, and "
                "evaluate it.",
                ("parcat sim                          # configs/sim.yaml",
                 "parcat sim --mode sequential --iters 500",
                 "parcat sim --set pursuers=4 -o sim-out")),
    LazyCommand("serve", "parcat.cli.serve_cmd:serve_command",
                "Serve a policy over HTTP, for `parcat eval -p http://HOST:PORT`.",
                ("parcat serve -p mlp,width=256 -m harvest --port 8000",
                 "parcat eval -m harvest -p http://127.0.0.1:8000")),
    LazyCommand("missions", "parcat.cli.missions_cmd:app", "List and inspect missions.",
                ("parcat missions list", "parcat missions show harvest")),
    LazyCommand("policies", "parcat.cli.policies_cmd:app", "List the built-in policies.",
                ("parcat policies list", "parcat eval -m harvest -p mlp,width=64")),
)
"""Every sub-command, in the order ``parcat --help`` lists them, with its summary."""


class Carried(BaseException):
    """What a command raised that Click's ``main`` would reword (``EOFError`` as Ctrl-D,
    Ctrl-C, a broken pipe), carried past it to :func:`main`, which maps it itself."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(exc)
        self.exc = exc


class ParcatGroup(LazyGroup):
    """The ``parcat`` group: :data:`COMMANDS`, imported when used."""

    lazy_commands = COMMANDS

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (EOFError, KeyboardInterrupt, OSError) as exc:
            raise Carried(exc) from None


app = typer.Typer(name="parcat", cls=ParcatGroup, no_args_is_help=True, add_completion=True,
                  help="Parallel evaluation, training and simulation for multi-agent RL.",
                  epilog=examples_epilog((
                      "parcat eval -m harvest -n 20",
                      "parcat train -c configs/cartpole-dqn.yaml -o runs/cartpole",
                      "parcat eval -p runs/cartpole     # the trained run, on its mission",
                      "parcat COMMAND --help")),
                  pretty_exceptions_show_locals=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"parcat {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version.")) -> None:
    """Parallel evaluation, training and simulation for multi-agent RL."""


# reached through a public name: whichever click Typer carries (it vendors one from 0.2x on)
_CLICK_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_CLICK_EXCEPTION: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class SigtermInterrupt(KeyboardInterrupt):
    """SIGTERM arrived: end the run like Ctrl-C, but exit with 143."""


TERM_GRACE_S = 5.0
"""How long a run may take to stop after SIGTERM before it is stopped at once (unless parcat
is cleaning up: its own steps have deadlines), whatever user code does."""


def _on_sigterm(signum: int, frame: object) -> None:
    if postponed(signum):
        return
    if common.TERMINATED.is_set():
        stop_now(EXIT_TERMINATED, "parcat: terminated again: stopping now")
    common.TERMINATED.set()
    threading.Thread(target=_stop_unless_stopping, name="parcat-sigterm", daemon=True).start()
    raise SigtermInterrupt


_RETURNED = threading.Event()
"""Set when :func:`main` returns: a caller in the same process goes on undisturbed."""


def _stop_unless_stopping() -> None:
    """After :data:`TERM_GRACE_S`: stop at once, unless parcat is cleaning up (or done)."""
    if _RETURNED.wait(TERM_GRACE_S):
        return
    ipc = sys.modules.get("parcat.ipc.process")
    if ipc is not None and ipc.SHUTTING_DOWN.is_set():
        return
    stop_now(EXIT_TERMINATED,
             f"parcat: terminated: the run did not stop within {TERM_GRACE_S:g} s; stopping now")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; the exit code: 0 done, 1 failed, 2 bad input, 130 Ctrl-C, 141 stdout
    closed by its reader, 143 SIGTERM. Every error is one line on stderr."""
    common.TERMINATED.clear()
    common.INTERRUPT_SAID.clear()
    _RETURNED.clear()
    ipc = sys.modules.get("parcat.ipc.process")  # not imported here: --help stays light
    if ipc is not None:
        ipc.SHUTTING_DOWN.clear()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    shown, warnings.showwarning = warnings.showwarning, one_line_warning
    try:
        with guarded_stdout():
            code = _invoke(argv)
    except (KeyboardInterrupt, EOFError, StdoutError, typer.Abort, _CLICK_EXCEPTION) as exc:
        code = _exit_code(exc)
    finally:
        _RETURNED.set()
        signal.signal(signal.SIGTERM, previous)
        warnings.showwarning = shown
    if common.TERMINATED.is_set() and code in (EXIT_OK, EXIT_INTERRUPTED):
        code = EXIT_TERMINATED  # 0: user code swallowed it on its way up
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED) and not common.INTERRUPT_SAID.is_set():
        common.said_interrupted("parcat: interrupted")
    return code


def _invoke(argv: Sequence[str] | None) -> int:
    """Parse and run one command line through Click's own ``main`` (which also answers
    shell completion); what a command raised reaches the caller as raised."""
    command = typer.main.get_command(app)
    try:
        result = command.main(argv, prog_name="parcat", standalone_mode=False)
    except Carried as carried:
        exc = carried.exc
    else:
        return result if isinstance(result, int) else 0
    raise exc  # outside the handler: the exception keeps its own context


def _exit_code(exc: BaseException) -> int:
    """The exit code for what a command raised, after one line on stderr."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_TERMINATED if isinstance(exc, SigtermInterrupt) else EXIT_INTERRUPTED
    if isinstance(exc, typer.Abort):
        if isinstance(exc.__context__, KeyboardInterrupt):  # Ctrl-C at a prompt
            return _exit_code(exc.__context__)
        say("parcat: aborted")  # Ctrl-D at a prompt
        return EXIT_FAILED
    if isinstance(exc, StdoutError):
        if exc.pipe_closed:
            return EXIT_PIPE_CLOSED
        say(f"parcat: error: cannot write results to stdout: {exc}")
        return EXIT_FAILED
    if isinstance(exc, EOFError):
        say(f"parcat: error: {unexpected_eof(exc)}")
        return EXIT_FAILED
    if isinstance(exc, _CLICK_USAGE_ERROR):
        if type(exc).__name__ == "NoArgsIsHelpError":
            return EXIT_OK  # Typer has already printed the help
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        message = plain_validation(exc.format_message())  # type: ignore[attr-defined]
        say(f"parcat: error: {where}{message}{positional_hint(ctx, message)}")
        return EXIT_USAGE
    say(f"parcat: error: {exc.format_message()}")  # type: ignore[attr-defined]
    return int(getattr(exc, "exit_code", EXIT_FAILED))  # another of click's errors


def positional_hint(ctx: Any, message: str) -> str:
    """For words a command takes no place for (``parcat eval harvest``): the flag they may
    have meant (``-m``, else ``-p``), else nothing."""
    extra = re.fullmatch(r"Got unexpected extra argument(?:\(s\)|s)? \((.+)\)", message)
    if ctx is None or extra is None or any(p.param_type_name == "argument"
                                           for p in ctx.command.params):
        return ""  # a command with arguments (compare A B) was given too many
    flags = {opt for param in ctx.command.params for opt in getattr(param, "opts", ())}
    for flag, what in (("-m", "missions"), ("-p", "policies")):
        if flag in flags:
            line = " ".join(f"{flag} {word}" for word in extra[1].split())
            return f"; {what} are given with {flag}: {ctx.command_path} {line}"
    return ""


_VALIDATION_WORDING = (
    (r"(?<=: )'.*' is not a valid int(eger)?\.$", "expected a whole number"),
    (r"(?<=: )'.*' is not a valid float\.$", "expected a number"),
)
"""Click's wording of a value of the wrong type, and parcat's."""


def plain_validation(message: str) -> str:
    """``message`` in parcat's words, not Click's."""
    for theirs, ours in _VALIDATION_WORDING:
        message = re.sub(theirs, ours, message)
    return message


def unexpected_eof(exc: EOFError) -> str:
    """What to say about an ``EOFError`` nothing handled (parcat never reads stdin: a file
    ended early): which of parcat's functions was reading, and the fix."""
    package = os.path.dirname(os.path.abspath(parcat.__file__))
    readers = [f for f in traceback.extract_tb(exc.__traceback__)
               if os.path.abspath(f.filename).startswith(package + os.sep)
               and os.path.abspath(f.filename) != os.path.abspath(__file__)]
    where = ""
    if readers:
        path = os.path.relpath(os.path.abspath(readers[-1].filename), os.path.dirname(package))
        where = f", in {path} {readers[-1].name}"
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return (f"unexpected end of file ({detail}{where}): a file parcat read is empty or cut "
            "short; check the files and folders given on the command line")
