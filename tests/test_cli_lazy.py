"""The CLI imports a command's module only when that command is used: ``parcat --help`` and
``parcat --version`` import none (nor numpy, gymnasium, rich), a command's ``--help``
imports only its own module, and every help still shows what it did."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from parcat.cli.lazy import LazyCommand
from parcat.cli.main import COMMANDS

TIMEOUT_S = 120.0
"""Upper bound on one run (never reached when things work)."""
HEAVY = ("numpy", "gymnasium", "yaml", "parcat.eval.evaluate", "parcat.train", "parcat.sim",
         "parcat.parallel.run_options", "parcat.envs.missions", "parcat.cli.render")
"""Modules no help text needs: the libraries and parcat's eval, train and sim stacks."""
COMMAND_MODULES = {"parcat.cli.eval_cmd", "parcat.cli.plan_cmd", "parcat.cli.train_cmd",
                   "parcat.cli.compare_cmd", "parcat.cli.rank_cmd", "parcat.cli.bench_cmd",
                   "parcat.cli.plot_cmd", "parcat.cli.sim_cmd", "parcat.cli.missions_cmd",
                   "parcat.cli.policies_cmd", "parcat.cli.replay_cmd",
                   "parcat.cli.serve_cmd"}
RUN = """
import json, sys
from parcat.cli.main import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as modules:
    json.dump(sorted(sys.modules), modules)
sys.exit(code)
"""
"""Run the CLI, then write the names of the modules it imported to ``argv[1]``."""


def run_cli(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """One real run (wide, so rich writes each summary on one line) and its modules."""
    modules = tmp_path / "modules.json"
    run = subprocess.run([sys.executable, "-c", RUN, str(modules), *args], text=True,
                         capture_output=True, env={**os.environ, "COLUMNS": "200"},
                         timeout=TIMEOUT_S, check=False)
    return run, set(json.loads(modules.read_text()))


def under(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m in names or m.startswith(tuple(n + "." for n in names)))


def test_importing_the_cli_imports_no_command_nor_library() -> None:
    script = "import json, sys\nimport parcat.cli.main\nprint(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", script], text=True, capture_output=True,
                         timeout=TIMEOUT_S, check=True)
    modules = set(json.loads(run.stdout))
    assert under(modules, (*HEAVY, "rich", "pydantic")) == []
    assert sorted(m for m in modules if m.startswith("parcat")) == [
        "parcat", "parcat.cli", "parcat.cli.common", "parcat.cli.entry", "parcat.cli.lazy",
        "parcat.cli.main", "parcat.cli.stdout", "parcat.core", "parcat.core.errors"]


def test_help_lists_every_command_with_its_summary_and_imports_none(tmp_path: Path) -> None:
    run, modules = run_cli(["--help"], tmp_path)
    assert (run.returncode, run.stderr) == (0, "")
    lines = run.stdout.splitlines()
    for entry in COMMANDS:
        assert any(line.split() == ["│", entry.name, *entry.summary.split(), "│"]
                   for line in lines), (entry.name, run.stdout)
    assert under(modules, HEAVY) == [] and modules & COMMAND_MODULES == set()


