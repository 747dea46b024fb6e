"""Damaged checkpoints: every corruption is one line and exit 2, never a traceback.

Each damage is done to a copy of one real (tiny) run directory and read back through
``parcat eval -p RUN`` and ``parcat train --resume``; a fuzz test flips and cuts random
bytes of its files and checks that loading gives the very same arrays or a
``CheckpointError``. Damage recorded in the manifests (``record_as_is``) reaches the readers
behind the hashes.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parcat.cli.main import main
from parcat.core.errors import CheckpointError
from parcat.policies import checkpoint
from parcat.train.runs import METRICS_FILES

AGENTS = ("agent_0", "agent_1")
MISSION = ["-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10"]
TRAIN = ["train", *MISSION, "--steps-per-epoch", "8", "--env-workers", "0",
         "--envs-per-worker", "2", "--gradient-steps", "2", "--format", "json"]
FIX = "restore the checkpoint from a copy or train it again"
SUFFIX = " (mission 'goal_tasks')"  # what eval adds to a policy's error


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


def eval_args(run: Path) -> list[str]:
    return ["eval", *MISSION, "-p", str(run), "-n", "1"]


def resume_args(run: Path, epochs: int = 2) -> list[str]:
    return [*TRAIN, "--epochs", str(epochs), "--run-dir", str(run), "--resume"]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run directory after one epoch (not to be changed: tests copy it)."""
    run = tmp_path_factory.mktemp("pristine") / "run"
    assert main([*TRAIN, "--epochs", "1", "--run-dir", str(run)]) == 0
    return run


@pytest.fixture
def run(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "run"))


def load_everything(run: Path) -> dict[str, np.ndarray]:
    """Every array of the run as ``parcat train --resume`` and ``parcat eval`` read them."""
    manifest = checkpoint.read_manifest(run)
    out = {}
    for agent in AGENTS:
        if agent not in manifest["agents"]:
            raise CheckpointError(f"no agent {agent}")
        agent_dir = run / manifest["agents"][agent]
        saved = checkpoint.load_policy(agent_dir, agent)
        out.update({f"{agent}/arrays/{k}": v for k, v in saved.arrays.items()})
        out.update({f"{agent}/state/{k}": v for k, v in checkpoint.load_state(agent_dir).items()})
    return out


def rewrite_run(run: Path, change: Callable[[str, dict[str, np.ndarray]], None]) -> None:
    """Save the run again through the checkpoint API after ``change(agent, arrays)``."""
    manifest = checkpoint.read_manifest(run)
    agents = {}
    for agent, name in manifest["agents"].items():
        saved = checkpoint.load_policy(run / name)
        arrays = dict(saved.arrays)
        change(agent, arrays)
        agents[agent] = checkpoint.PolicyCheckpoint(saved.policy, saved.kwargs, arrays,
                                                    saved.meta, checkpoint.load_state(run / name))
    meta = {k: v for k, v in manifest.items() if k not in ("format", "version", "agents", "files")}
    checkpoint.save_run(run, agents, meta)  # the metrics log stays where it is


def record_as_is(run: Path) -> None:
    """Record every file's size and hash as it is now (the agents' manifests first, then the
    run's), so that damage reaches the reader behind the checks."""
    for file in sorted(run.rglob(checkpoint.MANIFEST), key=lambda f: f.parent == run):
        manifest = json.loads(file.read_text())
        manifest["files"] = {name: {"size": (file.parent / name).stat().st_size,
                                    "sha256": sha256_of(file.parent / name)}
                             for name in manifest["files"]}
        file.write_text(json.dumps(manifest))


def sha256_of(file: Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()


def cut(file: Path, size: int) -> None:
    with file.open("r+b") as handle:
        handle.truncate(size)


def flip_middle_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))


def edit_manifest(file: Path, change: Callable[[dict[str, object]], None]) -> None:
    manifest = json.loads(file.read_text())
    change(manifest)
    file.write_text(json.dumps(manifest))


def replace_text(file: Path, old: str, new: str) -> None:
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new))


def nan_in_agent_1(agent: str, arrays: dict[str, np.ndarray]) -> None:
    if agent == "agent_1":
        arrays["w1"] = arrays["w1"].copy()
        arrays["w1"][0, 0] = np.nan


def size_of(run: Path, name: str) -> int:
    return int(json.loads((run / "manifest.json").read_text())["files"][name]["size"])


