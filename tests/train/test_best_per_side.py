"""One best checkpoint per side on an adversarial mission: evade's pursuers and evader each
keep the epoch best for them, in one ``RUN/best`` that ``parcat eval -p RUN/best`` plays."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from parcat.cli.main import main
from parcat.cli.plot_sources import training_of
from parcat.policies import checkpoint
from parcat.train.config import TrainConfig
from parcat.train.metrics import read_metrics
from parcat.train.runs import Checkpointer
from parcat.train.trainer import Trainer

PURSUERS = ("pursuer_0", "pursuer_1", "pursuer_2")
TRAIN = ["train", "-m", "evade", "--learner", "ppo", "--set", "max_steps=20",
         "--steps-per-epoch", "20", "--env-workers", "0", "--envs-per-worker", "2",
         "--gradient-steps", "1", "--checkpoint-every", "1", "--eval-episodes", "2",
         "--no-progress"]


def evaluation(pursuer: float, evader: float) -> dict[str, float]:
    """An ``eval_return`` of evade: every pursuer ``pursuer``, the evader ``evader``."""
    return {**dict.fromkeys(PURSUERS, pursuer), "evader": evader,
            "total": 3 * pursuer + evader}


def shifted(trainer: Trainer, by: float) -> None:
    """Other weights for every learner: the next epoch's, as far as best/ can tell."""
    for learner in {id(x): x for x in trainer.learners.values()}.values():
        learner.load_policy_arrays({k: v + by for k, v in learner.policy_arrays().items()})


def evade_trainer(run: Path, shared_learner: bool = False) -> Trainer:
    """A tiny evade run's trainer (PPO for every agent), never run: its checkpointer is."""
    return Trainer(TrainConfig(mission="evade", overrides={"max_steps": 20}, epochs=3,
                               steps_per_epoch=4, env_workers=0, envs_per_worker=1,
                               learner={"class": "ppo"}, eval_episodes=2, run_dir=str(run),
                               shared_learner=shared_learner))


