"""Every code line of README.md, run: its shell and Python blocks are extracted and run in
order in one folder, as a reader would paste them (YAML blocks that name a file are written
there first). A line that would take minutes runs with a smaller budget (CHEAPER: fewer
episodes, epochs or steps); a line that needs what a test may not do to the machine runs in
a reduced form that still proves it works (REDUCED, each printed with how it ran): installs
are checked to be what .ci/run itself installs and runs, completion is installed into a
temporary HOME and then completes through what it wrote, the Ray lines start real nodes of
their own (one cluster for the block) and stop only those, timing suites run as smoke runs.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

VENV = Path(sys.prefix)
"""The venv this test runs in: README's ``.venv`` (CI's is the checkout's ``.venv``)."""
CI_RUN = ROOT / ".ci" / "run"
HEAD = "HEAD_IP:6379"
"""README's Ray head address; the head started here takes a free port."""
BASH_COMPLETES = ('source ~/.bashrc && COMP_WORDS=(parcat ev) && COMP_CWORD=1 && '
                  '_parcat_completion parcat && test "${COMPREPLY[*]}" = eval')
"""After ``--install-completion``: a new bash's start-up file completes ``parcat ev<TAB>``."""

INSTALL = r"^python3 -m venv|pip install"
"""A line that sets up a venv or installs: .ci/run's to do (:func:`installs`)."""

REDUCED: list[tuple[str, str]] = [
    (INSTALL, "install parts checked to be what .ci/run installs and "
     "runs (same extras, same test command); the rest runs here with this venv"),
    (r"^source ", "this venv's activate script, then its parcat is the one on PATH"),
    (r"--install-completion", "into a temporary HOME, then bash completes `parcat ev` "
     "through the start-up file it wrote"),
    (r"^export ", "set for the lines after it"),
    (r"^ray start", "a real `ray start` of one CPU with its own temp dir and ports "
     "(tests/parallel/raynodes.py); HEAD_IP:6379 is the head's 127.0.0.1:PORT"),
    (r"^ray stop", "stops the nodes started here, at the block's end (the real one stops "
     "every Ray process on the machine)"),
    (r"--backend ray", "on the nodes started above, --jobs 2 --env-workers 2; without "
     "--address through RAY_ADDRESS (one cluster for the block)"),
    (r"^parcat bench|cron-bench", "a smoke run: --quick --repeats 1 --max-jobs 2"),
    (r"benchmarks/parallel\.py", "a smoke run: --quick --repeats 1 --settle 0 --sections 45 "
     "(auto vs inline through evaluate(), and every kind of worker started and measured; "
     "sections 1-3 and 6 are timing loops of minutes on a loaded machine)"),
]
"""(pattern, how the line runs here instead of as written)."""


def _budget(flag: str, value: int) -> Callable[[str], str]:
    """``flag N`` capped at ``value``, added when missing."""
    def cap(line: str) -> str:
        found = re.search(rf"{flag} (\d+)", line)
        if found is None:
            return _add(line, f"{flag} {value}")
        return line.replace(found.group(0), f"{flag} {min(int(found.group(1)), value)}")
    return cap


def _add(line: str, extra: str) -> str:
    """``extra`` added to the command, before a pipe."""
    command, pipe, rest = line.partition(" | ")
    return f"{command} {extra}{pipe}{rest}"


