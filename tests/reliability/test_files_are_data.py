"""Files are data (issue 20): a replay, a run's manifest, a checkpoint or a journal never
makes parcat run code the user did not name, and a damaged file is one line and exit 2.

The code-running cases run the real CLI in a subprocess whose current directory holds a
module that creates ``PWNED`` when it is imported: the file must not be created.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parcat.cli.main import main
from parcat.core.seeding import episode_seed
from parcat.envs.missions import builtin_code
from parcat.episode import replay
from parcat.eval.evaluate import evaluate, make_config
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import BUILTIN_CLASSES
from tests.reliability.helpers import ROOT, kill_group

PWN = "import pathlib\npathlib.Path('PWNED').touch()\n"
PWN_ENV = PWN + "def make(**kwargs):\n    return None\n"
PWN_POLICY = PWN + "from parcat.policies.builtin import MLPPolicy as Policy\n"
TRUST = "a file cannot make parcat run it: "
FIX = "restore the checkpoint from a copy or train it again"
MISSION = ["-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10"]
TRAIN = ["train", *MISSION, "--epochs", "1", "--steps-per-epoch", "8", "--env-workers", "0",
         "--envs-per-worker", "2", "--gradient-steps", "1", "--eval-episodes", "1",
         "--format", "json"]


def parcat(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The CLI in this process: exit code and stderr."""
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


# -- replays ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("replays")
    config = make_config(["harvest"], ["greedy"], episodes=1, overrides={"max_steps": 6})
    evaluate(config, RunOptions(jobs=1), replay_dir=folder)
    return folder / replay.file_name("harvest", 0)


def rewritten(source: Path, target: Path, meta: dict[str, Any] | str | None = None,
              **arrays: np.ndarray) -> Path:
    """A copy of a replay with some meta keys and arrays replaced (``meta`` as text: the
    whole meta entry)."""
    with np.load(source) as data:
        content = {key: data[key] for key in data.files}
    if isinstance(meta, str):
        content["meta"] = np.array(meta)
    elif meta is not None:
        content["meta"] = np.array(json.dumps({**json.loads(str(content["meta"])), **meta}))
    content.update(arrays)
    np.savez(target, **content)
    return target


@pytest.mark.parametrize(("env", "params"), [
    ("os:system", {"command": "touch PWNED"}),
    ("pwn_env:make", {}),
])
def test_a_replay_that_names_outside_code_runs_nothing(
        recorded: Path, tmp_path: Path, env: str, params: dict[str, Any]) -> None:
    (tmp_path / "pwn_env.py").write_text(PWN_ENV)
    rewritten(recorded, tmp_path / "evil.npz", {"env": env, "params": params})
    refused = parcat("replay", "evil.npz", cwd=tmp_path)
    assert refused.returncode == 2 and not (tmp_path / "PWNED").exists()
    assert one_line(refused) == (f"parcat: error: replay 'evil.npz' names '{env}', code from "
                                 f"outside parcat; {TRUST}pass --trust-code if you trust the "
                                 "file")
    # the user's leave: the code runs (and is no environment: still one line)
    allowed = parcat("replay", "evil.npz", "--trust-code", cwd=tmp_path)
    assert (tmp_path / "PWNED").exists()
    assert allowed.returncode == 2 and "not an environment" in one_line(allowed)


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DEEP = "[" * 100_000 + "]" * 100_000
DAMAGED_META = '{"format": "parcat-replay", "version": 1, "x": ' + DEEP + "}"
# (damage applied to a copy of a good replay, the line after "parcat: error: replay 'F' ")
DAMAGES: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "truncated": (lambda good, f: f.write_bytes(good.read_bytes()[:2000]),
                  "cannot be read (BadZipFile); it is damaged or not a parcat replay"),
    "string_seed": (lambda good, f: rewritten(good, f, {"seed": "abc"}),
                    "is damaged: meta 'seed' must be an integer from 0 to 2**64 - 1, got 'abc'"),
    "huge_seed": (lambda good, f: rewritten(good, f, '{"seed": ' + "9" * 5000 + "}"),
                  "is damaged: 'meta' is not JSON parcat can read (ValueError)"),
    "deep_meta": (lambda good, f: rewritten(good, f, DAMAGED_META),
                  "is damaged: 'meta' is not JSON parcat can read (RecursionError)"),
    "short_actions": (lambda good, f: rewritten(good, f, act_1=np.zeros(2, np.int64)),
                      "is damaged: array 'act_1' (agent 'agent_1') has shape (2,) and type "
                      "int64, not one number row per step it acted"),
    "text_actions": (lambda good, f: rewritten(good, f, act_0=np.array(["x"] * 6)),
                     "is damaged: array 'act_0' (agent 'agent_0') has shape (6,) and type <U1, "
                     "not one number row per step it acted"),
    "out_of_range_actions": (lambda good, f: rewritten(good, f, act_2=np.full(6, 99)),
                             "is damaged: the action of agent 'agent_2' at step 0 is not in "
                             "its action space Discrete(5)"),
    "steps_1e12": (lambda good, f: rewritten(good, f, {"steps": 1e12}),
                   "is damaged: meta 'steps' must be an integer from 0 to 100,000,000, got "
                   "1000000000000.0"),
    "steps_past_the_actions": (lambda good, f: rewritten(good, f, {"steps": 10**8}),
                               "is damaged: meta 'steps' is 100,000,000, but actions are "
                               "recorded for 6 steps"),
    "missing_agent_array": (lambda good, f: rewritten(good, f, {"agents": [f"agent_{i}"
                                                                           for i in range(5)]}),
                            "is damaged: meta 'returns' must be a number for every agent, got "
                            "[0.1, 1.1, 0.1, 0.0]"),
    "unsorted_steps": (lambda good, f: rewritten(good, f, step_0=np.arange(6)[::-1].copy()),
                       "is damaged: array 'step_0' (agent 'agent_0') is not increasing steps "
                       "from 0"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_replay_is_one_line_and_exit_2(
        recorded: Path, tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]) -> None:
    harm, expected = DAMAGES[damage]
    target = tmp_path / "damaged.npz"
    harm(recorded, target)
    assert cli(capsys, "replay", str(target)) == (
        2, f"parcat: error: replay '{target}' {expected}\n")