# (damage, the one line it gives; '{run}' stands for the run directory)
DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated_arrays": (
        lambda run: cut(run / "agent_0/arrays.npz", 9000),
        "checkpoint '{run}' is truncated or corrupted: 'agent_0/arrays.npz' has 9000 bytes, "
        "its manifest records {size:agent_0/arrays.npz}; " + FIX,
    ),
    "bad_crc_arrays": (
        lambda run: flip_middle_byte(run / "agent_0/arrays.npz"),
        "checkpoint '{run}/agent_0' is corrupted: 'arrays.npz' does not match the SHA-256 its "
        "manifest records; " + FIX,
    ),
    "empty_arrays": (
        lambda run: cut(run / "agent_1/arrays.npz", 0),
        "checkpoint '{run}' is truncated or corrupted: 'agent_1/arrays.npz' has 0 bytes, its "
        "manifest records {size:agent_1/arrays.npz}; " + FIX,
    ),
    "truncated_state": (
        lambda run: cut(run / "agent_1/state.npz", 1000),
        "checkpoint '{run}' is truncated or corrupted: 'agent_1/state.npz' has 1000 bytes, its "
        "manifest records {size:agent_1/state.npz}; " + FIX,
    ),
    "missing_arrays": (
        lambda run: (run / "agent_0/arrays.npz").unlink(),
        "checkpoint '{run}' is incomplete: 'agent_0/arrays.npz' is missing; " + FIX,
    ),
    "manifest_not_json": (
        lambda run: (run / "manifest.json").write_text('{"format": "parcat.run",\n  "agents'),
        "checkpoint '{run}' is corrupted: manifest.json is not valid JSON (line 2, column 3); "
        + FIX,
    ),
    "manifest_binary": (
        lambda run: (run / "manifest.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe"),
        "checkpoint '{run}' is corrupted: manifest.json is not UTF-8 text; " + FIX,
    ),
    "manifest_agents_a_list": (
        lambda run: edit_manifest(run / "manifest.json",
                                  lambda m: m.update(agents=["agent_0", "agent_1"])),
        "checkpoint manifest '{run}/manifest.json': 'agents' must be an object of agent "
        "directories, got a list; " + FIX,
    ),
    "manifest_size_a_string": (
        lambda run: edit_manifest(
            run / "manifest.json",
            lambda m: m["files"]["agent_0/arrays.npz"].update(size="20914")),  # type: ignore
        "checkpoint manifest '{run}/manifest.json': 'size' of 'agent_0/arrays.npz' must be an "
        "integer >= 0, got a string; " + FIX,
    ),
    "agent_manifest_edited": (
        lambda run: replace_text(run / "agent_0/manifest.json", '"width": 64', '"width": 32'),
        "checkpoint '{run}' is corrupted: 'agent_0/manifest.json' does not match the SHA-256 "
        "its manifest records; " + FIX,
    ),
    "manifest_files_missing": (
        lambda run: edit_manifest(run / "manifest.json", lambda m: m.pop("files")),
        "checkpoint manifest '{run}/manifest.json': 'files' must be an object, got nothing; "
        + FIX,
    ),
    "manifest_escapes_the_directory": (
        lambda run: edit_manifest(run / "manifest.json",
                                  lambda m: m.update(agents={"agent_0": "..", "agent_1": ".."})),
        "checkpoint manifest '{run}/manifest.json': the directory of agent 'agent_0' must be "
        "a directory name, got a string; " + FIX,
    ),
    "nan_weights": (
        lambda run: rewrite_run(run, nan_in_agent_1),
        "checkpoint '{run}/agent_1': agent 'agent_1', array 'w1' in arrays.npz holds NaN or "
        "infinite values (the run diverged); use an earlier checkpoint or train again, e.g. "
        "with a lower learning rate",
    ),
}


FOUND_BY_LOADING = {"bad_crc_arrays", "nan_weights"}
"""Damages the manifests do not show (the arrays' hashes are checked when they load)."""


def expected_line(template: str, run: Path, sizes: Path) -> str:
    line = template.replace("{run}", str(run))
    return re.sub(r"\{size:([^}]+)\}", lambda m: str(size_of(sizes, m.group(1))), line)


