"""Exit codes that mean what they say, in real subprocesses: an end of file is an error (1),
not an interrupt (130); stdout on a full disk is one line and 1; a reader that closes the
pipe early gets silence and 141, the shell's code for death by SIGPIPE."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TIMEOUT_S = 120.0
"""Upper bound on any one parcat run (never reached when things work)."""
EVAL = ["eval", "-m", "harvest", "--no-progress"]
FULL_DISK = "parcat: error: cannot write results to stdout: No space left on device\n"
BUFFERING = pytest.mark.parametrize("unbuffered", [False, True],
                                    ids=["buffered", "PYTHONUNBUFFERED"])


def parcat_env(unbuffered: bool = False) -> dict[str, str]:
    """The environment, with Python's stdout buffered as a user's is (or not at all)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return {**env, "PYTHONUNBUFFERED": "1"} if unbuffered else env


def run_parcat(args: list[str], stdout: int, unbuffered: bool = False,
               script: str | None = None) -> subprocess.CompletedProcess[str]:
    command = ["-c", script] if script is not None else ["-m", "parcat"]
    return subprocess.run([sys.executable, *command, *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=parcat_env(unbuffered),
                          timeout=TIMEOUT_S, check=False)


# -- an end of file ---------------------------------------------------------------------------


def test_an_empty_checkpoint_file_is_one_line_exit_2_not_an_interrupt(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    empty = {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    (checkpoint / "manifest.json").write_text(json.dumps(
        {"format": "parcat.policy", "version": 2, "policy": "mlp", "kwargs": {},
         "files": {"arrays.npz": empty}}))
    (checkpoint / "arrays.npz").write_bytes(b"")  # np.load raises EOFError
    run = run_parcat([*EVAL, "-n", "1", "-p", str(checkpoint)], subprocess.DEVNULL)
    # the checkpoint reader names the damage itself (an EOFError nobody expected is
    # test_an_eof_error_from_anywhere_is_an_error_not_an_interrupt below)
    assert (run.returncode, run.stderr) == (2, (
        f"parcat: error: checkpoint '{checkpoint}' is truncated or corrupted: 'arrays.npz' is "
        "not a readable numpy archive (EOFError); restore the checkpoint from a copy or "
        "train it again (mission 'harvest')\n"))


EOF_COMMAND = textwrap.dedent("""
    import sys
    from parcat.cli.main import app, main

    @app.command("read")
    def read() -> None:
        raise EOFError

    sys.exit(main(sys.argv[1:]))
""")


def test_an_eof_error_from_anywhere_is_an_error_not_an_interrupt() -> None:
    run = run_parcat(["read"], subprocess.DEVNULL, script=EOF_COMMAND)
    assert (run.returncode, run.stderr) == (1, (
        "parcat: error: unexpected end of file (EOFError): a file parcat read is empty or "
        "cut short; check the files and folders given on the command line\n"))


# -- stdout on a full disk --------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@BUFFERING
@pytest.mark.parametrize("fmt", ["json", "table", "csv"])
def test_stdout_on_a_full_disk_is_one_line_and_exit_1(fmt: str, unbuffered: bool) -> None:
    with open("/dev/full", "w") as full:
        run = run_parcat([*EVAL, "-n", "1", "-f", fmt], full.fileno(), unbuffered)
    assert (run.returncode, run.stderr) == (1, FULL_DISK)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_help_on_a_full_disk_is_one_line_and_exit_1() -> None:
    with open("/dev/full", "w") as full:
        run = run_parcat(["--help"], full.fileno())
    assert (run.returncode, run.stderr) == (1, FULL_DISK)


# -- a reader that closes the pipe early ------------------------------------------------------


@BUFFERING
@pytest.mark.parametrize("fmt", ["json", "table"])
def test_a_pipe_closed_before_any_output_is_silent_exit_141(fmt: str, unbuffered: bool) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = run_parcat([*EVAL, "-n", "1", "-f", fmt], write_end, unbuffered)
    finally:
        os.close(write_end)
    assert (run.returncode, run.stderr) == (141, "")


def test_head_c_10_reads_the_start_then_parcat_stops_silently_with_141() -> None:
    # ~145 kB of JSON: more than the pipe holds, so parcat is still writing when it closes
    proc = subprocess.Popen([sys.executable, "-m", "parcat", *EVAL, "-n", "150", "-f", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=parcat_env())
    assert proc.stdout is not None and proc.stderr is not None
    try:
        head = proc.stdout.read(10)
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.wait(timeout=TIMEOUT_S)
    finally:
        proc.kill()
        proc.wait()
    assert head == b'{\n  "schem'
    assert (proc.returncode, err) == (141, "")


def test_a_warning_during_a_command_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    from parcat.cli import main as cli
    from parcat.core.errors import one_line_warning

    def warns(argv: object) -> int:
        warnings.warn("the agents step in the episode's process from now on", RuntimeWarning,
                      stacklevel=1)
        return 0

    monkeypatch.setattr(cli, "_invoke", warns)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main([]) == 0
    assert capsys.readouterr().err == \
        "parcat: warning: the agents step in the episode's process from now on\n"
    assert warnings.showwarning is not one_line_warning  # put back afterwards


@pytest.mark.parametrize(("args", "line"), [
    (["eval", "-m", "harvest", "-n", "abc"], "parcat: error: parcat eval: Invalid value for "
     "'--episodes' / '-n': expected a whole number\n"),
    (["eval", "-m", "harvest", "--episode-timeout", "x"], "parcat: error: parcat eval: Invalid "
     "value for '--episode-timeout': expected a number\n"),
])
def test_a_value_of_the_wrong_type_is_said_plainly(args: list[str], line: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from parcat.cli.main import main

    assert main(args) == 2
    assert capsys.readouterr().err == line
