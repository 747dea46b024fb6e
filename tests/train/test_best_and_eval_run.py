"""The best checkpoint by greedy evaluation, and ``parcat eval -p RUN`` knowing its mission."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from parcat.cli.main import main
from parcat.envs.missions import load_mission
from parcat.policies import checkpoint
from parcat.train.config import TrainConfig
from parcat.train.runs import evaluate_greedy
from parcat.train.trainer import Trainer

SETS = {"agents": 2, "max_steps": 10, "goal_radius": 0.5}
TRAIN = ["train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10", "--set",
         "goal_radius=0.5", "--steps-per-epoch", "8", "--env-workers", "0",
         "--envs-per-worker", "2", "--gradient-steps", "2", "--format", "json"]


def config(run: Path, **changes: object) -> TrainConfig:
    return TrainConfig(**{**TrainConfig(mission="goal_tasks", overrides=SETS, epochs=4,
                                        steps_per_epoch=8, env_workers=0, envs_per_worker=2,
                                        gradient_steps=5, learner={"learning_starts": 0},
                                        checkpoint_every=1, eval_episodes=3,
                                        run_dir=str(run)).__dict__, **changes})


def test_every_checkpoint_is_evaluated_and_the_best_is_kept(tmp_path: Path) -> None:
    report = Trainer(config(tmp_path / "run")).run()
    totals = [s.eval_return["total"] for s in report.epochs]
    assert all(set(s.eval_return) == {"agent_0", "agent_1", "total"} for s in report.epochs)
    best = checkpoint.read_manifest(tmp_path / "run" / "best")
    first_best = totals.index(max(totals)) + 1
    assert best["epoch"] == first_best and best["eval_return"]["total"] == max(totals)
    assert checkpoint.read_manifest(tmp_path / "run")["epoch"] == 4
    log = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["eval_return"]["total"] for r in log] == totals


def test_the_evaluation_set_is_fixed_and_the_same_on_every_layout(tmp_path: Path) -> None:
    a = Trainer(config(tmp_path / "a", epochs=2)).run()
    b = Trainer(config(tmp_path / "b", epochs=2, env_workers=2, envs_per_worker=1)).run()
    assert [s.eval_return for s in a.epochs] == [s.eval_return for s in b.epochs]
    mission = load_mission("goal_tasks", SETS)
    trainer = Trainer(config(tmp_path / "c", epochs=1))
    once = evaluate_greedy(mission, trainer.learners, 0, 3)
    assert once == evaluate_greedy(mission, trainer.learners, 0, 3) != \
        evaluate_greedy(mission, trainer.learners, 1, 3)
    trainer.close()


def test_between_checkpoints_and_with_0_episodes_there_is_no_evaluation(tmp_path: Path) -> None:
    report = Trainer(config(tmp_path / "run", checkpoint_every=2, epochs=2)).run()
    assert math.isnan(report.epochs[0].eval_return["total"])
    report = Trainer(config(tmp_path / "none", eval_episodes=0, epochs=1)).run()
    assert report.epochs[0].eval_return == {}
    assert not (tmp_path / "none" / "best").exists()


def eval_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["eval", "-n", "2", "-f", "csv", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    assert main([*TRAIN, "--epochs", "2", "--run-dir", str(run), "--eval-episodes", "2"]) == 0
    return run


def test_eval_of_a_run_takes_its_mission_and_parameters(
    trained: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = eval_run(capsys, "-p", str(trained))
    sets = [word for k, v in SETS.items() for word in ("--set", f"{k}={v}")]
    typed = eval_run(capsys, "-m", "goal_tasks", *sets, "-p", str(trained))
    assert (code, out) == (typed[0], typed[1]) and code == 0
    assert eval_run(capsys, "-m", "goal_tasks", "-p", str(trained))[1] == out
    score = checkpoint.read_manifest(trained)["eval_return"]["total"]
    assert err == (f"-p {trained}: the last checkpoint (epoch 2, evaluation return "
                   f"{score:.3f} summed over its agents); the best is -p {trained / 'best'}\n")


def test_eval_of_one_agents_folder_takes_the_runs_mission_and_parameters_too(
    trained: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = trained / "agent_0"
    sets = [word for k, v in SETS.items() for word in ("--set", f"{k}={v}")]
    typed = eval_run(capsys, "-m", "goal_tasks", *sets, "-p", str(agent))
    code, out, err = eval_run(capsys, "-m", "goal_tasks", "-p", str(agent))
    # without retyping the training --sets, the same task (it used the defaults' before)
    assert (code, out) == (typed[0], typed[1]) and code == 0
    score = checkpoint.read_manifest(trained)["eval_return"]["total"]
    assert err == (f"-p {agent}: one agent's policy of run {trained} (epoch 2, evaluation "
                   f"return {score:.3f} summed over its agents), on the run's mission parameters\n")


def test_eval_of_best_says_so(trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    best = checkpoint.read_manifest(trained / "best")
    code, _, err = eval_run(capsys, "-p", str(trained / "best"))
    assert (code, err) == (0, f"-p {trained / 'best'}: the best checkpoint (epoch "
                           f"{best['epoch']}, evaluation return "
                           f"{best['eval_return']['total']:.3f} summed over its agents)\n")


def test_set_wins_over_the_run_and_a_space_change_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "harvest"
    assert main(["train", "-m", "harvest", "--set", "agents=1", "--set", "size=6", "--set",
                 "view=1", "--set", "max_steps=10", "--epochs", "1", "--steps-per-epoch", "4",
                 "--env-workers", "0", "--gradient-steps", "1", "--eval-episodes", "1",
                 "--run-dir", str(run), "--format", "json"]) == 0
    capsys.readouterr()
    assert eval_run(capsys, "-p", str(run), "--set", "max_steps=5")[0] == 0
    code, out, err = eval_run(capsys, "-p", str(run), "--set", "view=2")
    assert (code, out) == (2, "")
    assert err == (f"parcat: error: -p {run}: agent 'agent_0' was trained with observation "
                   "space Box((39,), float32), but mission 'harvest' now gives "
                   "Box((103,), float32) (--set: view=2); drop the --set that changes it\n")


def test_gymnasium_ids_are_missions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mission = load_mission("gymnasium:CartPole-v1")
    assert (mission.max_steps, mission.heuristic) == (500, None)
    assert load_mission("gymnasium:CartPole-v1", {"max_episode_steps": 20}).max_steps == 20
    code, out, err = eval_run(capsys, "-m", "gymnasium:CartPole-v1")
    assert (code, err) == (0, "mission 'gymnasium:CartPole-v1' has no heuristic: evaluating "
                           "policy 'random' (give -p to choose)\n")
    assert out.splitlines()[2].startswith("gymnasium:CartPole-v1,random,2,0,")
    assert eval_run(capsys, "-m", "gymnasium:Nope-v0")[::2] == (
        2, "parcat: error: mission 'gymnasium:Nope-v0': gymnasium has no environment 'Nope-v0'; "
        "list the registered ids with: python -c \"import gymnasium; "
        "print(*gymnasium.registry)\"\n")
    run = tmp_path / "cp"
    assert main(["train", "-m", "gymnasium:CartPole-v1", "--epochs", "1", "--steps-per-epoch",
                 "4", "--env-workers", "0", "--gradient-steps", "1", "--eval-episodes", "1",
                 "--run-dir", str(run), "--format", "json"]) == 0
    capsys.readouterr()
    # the run's manifest names gymnasium's code: the user names it too, or trusts the run
    assert eval_run(capsys, "-p", str(run))[::2] == (
        2, f"parcat: error: run '{run}' (trained on mission 'gymnasium:CartPole-v1') names "
        "'gymnasium:CartPole-v1', code from outside parcat; a file cannot make parcat run it: "
        "name the mission with -m, or pass --trust-code if you trust the file\n")
    assert eval_run(capsys, "-p", str(run), "-m", "gymnasium:CartPole-v1")[0] == 0
    assert eval_run(capsys, "-p", str(run), "--trust-code")[0] == 0


def test_eval_without_a_mission_or_a_run_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_run(capsys)[::2] == (
        2, "parcat: error: give a mission with -m NAME, or a run directory with -p RUN (its "
        "manifest names the mission it was trained on)\n")


def test_more_episodes_confirm_the_best_and_give_its_interval(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    Trainer(config(run, best_episodes=12)).run()
    confirmed = checkpoint.read_manifest(run / "best")["best_return"]
    assert confirmed["episodes"] == 12
    assert confirmed["low"] <= confirmed["mean"] <= confirmed["high"]
    capsys.readouterr()
    main([*TRAIN[:-2], "--epochs", "2", "--checkpoint-every", "1", "--eval-episodes", "2",
          "--best-episodes", "6", "-o", str(tmp_path / "cli")])
    out = capsys.readouterr().out
    assert "summed over agents on 2 episodes; on 6 more " in out and "[95% CI " in out


def test_an_outside_environment_confirms_the_best_in_a_worker(tmp_path: Path) -> None:
    run = tmp_path / "run"
    Trainer(TrainConfig(mission="gymnasium:CartPole-v1", epochs=1, steps_per_epoch=8,
                        env_workers=1, envs_per_worker=1, gradient_steps=1, eval_episodes=2,
                        best_episodes=3, run_dir=str(run))).run()
    confirmed = checkpoint.read_manifest(run / "best")["best_return"]
    assert confirmed["episodes"] == 3 and confirmed["mean"] >= 8  # CartPole pays 1 a step