CHEAPER: list[tuple[str, Callable[[str], str]]] = [
    (r"^parcat train .*--resume", lambda line: re.sub(r"--epochs \d+", "--epochs 3", line)),
    (r"--total-steps \d+", lambda line: re.sub(r"--total-steps \d+", "--total-steps 1000",
                                                line)),
    (r"^parcat train (?!.*(--resume|--total-steps))", _budget("--epochs", 2)),
    (r"--seeds \d+-\d+", lambda line: re.sub(r"--seeds \d+-\d+", "--seeds 0-1", line)),
    (r"^parcat train ", lambda line: _add(line, "--eval-episodes 1")),
    (r"runs/old", lambda line: line.replace("runs/old", "runs/goal_tasks")),
    (r"^(python -m )?parcat eval (?!.*(-n|--episodes|--precision) )", _budget("-n", 4)),
    (r"^(python -m )?parcat eval .*(-n|--episodes) ", lambda line: re.sub(
        r"(-n|--episodes) (\d+)", lambda m: f"{m[1]} {min(int(m[2]), 5)}", line)),
    (r" --cross", lambda line: re.sub(r"-n \d+", "-n 2", line)),
    (r"--precision (?!.*--max-episodes)", lambda line: _add(
        line, f"--max-episodes {4 if '--cross' in line else 12}")),
    (r"^(python -m )?parcat eval -m (harvest|evade)(?!.*max_steps)(?!.*-p runs/)",
     lambda line: _add(line, "--set max_steps=50")),
    (r"knights_archers_zombies", lambda line: _add(line, "--set max_cycles=100")),
    (r"^parcat sim ", lambda line: _add(line, "--iters 40")),
    # README plots this record's episode 1: sim.yaml's first episode ends by step 200 (its
    # max_steps), in real time later than step 40 on a loaded machine
    (r"^parcat sim .*-o runs/sim", lambda line: line.replace("--iters 40", "--iters 210")),
    (r"^scripts/ci-eval\.sh", lambda line: f"EPISODES=4 {line}"),
    (r"^source \.venv/bin/activate$", lambda line: f"source {VENV}/bin/activate && "
     f'test "$(command -v parcat)" = {VENV}/bin/parcat'),
    (r"--install-completion", lambda line: f"{line} && {BASH_COMPLETES}"),
    (r"--backend ray", lambda line: re.sub(r"--(jobs|env-workers) \d+", r"--\1 2", line)),
    (r"--backend ray(?!.*--address)", lambda line: f"RAY_ADDRESS={HEAD} {line}"),
    (r"^parcat bench", lambda line: _add(line, "--repeats 1 --max-jobs 2")),
    (r"cron-bench", lambda line: f"QUICK=1 REPEATS=1 MAX_JOBS=2 {line}"),
    (r"benchmarks/parallel\.py", lambda line: _add(  # beside tests/, which it imports
        line.replace("benchmarks/", f"{ROOT}/benchmarks/"),
        "--quick --repeats 1 --settle 0 --sections 45")),
]
"""(pattern, the same command with a smaller budget)."""