def weights(run: Path, agent: str) -> dict[str, np.ndarray]:
    return dict(checkpoint.load_policy(run / agent, agent).arrays)


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_each_side_keeps_the_epoch_best_for_it(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    trainer = evade_trainer(run)
    try:
        checkpoints = trainer._checkpointer()
        saved = []
        # the pursuers do best at epoch 1, the evader at 2; at 3 the pursuers do better still
        for epoch, (pursuer, evader) in enumerate([(1.0, -1.0), (0.5, 2.0), (2.0, -5.0)], 1):
            if epoch > 1:
                shifted(trainer, 0.25)
            saved.append({a: dict(trainer.learners[a].policy_arrays())
                          for a in (*PURSUERS, "evader")})
            checkpoints.finished(epoch, evaluation(pursuer, evader))
            checkpoints.save()
            if epoch == 2:
                sides = checkpoint.read_manifest(run / "best")["sides"]
                assert (sides["pursuer"]["epoch"], sides["evader"]["epoch"]) == (1, 2)
                assert same(weights(run / "best", "pursuer_1"), saved[0]["pursuer_1"])
                assert same(weights(run / "best", "evader"), saved[1]["evader"])
    finally:
        trainer.close()
    sides = checkpoint.read_manifest(run / "best")["sides"]
    assert sides == {
        "pursuer": {"agents": list(PURSUERS), "epoch": 3, "eval_return": 2.0,
                    "label": "mean per agent"},
        "evader": {"agents": ["evader"], "epoch": 2, "eval_return": 2.0,
                   "label": "mean per agent"}}
    assert same(weights(run / "best", "pursuer_0"), saved[2]["pursuer_0"])
    assert same(weights(run / "best", "evader"), saved[1]["evader"])  # kept across a rewrite
    assert checkpoint.read_manifest(run / "best" / "evader")["epoch"] == 2
    # parcat eval plays each side's best, and a resumed run starts from the same bests
    assert main(["eval", "-p", str(run / "best"), "-n", "2", "-f", "csv"]) == 0
    out, err = capsys.readouterr()
    assert "evade," in out
    assert err == (f"-p {run / 'best'}: the best checkpoint of each side (evader of epoch 2, "
                   "pursuer of epoch 3)\n")
    assert main(["eval", "-p", str(run / "best" / "evader"), "-n", "2", "-f", "csv"]) == 0
    assert capsys.readouterr().err == (
        f"-p {run / 'best' / 'evader'}: one agent's policy of run {run / 'best'} (epoch 2), "
        "on the run's mission parameters\n")
    again = Checkpointer(trainer.config, trainer.mission, trainer.learners)
    assert {side: (b.epoch, b.eval_return) for side, b in again.best.items()} == {
        "pursuer": (3, 2.0), "evader": (2, 2.0)}


def test_a_run_shows_each_sides_best_and_resume_keeps_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    args = [*TRAIN, "--best-episodes", "3", "--metrics-format", "csv", "-o", str(run)]
    assert main([*args, "--epochs", "3"]) == 0
    out = capsys.readouterr().out
    best = r"\S+ at epoch \d, on 3 more episodes \S+ \[95% CI \S+, \S+\]"
    assert re.search(f"; best evader \\(mean per agent\\) {best}; best pursuer \\(mean per "
                     f"agent\\) {best}\n", out) or re.search(
        f"; best pursuer \\(mean per agent\\) {best}; best evader \\(mean per agent\\) "
        f"{best}\n", out), out
    assert re.search(f"the best \\(greedy eval on 2 episodes: evader \\(mean per agent\\) "
                     f"{best}; pursuer \\(mean per agent\\) {best}\\): parcat eval -p "
                     f"{re.escape(str(run / 'best'))}\n", out), out
    sides = checkpoint.read_manifest(run / "best")["sides"]
    assert sides["evader"]["best_return"]["episodes"] == 3
    logged = read_metrics(run / "metrics.csv")[-1]["best"]
    assert {side: logged[side]["epoch"] for side in logged} == {
        side: sides[side]["epoch"] for side in sides}
    assert main([*args, "--epochs", "4", "--resume", "-f", "json"]) == 0
    resumed = json.loads(capsys.readouterr().out)["epochs"][0]["best"]
    for side, entry in sides.items():  # epoch 4 is best for a side only if it does better
        assert (resumed[side]["epoch"] == 4 and resumed[side]["mean"] > \
            entry["best_return"]["mean"]) or (resumed[side]["epoch"], resumed[side]["return"]) \
            == (entry["epoch"], entry["eval_return"])


def test_a_checkpoint_written_on_an_interrupt_keeps_the_best_its_log_line_named(
        tmp_path: Path) -> None:
    # the trainer judges an epoch before logging it; Ctrl-C may come before its save()
    run = tmp_path / "run"
    trainer = evade_trainer(run)
    try:
        checkpoints = trainer._checkpointer()
        checkpoints.best_after(evaluation(1.0, -1.0), 1)
        checkpoints.finished(1, evaluation(1.0, -1.0))
        assert checkpoints.save_interrupted(1, 0) == run
        logged = checkpoints.best_record()
        # judged, then interrupted before its capture (and its log line): epoch 1 is
        # written again, its best untouched by epoch 2's judgement
        checkpoints.best_after(evaluation(0.0, 3.0), 2)
        assert checkpoints.save_interrupted(1, 1) == run
    finally:
        trainer.close()
    sides = checkpoint.read_manifest(run / "best")["sides"]
    assert {side: sides[side]["epoch"] for side in sides} == {
        side: entry["epoch"] for side, entry in logged.items()} == {"pursuer": 1, "evader": 1}


def test_a_run_where_the_pursuers_learn_to_capture_keeps_the_evaders_best_from_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a small arena the pursuers can learn to cover (lr 0.01): once they capture, the
    # evader's return falls, so its best is an epoch before the pursuers' best
    run = tmp_path / "run"
    assert main(["train", "-m", "evade", "--learner", "ppo", "--set", "max_steps=30", "--set",
                 "capture_radius=0.2", "--set", "pursuer_speed=0.06", "--set",
                 "evader_speed=0.03", "--set", "learner.lr=0.01", "--steps-per-epoch", "30",
                 "--env-workers", "0", "--envs-per-worker", "2", "--gradient-steps", "1",
                 "--checkpoint-every", "1", "--eval-episodes", "4", "--epochs", "8",
                 "--no-progress", "-o", str(run)]) == 0
    log = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    scores = {"pursuer": [np.mean([r["eval_return"][a] for a in PURSUERS]) for r in log],
              "evader": [r["eval_return"]["evader"] for r in log]}
    expected = {side: int(np.argmax(values)) + 1 for side, values in scores.items()}
    assert expected["pursuer"] != expected["evader"]
    sides = checkpoint.read_manifest(run / "best")["sides"]
    assert {side: sides[side]["epoch"] for side in sides} == expected
    assert log[-1]["best"]["pursuer"]["epoch"] == expected["pursuer"]
    assert {checkpoint.read_manifest(run / "best" / agent)["epoch"]
            for agent in PURSUERS} == {expected["pursuer"]}
    assert checkpoint.read_manifest(run / "best" / "evader")["epoch"] == expected["evader"]
    # parcat plot RUN marks each side's best, at its own epoch
    marks = training_of([run], "reward", "mean")[1]
    assert marks.best == [(float(log[expected[side] - 1]["total_env_steps"]),
                           f"best {side} (epoch {expected[side]})") for side in sides]
    assert (f"best pursuer (mean per agent) {scores['pursuer'][expected['pursuer'] - 1]:.3f} "
            f"at epoch {expected['pursuer']}") in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["deleted", "damaged"])