def test_a_bit_flipped_replay_is_one_line_and_exit_2(
        recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for offset in range(0, 4000, 97):  # wherever the flip lands: one line, never a traceback
        target = tmp_path / "flipped.npz"
        data = bytearray(recorded.read_bytes())
        data[offset % len(data)] ^= 0xFF
        target.write_bytes(bytes(data))
        code, err = cli(capsys, "replay", str(target), "-o", str(tmp_path / "x.gif"))
        assert code in (0, 2) and err.count("\n") <= 1 and "Traceback" not in err, err
        if code == 2:
            assert err.startswith(f"parcat: error: replay '{target}' ")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_replay_stops_at_once_on_sigterm_and_ctrl_c(
        recorded: Path, tmp_path: Path, signum: int, code: int) -> None:
    leader, follower = pty.openpty()  # a terminal: frames are paced by --fps
    # the console script: `python -m parcat` may end by SIGINT itself (RELIABILITY.md)
    command = str(Path(sys.executable).with_name("parcat"))
    proc = subprocess.Popen([command, "replay", str(recorded), "--fps", "0.1"],
                            stdout=follower, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    os.close(follower)
    try:
        seen = b""
        while b"step 0/6" not in seen:  # the first frame is shown: the replay plays
            assert select.select([leader], [], [], 120)[0], seen
            seen += os.read(leader, 4096)
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == code
        assert proc.stderr is not None
        err = proc.stderr.read()
        assert "Traceback" not in err and err.count("\n") <= 1, err
    finally:
        kill_group(proc)
        proc.wait()
        os.close(leader)


# -- run directories and checkpoints ----------------------------------------------------


@pytest.fixture(scope="module")
def pristine_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    assert main([*TRAIN, "--run-dir", str(run)]) == 0
    return run


@pytest.fixture
def run(pristine_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(pristine_run, copy)
    shutil.copy(copy / "manifest.json", tmp_path / "pristine-manifest.json")
    (tmp_path / "pwn_env.py").write_text(PWN_ENV)
    (tmp_path / "pwn_policy.py").write_text(PWN_POLICY)
    (tmp_path / "pwn_pkg").mkdir()
    (tmp_path / "pwn_pkg" / "__init__.py").write_text(PWN)
    (tmp_path / "pwn_pkg" / "envs.py").write_text("def parallel_env(**kwargs):\n    return 0\n")
    return copy


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("mission", ["pwn_env:make", "pwn_pkg.envs", "pwn.yaml"])
def test_a_run_whose_manifest_names_outside_code_runs_nothing(run: Path, mission: str) -> None:
    cwd = run.parent
    (cwd / "pwn.yaml").write_text("name: goal_tasks\nenv: pwn_env:make\n")
    edit_json(run / "manifest.json", lambda m: m["config"].update(mission=mission))
    refused = parcat("eval", "-p", "run", "-n", "1", cwd=cwd)
    assert refused.returncode == 2 and not (cwd / "PWNED").exists()
    assert one_line(refused) == (
        f"parcat: error: run 'run' (trained on mission '{mission}') names '"
        f"{'pwn_env:make' if mission == 'pwn.yaml' else mission}', code from outside parcat; "
        f"{TRUST}name the mission with -m, or pass --trust-code if you trust the file")
    # the user names the mission: the run's is not used
    named = parcat("eval", *MISSION, "-p", "run", "-n", "1", "-f", "json", cwd=cwd)
    assert named.returncode == 0, named.stderr
    assert not (cwd / "PWNED").exists()


def test_a_checkpoint_naming_an_outside_policy_class_runs_nothing(run: Path) -> None:
    agent = run / "agent_0" / "manifest.json"
    edit_json(agent, lambda m: m.update(policy="pwn_policy:Policy"))
    data = agent.read_bytes()  # the run's manifest records the agent's: keep them agreeing
    edit_json(run / "manifest.json", lambda m: m["files"]["agent_0/manifest.json"].update(
        size=len(data), sha256=hashlib.sha256(data).hexdigest()))
    args = ["eval", *MISSION, "-p", "run", "-n", "1", "-f", "json"]
    refused = parcat(*args, cwd=run.parent)
    assert refused.returncode == 2 and not (run.parent / "PWNED").exists()
    assert one_line(refused) == (
        "parcat: error: checkpoint 'run/agent_0' names 'pwn_policy:Policy', code from outside "
        f"parcat; {TRUST}pass --trust-code if you trust the file")
    trusted = parcat(*args, "--trust-code", cwd=run.parent)
    assert trusted.returncode == 0, trusted.stderr
    assert (run.parent / "PWNED").exists()


def test_a_damaged_run_without_m_names_the_damaged_file(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "manifest.json").write_text('{"format": "parcat.run", "agen')
    assert cli(capsys, "eval", "-p", str(run)) == (
        2, f"parcat: error: checkpoint '{run}' is corrupted: manifest.json is not valid JSON "
        f"(line 1, column 26); {FIX}\n")
    shutil.copy(run.parent / "pristine-manifest.json", run / "manifest.json")
    edit_json(run / "manifest.json", lambda m: m.update(mission_params=[1, 2]))
    assert cli(capsys, "eval", "-p", str(run)) == (
        2, f"parcat: error: checkpoint manifest '{run}/manifest.json': 'mission_params' must "
        f"be an object, got a list; {FIX}\n")


def test_trust_code_is_taken_from_the_command_line_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text("missions: [goal_tasks]\ntrust_code: true\n")
    assert cli(capsys, "eval", "-c", str(config)) == (
        2, f"parcat: error: --config '{config}': key 'trust_code' is taken from the command "
        "line only (--trust-code): a file cannot allow code\n")


# -- bad input that names code on the command line ---------------------------------------


class NoPossibleAgents:
    """An environment class without ``possible_agents``."""

    def __init__(self, **kwargs: Any) -> None:
        pass

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        return {}, {}

    def step(self, actions: Any) -> Any:
        return {}, {}, {}, {}, {}

    def observation_space(self, agent: Any) -> Any:
        return None

    def action_space(self, agent: Any) -> Any:
        return None


NOT_AN_ENV = ("not an environment; a factory must return a PettingZoo-style parallel (or "
              "turn-based) environment")


@pytest.mark.parametrize(("args", "line"), [
    (["-m", "os:getcwd"], "mission 'os:getcwd': env 'os:getcwd' returned a 'str' object with "
     f"no reset() method, {NOT_AN_ENV}"),
    (["-m", "os:system"], "mission 'os:system': env 'os:system' rejected: system() missing "
     "required argument 'command' (pos 1)"),
    (["-m", "system.yaml"], "mission 'system': env 'os:system' returned a 'int' object with no "
     f"reset() method, {NOT_AN_ENV}"),
    (["-m", f"{__name__}:NoPossibleAgents"], f"mission '{__name__}:NoPossibleAgents': env "
     f"'{__name__}:NoPossibleAgents' returned a 'NoPossibleAgents' object with no "
     f"possible_agents list, {NOT_AN_ENV}"),
    (["-m", "goal_tasks", "-p", "mlp@1e308", "-p", "random@1e308"],
     "the policies' weights (@1e+308, @1e+308) add up to more than a number can hold; "
     "weights are shares: give smaller ones, e.g. @2 and @1 for two thirds and one third"),
])
def test_code_named_on_the_command_line_that_is_no_environment_is_one_line(
        args: list[str], line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "system.yaml").write_text("name: system\nenv: os:system\n"
                                          "params: {command: 'true'}\n")
    assert cli(capsys, "eval", *args, "-n", "1") == (2, f"parcat: error: {line}\n")


@pytest.mark.parametrize(("command", "content", "line"), [
    ("compare", bytes(range(256)) * 4, "compare: '{f}' is not UTF-8 text"),
    ("compare", ("[" * 100_000).encode(),
     "compare: cannot read '{f}': not valid JSON (nested too deeply)"),
    ("plot", ("[" * 100_000).encode(), "cannot read '{f}' (RecursionError); give a metrics "
     "log, a run directory or a `parcat eval -o`, `--each -o` or `--cross -o` file"),
    ("plot", b'{"schema": "parcat.cross/1", "cross": [{"policies": 3}]}',
     "'{f}' is a damaged `parcat eval --cross` file (KeyError); run `parcat eval --cross` "
     "again"),
])
def test_a_binary_deep_or_damaged_results_file_is_one_line(
        tmp_path: Path, command: str, content: bytes, line: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    damaged = tmp_path / "r.json"
    damaged.write_bytes(content)
    args = [str(damaged)] * (2 if command == "compare" else 1)
    assert cli(capsys, command, *args) == (
        2, f"parcat: error: {line.format(f=damaged)}\n")


# -- journals ------------------------------------------------------------------------------


@pytest.fixture
def results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "r.json"
    assert cli(capsys, "eval", *MISSION, "-n", "4", "-o", str(out))[0] == 0
    return out


def journal(results: Path, *episodes: dict[str, Any] | str) -> Path:
    """The journal of ``results`` holding these episode lines (after its header)."""
    config = json.loads(results.read_text())["config"]
    path = results.with_name(results.name + ".episodes.jsonl")
    header = json.dumps({"schema": "parcat.eval.journal", "version": 1, "config": config})
    lines = [header, *(e if isinstance(e, str) else json.dumps(e) for e in episodes)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_journal_line_that_repeats_an_episode_unchanged_is_accepted(
        results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = json.loads(results.read_text())["episodes"][0]
    journal(results, first, first)
    assert cli(capsys, "eval", *MISSION, "-n", "4", "-o", str(results), "--resume")[0] == 0


@pytest.mark.parametrize("change", ["reward", "seed", "index", "huge_index"])
def test_a_changed_journal_is_one_line_naming_file_and_line(
        results: Path, change: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = json.loads(results.read_text())["episodes"][0]
    changed: dict[str, Any] | str = json.loads(json.dumps(first))
    path = results.with_name(results.name + ".episodes.jsonl")
    seed = episode_seed(0, zlib.crc32(b"goal_tasks"), 0)
    assert isinstance(changed, dict)
    if change == "reward":
        changed["agents"][0]["reward"] += 1.0
        expected = (f"'{path}' line 3 holds episode 0 of mission 'goal_tasks' again with other "
                    "results; the file was changed: use another --output")
    elif change == "seed":
        changed["seed"] += 1
        expected = (f"'{path}' line 3 gives episode 0 of mission 'goal_tasks' seed {seed + 1}, "
                    f"but this run's is {seed}; the file was changed: use another --output")
    elif change == "index":
        changed["episode_index"] = 4
        expected = (f"'{path}' line 3 is episode 4 of mission 'goal_tasks', not one of this "
                    "run's (4 episodes of each mission); the file was changed: use another "
                    "--output")
    else:
        changed = json.dumps(first).replace('"episode_index": 0', '"episode_index": '
                                             + "1" * 5000)
        expected = f"cannot read '{path}' line 3: not valid JSON (a number too long)"
    journal(results, first, changed)
    assert cli(capsys, "eval", *MISSION, "-n", "4", "-o", str(results), "--resume") == (
        2, f"parcat: error: --resume: {expected}\n")


# -- standard JSON ---------------------------------------------------------------------------


def strict(text: str) -> Any:
    """JSON as a strict reader takes it: ``NaN`` and ``Infinity`` are refused."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"non-standard JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_each_json_is_standard_when_a_policy_s_episodes_all_failed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "each.json"
    capsys.readouterr()
    main(["eval", *MISSION, "-n", "2", "-p", "random", "-p", "tests.fakes:CrashingPolicy,at_step=0",
          "--each", "-f", "json", "-o", str(out)])
    printed = strict(capsys.readouterr().out)
    assert strict(out.read_text()) == printed
    failed = printed["each"]["rows"][1]
    assert failed["failed"] == 2 and failed["mean"] == {"value": None, "low": None, "high": None}


def test_results_with_nan_rewards_are_standard_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mission = tmp_path / "nan.yaml"
    mission.write_text("name: nan\nenv: tests.fakes:NaNEnv\nparams: {agents: 2, max_steps: 5}\n")
    out = tmp_path / "r.json"
    capsys.readouterr()
    # exit 1: non-finite returns are reported as a failure of the run
    assert main(["eval", "-m", str(mission), "-p", "random", "-n", "2", "-f", "json",
                 "-o", str(out)]) == 1
    printed = strict(capsys.readouterr().out)
    written = strict(out.read_text())
    assert written["episodes"][0]["agents"][1]["reward"] is None
    assert printed["episodes"] == written["episodes"]


def test_sim_loads_an_outside_policy_class_from_a_checkpoint_only_with_trust_code(
        run: Path) -> None:
    agent = run / "agent_0"
    edit_json(agent / "manifest.json", lambda m: m.update(policy="pwn_policy:Policy"))
    (run.parent / "sim.yaml").write_text(
        "environment: {mission: goal_tasks, params: {agents: 2, max_steps: 10}, period: 0.001}\n"
        "agents:\n  - {agent: agent_0, policy: run/agent_0, cycle_time: 0.001}\n"
        "default_policy: random\niters: 3\noutput: null\n")
    refused = parcat("sim", "-c", "sim.yaml", "--no-progress", cwd=run.parent)
    assert refused.returncode == 2 and not (run.parent / "PWNED").exists()
    assert one_line(refused).endswith(
        "checkpoint 'run/agent_0' names 'pwn_policy:Policy', code from outside parcat; "
        f"{TRUST}pass --trust-code if you trust the file")
    trusted = parcat("sim", "-c", "sim.yaml", "--no-progress", "--trust-code", "-f", "json",
                     cwd=run.parent)
    assert trusted.returncode == 0, trusted.stderr
    assert (run.parent / "PWNED").exists()


def test_the_code_a_file_may_name_is_parcat_s_own_built_ins() -> None:
    """The allow-list, spelled out: adding to it is a decision, not a side effect."""
    assert builtin_code() == (
        {"parcat.envs.evade:EvadeEnv", "parcat.envs.goal_tasks:GoalTasksEnv",
         "parcat.envs.harvest:HarvestEnv"},
        {"parcat.policies.heuristics:EvadeGreedy", "parcat.policies.heuristics:GoalSeeker",
         "parcat.policies.heuristics:HarvestGreedy"})
    assert set(BUILTIN_CLASSES) == {"parcat.policies.builtin:RandomPolicy",
                                    "parcat.policies.builtin:NoopPolicy",
                                    "parcat.policies.builtin:MLPPolicy"}


@pytest.mark.parametrize(("content", "line"), [
    (bytes(range(256)), "history file '{f}' cannot be read (UnicodeDecodeError); pass another "
     "--history"),
    (b"[" * 100_000 + b"\n", "history file '{f}' line 1 is not a JSON object (one record per "
     "line expected): remove that line or pass another --history"),
])
def test_a_damaged_bench_history_is_one_error(tmp_path: Path, content: bytes, line: str) -> None:
    from parcat.bench.suite import read_history
    from parcat.core.errors import ConfigError

    damaged = tmp_path / "history.jsonl"
    damaged.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        read_history(damaged)
    assert str(caught.value) == line.format(f=damaged)