def code_blocks() -> list[tuple[str, str]]:
    """README's fenced blocks as (language, code), in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", README.read_text(), flags=re.M | re.S)


def shell_lines(code: str) -> list[str]:
    """The commands of a shell block: comments and blank lines dropped."""
    lines = []
    for raw in code.splitlines():
        quote, cut = "", len(raw)
        for i, char in enumerate(raw):
            if char in "'\"" and quote in ("", char):
                quote = "" if quote else char
            elif char == "#" and not quote and (i == 0 or raw[i - 1].isspace()):
                cut = i
                break
        if raw[:cut].strip():
            lines.append(raw[:cut].strip())
    return lines


def reduced(line: str) -> str | None:
    """How ``line`` runs here, where that is not as written."""
    return next((how for pattern, how in REDUCED if re.search(pattern, line)), None)


def ci_lines() -> list[str]:
    """The commands .ci/run runs, ``--quiet`` left out."""
    return [line.replace(" --quiet", "") for line in shell_lines(CI_RUN.read_text())]


def ci_extras() -> set[str]:
    """The extras .ci/run installs parcat with."""
    found = re.search(r"pip install -e '\.\[([\w,]+)\]'", "\n".join(ci_lines()))
    assert found is not None, f"{CI_RUN} installs no .[extras]"
    return set(found[1].split(","))


def installs(line: str) -> tuple[list[str], str]:
    """An install line's parts that .ci/run does not do as README says (problems), and the
    rest of the line, to run here with this venv."""
    problems, rest = [], []
    for part in line.split(" && "):
        pip = re.fullmatch(r"(?:\.venv/bin/)?pip install (?:-e )?'?(?:\.|parcat)"
                           r"(?:\[([\w,]+)\])?'?", part)
        if part == "python3 -m venv .venv" or part.startswith(".venv/bin/python -m pytest"):
            if part not in ci_lines():
                problems.append(f"{part!r} is not a line of {CI_RUN}")
        elif pip is not None:
            missing = set(filter(None, (pip[1] or "").split(","))) - ci_extras()
            if missing:
                problems.append(f"{part!r}: {CI_RUN} does not install {sorted(missing)}")
        elif "pip install" in part:  # never run here: the network, and this venv changed
            problems.append(f"{part!r} installs what {CI_RUN} does not")
        else:
            rest.append(part.replace(".venv/bin/", ""))
    return problems, " && ".join(rest)


def cheaper(line: str) -> str:
    for pattern, change in CHEAPER:
        if re.search(pattern, line):
            line = change(line)
    return line


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def action_server() -> Iterator[int]:
    """The model server examples/http_policy.py calls: every observation gets action 0."""
    class Handler(http.server.BaseHTTPRequestHandler):
        # as a model server would: the client's connection is kept, and each reply goes at
        # once (HTTP/1.0 and Nagle cost every request a new connection and a 40 ms wait)
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            batch = request.get("obs_batch")
            body = json.dumps({"action": 0} if batch is None else
                              {"actions": [0] * len(batch)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


class Reader:
    """Runs README's lines in one folder, remembering what failed and what was skipped."""

    def __init__(self, folder: Path, ports: dict[str, str]) -> None:
        self.folder, self.ports = folder, ports
        (folder / "home").mkdir()
        # HOME is the folder's: completion and Ray's token are written there, not the user's
        self.env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                    f"{os.environ.get('PATH', '')}", "COLUMNS": "120",
                    "HOME": str(folder / "home"), "RAY_USAGE_STATS_ENABLED": "0"}
        self.failures: list[str] = []
        self.reduced: list[str] = []
        self.servers: list[subprocess.Popen[str]] = []
        self.ray_nodes: list[Any] = []
        self.ray_base: Path | None = None
        self.timings: list[tuple[float, str]] = []

    def shell(self, line: str) -> None:
        how = reduced(line)
        if how is not None:
            self.reduced.append(f"{line}  <- {how}")
        if re.search(INSTALL, line):
            problems, line = installs(line)
            self.failures.extend(problems)
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            self.env[name] = value
            return
        if line.startswith("ray start"):
            self.ray_start(line)
            return
        if not line or line == "ray stop":  # the nodes started here stop at the block's end
            return
        command = cheaper(line)
        for old, new in self.ports.items():
            command = command.replace(old, new)
        if command.startswith("parcat serve "):
            self.serve(command)
            return
        start = time.perf_counter()
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=self.folder,
                              env=self.env, capture_output=True, text=True, timeout=300)
        self.timings.append((time.perf_counter() - start, command))
        if done.returncode != 0:
            self.failures.append(f"{command}: exit {done.returncode}\n{done.stderr[-2000:]}")

    def serve(self, command: str) -> None:
        """``parcat serve`` runs until stopped: started here, stopped when its block ends."""
        server = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.folder,
                                  env=self.env, stdout=subprocess.PIPE, text=True,
                                  stderr=subprocess.DEVNULL)
        self.servers.append(server)
        assert server.stdout is not None
        url = server.stdout.readline()  # its one stdout line, once it listens
        if not url.startswith("http://"):
            self.failures.append(f"{command}: printed {url!r}, not its URL")

    def ray_start(self, line: str) -> None:
        """``ray start --head`` or ``--address``: a real node of one CPU, in its own temp
        dir (short: Ray's socket paths) and on free ports, as tests/parallel/raynodes.py
        starts them."""
        from tests.parallel.raynodes import RayNode
        if self.ray_base is None:
            self.ray_base = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
        env = {**self.env, "PYTHONPATH": str(ROOT / "src")}
        try:
            if "--head" in line:
                port = free_port()
                self.ray_nodes.append(RayNode(self.ray_base / "head", env, "head_node",
                                              head_port=port))
                self.ports[HEAD] = f"127.0.0.1:{port}"
            else:
                self.ray_nodes.append(RayNode(self.ray_base / f"node{len(self.ray_nodes)}",
                                              env, "other_node", address=self.ports[HEAD]))
        except (RuntimeError, TimeoutError, KeyError) as exc:
            self.failures.append(f"{line}: {exc}")

    def stop_ray(self) -> None:
        """README's ``ray stop``, for the nodes started here only."""
        stopped = [proc for node in reversed(self.ray_nodes) for proc in node.stop()]
        self.ray_nodes.clear()
        left = [p for p in stopped if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if left:
            self.failures.append(f"Ray processes left after ray stop: {left}")
        if self.ray_base is not None:
            shutil.rmtree(self.ray_base, ignore_errors=True)
            self.ray_base = None

    def stop_servers(self) -> None:
        for server in self.servers:
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
                code = None
            if code != 128 + signal.SIGTERM:
                self.failures.append(f"{server.args}: ended {code} on SIGTERM, not 143")
        self.servers.clear()

    def python(self, code: str, index: int) -> None:
        """A whole script is run as a file (so its ``__main__`` guard is what guards it); a
        fragment (a class) is executed where its names are defined."""
        if "__main__" in code:
            script = self.folder / f"readme_{index}.py"
            script.write_text(code)
            done = subprocess.run([sys.executable, script.name], cwd=self.folder,
                                  env=self.env, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                self.failures.append(f"README Python block {index}: exit {done.returncode}\n"
                                     f"{done.stderr[-2000:]}")
            return
        import examples.http_policy as names  # the fragment of it README quotes
        try:
            exec(compile(code, f"README Python block {index}", "exec"), dict(vars(names)))
        except Exception as exc:
            self.failures.append(f"README Python block {index}: {type(exc).__name__}: {exc}")

    def yaml(self, code: str) -> None:
        """A block naming its file is written there (and its command, if it names one,
        run); a train config's fragment is trained for an epoch."""
        first = code.splitlines()[0]
        named = re.match(r"# (\S+\.yaml)(?::\s*(parcat [^(]*))?", first)
        if named is None:
            (self.folder / "fragment.yaml").write_text(code)
            self.shell("parcat train -m goal_tasks -c fragment.yaml --epochs 1")
            return
        path = self.folder / named[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
        if named[2]:
            self.shell(named[2].strip())


def reader_folder(tmp_path: Path) -> Path:
    """A folder with what README's lines name: the shipped configs, examples and scripts,
    and the reader's own mission file and policy package it uses as placeholders."""
    for name in ("configs", "examples", "scripts"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "src/parcat/missions/harvest.yaml", tmp_path / "my_mission.yaml")
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg/__init__.py").write_text("")
    (tmp_path / "my_pkg/agents.py").write_text(
        "class Chaser:\n"
        "    def __init__(self, agent_spec, speed=1.0):\n"
        "        self.space = agent_spec.action_space\n"
        "    def reset(self, seed):\n"
        "        self.space.seed(seed)\n"
        "    def step(self, obs):\n"
        "        return self.space.sample()\n")
    return tmp_path


def test_shell_lines_drop_comments_but_not_quoted_hashes() -> None:
    assert shell_lines("parcat eval -m harvest   # a comment\n\n# only a comment\n"
                       "echo '# kept' | jq '.x'  # gone\n") == [
        "parcat eval -m harvest", "echo '# kept' | jq '.x'"]
    assert cheaper("parcat eval -m harvest --format json | jq '.summary'") == \
        "parcat eval -m harvest --format json -n 4 --set max_steps=50 | jq '.summary'"
    assert cheaper("parcat train -c configs/train.yaml --epochs 150 --resume") == \
        "parcat train -c configs/train.yaml --epochs 3 --resume --eval-episodes 1"


def test_ci_installs_and_runs_the_tests_as_readme_says() -> None:
    lines = [line for language, code in code_blocks() if language == "bash"
             for line in shell_lines(code) if re.search(INSTALL, line)]
    assert len(lines) >= 3 and [installs(line)[0] for line in lines] == [[]] * len(lines)
    # "set up and run the tests" is what .ci/run runs, part for part and in that order
    parts = next(line for line in lines if "pytest" in line).split(" && ")
    at = [ci_lines().index(part) for part in parts]
    assert len(parts) == 3 and at == sorted(at)
    assert installs("python3 -m venv .venv && pip install -e '.[gpu]' && parcat eval")[0] == [
        f"\"pip install -e '.[gpu]'\": {CI_RUN} does not install ['gpu']"]
    assert installs(".venv/bin/pip install -e . && .venv/bin/parcat eval -m harvest") == (
        [], "parcat eval -m harvest")
    assert installs("pip install torch") == ([f"'pip install torch' installs what {CI_RUN} "
                                              "does not"], "")


@pytest.mark.slow  # ~90 commands: ~9 min at load 10 on 2 shared cores
@pytest.mark.timeout(1200)
def test_every_readme_code_line_runs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # parcat plot -o cross.png
    pytest.importorskip("tensorboard")  # --logger tensorboard
    if shutil.which("jq") is None or shutil.which("curl") is None:
        pytest.skip("README pipes into jq and calls curl")
    folder = reader_folder(tmp_path)
    with action_server() as act_port:
        reader = Reader(folder, {"127.0.0.1:8000": f"127.0.0.1:{act_port}",
                                 "8700": str(free_port())})
        try:
            for index, (language, code) in enumerate(code_blocks()):
                if language == "bash":
                    for line in shell_lines(code):
                        reader.shell(line)
                    reader.stop_servers()
                    reader.stop_ray()
                elif language == "python":
                    reader.python(code, index)
                elif language == "yaml":
                    reader.yaml(code)
        finally:
            reader.stop_servers()
            reader.stop_ray()
    print("\n".join(["README lines run reduced:", *reader.reduced, "the slowest run:",
                     *(f"{s:6.1f} s  {c}" for s, c in sorted(reader.timings)[-8:])]))
    assert not reader.failures, "\n\n".join(reader.failures)