def test_a_deleted_or_damaged_best_loses_its_sides_not_the_epochs_checkpoint(
        tmp_path: Path, damage: str) -> None:
    run = tmp_path / "run"
    trainer = evade_trainer(run)
    try:
        checkpoints = trainer._checkpointer()
        checkpoints.finished(1, evaluation(1.0, -1.0))
        checkpoints.save()
        if damage == "deleted":
            shutil.rmtree(run / "best")
        else:
            next((run / "best" / "evader").glob("*.npz")).write_bytes(b"cut")
        # the pursuers do better: best/ would keep the evader's epoch 1, which is gone
        shifted(trainer, 0.25)
        checkpoints.finished(2, evaluation(2.0, -5.0))
        with pytest.warns(UserWarning) as warned:
            checkpoints.save()
        assert checkpoint.read_manifest(run)["epoch"] == 2
        sides = checkpoint.read_manifest(run / "best")["sides"]
        assert {side: entry["epoch"] for side, entry in sides.items()} == {"pursuer": 2}
        assert same(weights(run / "best", "evader"), dict(trainer.learners["evader"]
                                                         .policy_arrays()))
        # the evader's best starts again: its next evaluation is its best
        checkpoints.finished(3, evaluation(0.0, -4.0))
        checkpoints.save()
        sides = checkpoint.read_manifest(run / "best")["sides"]
        assert {side: entry["epoch"] for side, entry in sides.items()} == {
            "pursuer": 2, "evader": 3}
    finally:
        trainer.close()
    [warning] = [str(w.message) for w in warned]
    problem = (f"'{run / 'best'}' was deleted" if damage == "deleted" else
               f"checkpoint '{run / 'best'}' is truncated or corrupted: 'evader/")
    assert warning.startswith(problem), warning
    assert warning.endswith("; the best of evader starts again: 'best' takes this epoch's "
                            "agents"), warning


def test_agents_of_two_sides_that_share_a_learner_keep_one_best(tmp_path: Path) -> None:
    # one network for pursuers and evader: a best per side would mix its epochs in best/
    run = tmp_path / "run"
    trainer = evade_trainer(run, shared_learner=True)
    try:
        checkpoints = trainer._checkpointer()
        assert checkpoints.sides == {"total": [*PURSUERS, "evader"]}
        for epoch, (pursuer, evader) in enumerate([(1.0, -1.0), (0.5, 2.0)], 1):
            shifted(trainer, 0.25)
            checkpoints.finished(epoch, evaluation(pursuer, evader))
            checkpoints.save()
    finally:
        trainer.close()
    manifest = checkpoint.read_manifest(run / "best")
    assert {side: entry["epoch"] for side, entry in manifest["sides"].items()} == {"total": 2}
    assert {checkpoint.read_manifest(run / "best" / agent)["epoch"]
            for agent in (*PURSUERS, "evader")} == {2}