def test_version_imports_no_command_nor_rich(tmp_path: Path) -> None:
    run, modules = run_cli(["--version"], tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (0, "parcat 0.1.0\n", "")
    assert under(modules, (*HEAVY, "rich")) == [] and modules & COMMAND_MODULES == set()


def test_a_mistyped_command_gets_a_suggestion_and_imports_no_command(tmp_path: Path) -> None:
    run, modules = run_cli(["evl", "-m", "harvest"], tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (
        2, "", "parcat: error: parcat: No such command 'evl'. Did you mean 'eval'?\n")
    assert modules & COMMAND_MODULES == set()


def command_paths() -> list[list[str]]:
    paths: list[list[str]] = []
    for entry in COMMANDS:
        paths.append([entry.name])
        command = entry.load()
        paths += [[entry.name, name] for name in getattr(command, "commands", {})]
    return paths


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_each_commands_help_shows_its_options_and_imports_only_its_module(
        path: list[str], tmp_path: Path) -> None:
    run, modules = run_cli([*path, "--help"], tmp_path)
    assert (run.returncode, run.stderr) == (0, ""), run.stderr
    assert f"Usage: parcat {' '.join(path)} " in run.stdout
    entry = next(e for e in COMMANDS if e.name == path[0])
    command = entry.load()
    if len(path) > 1:
        command = command.commands[path[1]]
    for param in command.params:
        if param.param_type_name == "option" and not param.hidden:
            assert param.opts[0] in run.stdout, (param.opts, run.stdout)
    own = entry.target.partition(":")[0]
    assert modules & COMMAND_MODULES == {own}
    if path[0] not in ("train", "sim"):  # their flags' types live in the train and sim stacks
        assert under(modules, HEAVY) == []


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda e: e.name)
def test_each_summary_is_the_first_paragraph_of_the_commands_own_help(
        entry: LazyCommand) -> None:
    first = inspect.cleandoc(entry.load().help).split("\n\n")[0]
    assert entry.summary == " ".join(first.split())


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_ctrl_c_while_a_command_is_imported_arrives_after_as_one_line() -> None:
    # in a fresh process: a signal sent to the process reaches any thread that does not
    # block it, and earlier tests leave threads behind in this one; a command's import
    # happens before parcat starts any thread
    code = (
        "import os, signal, subprocess, sys\n"
        # a terminal's fresh process: a blocked mask or SIG_IGN this one holds survive exec
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from parcat.cli.lazy import held_imports\n"
        "try:\n"
        "    with held_imports():\n"
        # from another process, as a terminal's or kill's (one this process sends itself
        # while importing is a library's: OpenBLAS's when it cannot start its threads)
        "        subprocess.run(['kill', '-INT', str(os.getpid())], check=True)\n"
        "        print('the import finished', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        130, "the import finished\n", "parcat: interrupted\n")


def test_a_ctrl_c_a_library_sends_itself_while_imported_is_out_of_memory() -> None:
    # what OpenBLAS does when it cannot start its threads (a low ulimit -v): raise(SIGINT)
    from parcat.cli.entry import signals_held

    with pytest.raises(MemoryError, match="could not start its threads"), signals_held():
        signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize(("argv", "early"), [
    (["eval", "-m", "harvest", "-p", "mod:Policy,ms=5"], True),
    (["plan", "--policy=mod:Policy@2", "-p", "random"], True),
    (["eval", "-p", "random", "-p", "mlp,width=8", "-p", "runs/a"], False),
    (["eval", "-p", "http://127.0.0.1:8000", "-p", "unix:/tmp/s", "-p", "parcat.x:Y"], False),
    (["eval", "-p", "mod:Policy", "--start-method", "spawn"], False),
    (["eval", "-p", "mod:Policy", "--backend", "ray"], False),
    (["train", "-p", "mod:Policy"], False),
])
def test_the_fork_server_starts_before_the_cli_only_for_code_from_outside_parcat(
        argv: list[str], early: bool) -> None:
    """Its check runs in a worker: the fork server imports what workers need while this
    process imports the CLI, which leaves this process's BLAS threads as they were."""
    from parcat.cli.entry import names_foreign_policy

    assert names_foreign_policy(["parcat", *argv]) is early
    # and Ctrl-C and SIGTERM stay held (the resource tracker's start unblocks them)
    code = ("import os, signal, sys\nfrom multiprocessing import forkserver\n"
            "from parcat.cli.entry import signals_held, start_fork_server_early\n"
            "with signals_held():\n"
            "    start_fork_server_early(sys.argv)\n"
            "    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])\n"
            "print(forkserver._forkserver._forkserver_pid is not None, "
            "'parcat.cli.main' in sys.modules, os.environ.get('OPENBLAS_NUM_THREADS'), "
            "{signal.SIGINT, signal.SIGTERM} <= mask)\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=env, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(early), "False", "None", "True"]


def test_the_exit_skips_python_s_teardown_and_keeps_its_output_and_code(tmp_path: Path) -> None:
    """Once its exit handlers ran, parcat ends the process: Python's teardown (a garbage
    collection per module) would only cost time. Every line of stdout still arrives through
    a pipe, and the code is the one decided; an error that escapes keeps Python's exit."""
    code = ("import os, sys\n"
            "class Kept:  # freed by Python's teardown, which clears the module\n"
            "    def __del__(self):\n"
            "        os.write(2, b'python teardown\\n')\n"
            "kept = Kept()\n"
            "sys.argv = ['parcat', *sys.argv[1:]]\n"
            "from parcat.cli.entry import main\n"
            "main()\n")
    run = ["eval", "-m", "harvest", "-n", "40", "--set", "max_steps=2", "--jobs", "1"]
    done = subprocess.run([sys.executable, "-c", code, *run, "-f", "json"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert "python teardown" not in done.stderr
    assert len(json.loads(done.stdout)["episodes"]) == 40
    bad = subprocess.run([sys.executable, "-c", code, *run, "--set", "agnets=2"],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert bad.returncode == 2 and bad.stderr.startswith("parcat: error: ")
    assert "python teardown" not in bad.stderr


def test_run_called_in_process_leaves_the_callers_exit_alone() -> None:
    """Only the console script ends the process itself: a program that calls ``run()`` and
    catches its ``SystemExit`` keeps its own exit handlers and exit code."""
    code = ("import atexit, sys\n"
            "atexit.register(print, 'the caller exits')  # before run(): runs after it\n"
            "sys.argv = ['parcat', '--version']\n"
            "from parcat.cli.entry import run\n"
            "try:\n"
            "    run()\n"
            "except SystemExit as end:\n"
            "    print('parcat exited with', end.code)\n"
            "sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[-2:] == ["parcat exited with 0", "the caller exits"]
