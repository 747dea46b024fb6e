"""User code that exits, crashes, raises or hangs while it is set up — an environment's
factory or first ``reset``, a policy's constructor — never takes parcat down: it runs in a
worker process, and the run ends with one line naming it (exit 1 for a crash or a hang, 2
for code that refused its input), for ``eval``, ``plan``, ``sim`` and ``train``; a training
environment that keeps crashing in its steps is replaced, then training stops in one line."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from parcat.policies import checkpoint
from parcat.train.config import TrainConfig
from parcat.train.runs import Checkpointer, evaluate_greedy, evaluate_greedy_in_a_worker
from parcat.train.trainer import Trainer
from tests.reliability.helpers import ROOT, kill_group, start_cli, wait_until
from tests.train.test_trainer import SMALL

HAPPENED = {
    "sys_exit": "called sys.exit(0)",
    "os_exit": "ended its process with exit code 6",
    "segfault": "crashed (signal SIGSEGV)",
    "raise": "raised ValueError: refused at set-up (raise)",
    "hang": "did not finish in 5 s (PARCAT_SETUP_TIMEOUT)",
}
POLICY = "tests.fakes:SetupFailingPolicy,how={how},agent=1"


def run_cli(args: list[str], cwd: Path, timeout_s: float = 240.0,
            setup_timeout: str | None = None) -> tuple[int, str, str]:
    """Run ``parcat ARGS``; return (exit code, stdout, stderr) once it and every process
    of its group have ended."""
    if setup_timeout is not None:
        os.environ["PARCAT_SETUP_TIMEOUT"] = setup_timeout
    try:
        proc = start_cli(args, cwd)
    finally:
        os.environ.pop("PARCAT_SETUP_TIMEOUT", None)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        assert wait_until(lambda: not group_members(proc.pid), 30.0), "a process outlived it"
        return proc.returncode, out, err
    finally:
        kill_group(proc)


def group_members(pgid: int) -> list[int]:
    """Live processes (zombies aside) of the process group ``pgid``."""
    found = []
    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def assert_one_line(err: str, *parts: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("parcat: error: "), err
    for part in parts:
        assert part in lines[0], err


def expected_code(how: str) -> int:
    return 2 if how == "raise" else 1


@pytest.mark.parametrize("how", ["sys_exit", "os_exit", "segfault", "raise"])
@pytest.mark.parametrize("where", ["factory", "reset"])
def test_an_env_that_fails_while_set_up_is_one_line(tmp_path: Path, where: str,
                                                    how: str) -> None:
    mission = ("tests.fakes:setup_failing_env" if where == "factory"
               else "tests.fakes:ResetFailingEnv")
    out = tmp_path / "results.json"
    code, _, err = run_cli(["eval", "-m", mission, "--set", f"how={how}", "-p", "random",
                            "-n", "2", "-o", str(out)], tmp_path)
    assert code == expected_code(how)
    # a raise is the mission's own MissionError, said where it happened (built, or reset);
    # a crash or exit is the set-up worker's, which built and reset it
    when = {("factory", "raise"): "while being built", ("reset", "raise"): "while being reset"
            }.get((where, how), "while being built and reset")
    assert_one_line(err, f"mission '{mission}'", HAPPENED[how], when)
    assert not out.exists()


@pytest.mark.parametrize("how", ["sys_exit", "os_exit", "segfault", "raise"])
def test_a_policy_that_fails_while_built_is_one_line_naming_its_agent(tmp_path: Path,
                                                                      how: str) -> None:
    policy = POLICY.format(how=how)
    out = tmp_path / "results.json"
    code, _, err = run_cli(["eval", "-m", "harvest", "-p", policy, "-n", "2", "-o", str(out)],
                           tmp_path)
    assert code == expected_code(how)
    if how == "raise":  # the constructor refused its arguments: a bad policy spec
        assert_one_line(err, f"policy '{policy}'", "ValueError: refused", "(mission 'harvest')")
    else:
        assert_one_line(err, f"policy '{policy}' for agent 'agent_1' of mission 'harvest'",
                        HAPPENED[how], "while being built")
    assert not out.exists()


def test_a_hang_in_reset_ends_at_the_set_up_deadline(tmp_path: Path) -> None:
    mission = "tests.fakes:ResetFailingEnv"
    code, _, err = run_cli(["eval", "-m", mission, "--set", "how=hang", "-p", "random"],
                           tmp_path, setup_timeout="5")
    assert code == 1
    assert_one_line(err, f"mission '{mission}'", HAPPENED["hang"])


def test_a_hang_in_a_policy_constructor_ends_at_the_set_up_deadline(tmp_path: Path) -> None:
    policy = POLICY.format(how="hang")
    code, _, err = run_cli(["plan", "-m", "harvest", "-p", policy], tmp_path,
                           setup_timeout="5")
    assert code == 1
    assert_one_line(err, f"policy '{policy}' for agent 'agent_1'", HAPPENED["hang"])


def test_plan_contains_a_crashing_constructor_too(tmp_path: Path) -> None:
    policy = POLICY.format(how="segfault")
    code, out, err = run_cli(["plan", "-m", "harvest", "-p", policy], tmp_path)
    assert code == 1 and out == ""
    assert_one_line(err, "for agent 'agent_1'", HAPPENED["segfault"])


def write_sim(tmp_path: Path, mission: str, policy: str, args: dict[str, str],
              params: dict[str, str] | None = None) -> Path:
    data = {"environment": {"mission": mission, "period": 0.01, "params": params or {}},
            "agents": [{"policy": policy, "args": args, "cycle_time": 0.05}],
            "iters": 20, "seed": 0, "output": None}
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_sim_contains_a_segfaulting_policy_constructor(tmp_path: Path) -> None:
    config = write_sim(tmp_path, "harvest", "tests.fakes:SetupFailingPolicy",
                       {"how": "segfault"})
    code, _, err = run_cli(["sim", "-c", str(config)], tmp_path)
    assert code == 1
    assert_one_line(err, "agent 'agent_0'", HAPPENED["segfault"], "while being built")


def test_sim_contains_an_exiting_env_factory(tmp_path: Path) -> None:
    config = write_sim(tmp_path, "tests.fakes:setup_failing_env", "random", {})
    code, _, err = run_cli(["sim", "-c", str(config)], tmp_path)
    assert code == 1
    assert_one_line(err, "'environment.mission'", HAPPENED["sys_exit"])


def test_train_contains_an_exiting_env_factory(tmp_path: Path) -> None:
    code, _, err = run_cli(["train", "-m", "tests.fakes:setup_failing_env", "--set",
                            "how=os_exit", "--epochs", "1", "-o", "run"], tmp_path)
    assert code == 1
    assert_one_line(err, "mission 'tests.fakes:setup_failing_env'", HAPPENED["os_exit"])
    assert not (tmp_path / "run").exists()


def test_train_stops_in_one_line_when_its_env_segfaults_in_every_episode(
        tmp_path: Path) -> None:
    code, _, err = run_cli(["train", "-m", "tests.fakes:DyingEnv", "--set", "how=segfault",
                            "--set", "at_step=3", "--epochs", "2", "--jobs", "1", "-o", "run"],
                           tmp_path)
    assert code == 1
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("parcat: error: training stopped after 0 epoch(s): the "
                           "environment worker for envs 0-3 failed 4 times"), err
    assert "signal SIGSEGV" in last and "no checkpoint was written" in last


def test_train_replaces_an_env_worker_that_segfaults_once_and_goes_on(tmp_path: Path) -> None:
    marker = tmp_path / "died"
    code, _, err = run_cli(["train", "-m", "tests.fakes:DyingEnv", "--set", "how=segfault",
                            "--set", "at_step=3", "--set", f"marker={marker}",
                            "--epochs", "2", "--steps-per-epoch", "50", "--jobs", "1",
                            "--env-workers", "0", "-o", "run"], tmp_path)
    assert code == 0, err
    assert marker.exists()  # it did die: in a worker, not in the trainer
    assert "environment worker for envs 0-3 died (signal SIGSEGV); restarting it" in err
    assert (tmp_path / "run").is_dir()


def test_a_built_in_only_run_starts_no_process_to_check_its_set_up(tmp_path: Path) -> None:
    code = ("import psutil\n"
            "from parcat.eval.evaluate import make_config\n"
            "make_config(['harvest', 'evade'], ['random', 'greedy', 'noop', 'mlp'])\n"
            "print(len(psutil.Process().children(recursive=True)))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"


@pytest.mark.parametrize("shared", [False, True], ids=["own", "shared"])
def test_greedy_evaluation_in_a_worker_equals_the_one_in_process(tmp_path: Path,
                                                                 shared: bool) -> None:
    trainer = trained(tmp_path, shared)
    here = evaluate_greedy(trainer.mission, trainer.learners, 7, 3, trainer._learner_obs)
    there = evaluate_greedy_in_a_worker(trainer.mission, trainer.recipes, trainer.learners, 7, 3)
    assert here == there and len(here) == 4


def test_a_segfault_in_the_greedy_evaluation_leaves_nan_returns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    returns = dying_checkpointer(tmp_path, eval_episodes=3).evaluate()
    assert sorted(returns) == ["0", "1", "2", "total"]
    assert all(math.isnan(value) for value in returns.values())
    assert "the greedy evaluation's environment crashed (signal SIGSEGV); eval_return is NaN" \
        in caplog.text


def test_a_segfault_confirming_the_best_writes_the_checkpoint_not_best(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    checkpoints = dying_checkpointer(tmp_path, best_episodes=3)
    checkpoints.finished(2, {"0": 1.0, "1": 1.0, "2": 1.0, "total": 3.0})
    run = checkpoints.save()
    manifest = checkpoint.read_manifest(run)
    assert manifest["epoch"] == 2  # NaN is null in the manifest's JSON
    assert manifest["best_return"] == {"mean": None, "low": None, "high": None, "episodes": 3}
    assert not (run / checkpoint.BEST).exists()
    assert ("the best checkpoint's confirming environment crashed (signal SIGSEGV); it is "
            "not the best") in caplog.text


def dying_checkpointer(tmp_path: Path, **changes: int) -> Checkpointer:
    """The checkpointer of a short run (:func:`trained`) whose environment from outside parcat
    now segfaults on its 3rd step (``changes``: to the run's config)."""
    trainer = trained(tmp_path, shared=False)
    dying = dataclasses.replace(trainer.mission, env="tests.fakes:DyingEnv", params={
        "agents": 3, "how": "segfault", "at_step": 3})
    config = dataclasses.replace(trainer.config, **changes)
    return Checkpointer(config, dying, trainer.learners, recipes=trainer.recipes)


def trained(tmp_path: Path, shared: bool) -> Trainer:
    """A short run on an environment from outside parcat (its envs step in a worker)."""
    config = TrainConfig(mission="tests.fakes:ScriptedEnv", epochs=1, steps_per_epoch=10,
                         envs_per_worker=2, gradient_steps=2, learner=SMALL, seed=7,
                         eval_episodes=0, shared_learner=shared, run_dir=str(tmp_path / "run"))
    trainer = Trainer(config)
    assert trainer.vec.layout == [("worker", 2)]
    trainer.run()
    return trainer