@pytest.mark.parametrize("command", ["eval", "resume"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_every_damage_is_one_line_and_exit_2(
    run: Path, pristine: Path, damage: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    harm, template = DAMAGES[damage]
    harm(run)
    line = expected_line(template, run, pristine)
    code, err = run_cli(eval_args(run) if command == "eval" else resume_args(run), capsys)
    # eval reads the run's manifests first (for its mission): what they show is said of
    # the run; what only loading the policy finds, of the mission it was loaded for
    suffix = SUFFIX if command == "eval" and damage in FOUND_BY_LOADING else ""
    assert (code, err) == (2, f"parcat: error: {line}{suffix}\n")


def test_an_empty_arrays_file_in_a_real_process_is_one_line_not_exit_130(run: Path) -> None:
    cut(run / "agent_0/arrays.npz", 0)
    record_as_is(run)  # the reader itself meets the empty file
    for args in (eval_args(run), resume_args(run)):
        proc = subprocess.run([sys.executable, "-m", "parcat", *args], capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.endswith(
            f"checkpoint '{run}/agent_0' is truncated or corrupted: 'arrays.npz' is not a "
            f"readable numpy archive (EOFError); {FIX}{'' if '--resume' in args else SUFFIX}\n"
        )
        assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("name", "harm", "error"),
    [
        ("arrays.npz", lambda file: cut(file, 9000), "BadZipFile"),
        ("state.npz", lambda file: cut(file, 0), "EOFError"),
    ],
    ids=["truncated_arrays", "empty_state"],
)
def test_damage_the_manifests_record_is_one_line_from_the_reader(
    run: Path, name: str, harm: Callable[[Path], None], error: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    harm(run / "agent_0" / name)
    record_as_is(run)
    line = (f"parcat: error: checkpoint '{run}/agent_0' is truncated or corrupted: '{name}' is "
            f"not a readable numpy archive ({error}); {FIX}")
    assert run_cli(resume_args(run), capsys) == (2, line + "\n")
    if name == "arrays.npz":  # eval reads no training state
        assert run_cli(eval_args(run), capsys) == (2, line + SUFFIX + "\n")


def test_a_checkpoint_of_another_version_is_one_line(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_manifest(run / checkpoint.MANIFEST, lambda manifest: manifest.update(version=1))
    line = (f"parcat: error: checkpoint '{run}' has version 1; this parcat reads version 2; "
            "use the parcat that wrote it")
    assert run_cli(resume_args(run), capsys) == (2, line + "\n")


def test_a_pickled_array_is_refused(run: Path) -> None:
    np.savez(run / "agent_0/arrays.npz", w0=np.array([{"x": 1}], dtype=object))
    record_as_is(run)
    message = (f"checkpoint '{run}/agent_0' is truncated or corrupted: 'arrays.npz' is not a "
               f"readable numpy archive (ValueError); {FIX}")
    with pytest.raises(CheckpointError, match=re.escape(message)):
        checkpoint.load_policy(run / "agent_0")


def test_arrays_a_policy_cannot_take_are_one_line(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def text_weights(agent: str, arrays: dict[str, np.ndarray]) -> None:
        arrays["w0"] = np.full(arrays["w0"].shape, "secret")

    rewrite_run(run, text_weights)
    line = (f"parcat: error: checkpoint '{run}/agent_0': parcat.policies.builtin:MLPPolicy."
            "load_state_dict() refused its arrays (ValueError); the checkpoint does not fit "
            f"this policy class{SUFFIX}\n")
    assert run_cli(eval_args(run), capsys) == (2, line)


def test_the_manifest_records_every_file_with_its_size_and_hash(pristine: Path) -> None:

    files = checkpoint.read_manifest(pristine)["files"]
    on_disk = sorted(name for name in (str(p.relative_to(pristine)) for p in pristine.rglob("*")
                                       if p.is_file())
                     if name not in (*METRICS_FILES, checkpoint.MANIFEST)
                     and not name.startswith("best/"))  # best/: a run of its own
    assert sorted(files) == on_disk
    for name, record in files.items():
        data = (pristine / name).read_bytes()
        assert record == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    agent = checkpoint.read_manifest(pristine / "agent_0")
    assert agent["version"] == 2 and sorted(agent["files"]) == ["arrays.npz", "state.npz"]


def test_a_damaged_episodes_in_flight_file_is_one_line_on_resume(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envs = run / "envs.npz"
    envs.write_bytes(envs.read_bytes()[:-7])
    size = envs.stat().st_size
    line = (f"parcat: error: checkpoint '{run}' is truncated or corrupted: 'envs.npz' has "
            f"{size} bytes, its manifest records {size + 7}; {FIX}\n")
    assert run_cli(resume_args(run), capsys) == (2, line)


# ---- fuzz: a random flip or cut of any file gives the same arrays or a CheckpointError

damage = st.tuples(st.integers(0, 10**6), st.sampled_from(["flip", "cut"]),
                   st.integers(0, 10**7), st.integers(0, 7))


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(harm=damage)
def test_fuzzed_damage_gives_the_same_arrays_or_a_checkpoint_error(
    pristine: Path, tmp_path_factory: pytest.TempPathFactory, harm: tuple[int, str, int, int],
) -> None:
    run = Path(shutil.copytree(pristine, tmp_path_factory.mktemp("fuzz") / "run"))
    reference = load_everything(run)
    files = sorted(p for p in run.rglob("*") if p.is_file() and p.name not in METRICS_FILES)
    which, how, where, bit = harm
    file = files[which % len(files)]
    data = bytearray(file.read_bytes())
    if how == "flip" and data:
        data[where % len(data)] ^= 1 << bit
    else:
        del data[where % max(len(data), 1):]
    file.write_bytes(bytes(data))
    try:
        loaded = load_everything(run)
    except CheckpointError:
        return
    finally:
        shutil.rmtree(run.parent)
    assert loaded.keys() == reference.keys()
    for key in reference:
        assert reference[key].dtype == loaded[key].dtype, key
        float_kind = reference[key].dtype.kind in "fc"
        assert np.array_equal(reference[key], loaded[key], equal_nan=float_kind), key
