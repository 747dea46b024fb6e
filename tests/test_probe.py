"""The start-of-run reproducibility check, on environments written the way outsiders do."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from parcat.envs.missions import load_mission
from parcat.episode.probe import check_mission
from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.eval.report import strip_timings
from parcat.parallel.planner import ExecutorKind
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from tests.fakes import scripted_mission

ROOT = Path(__file__).resolve().parents[1]
RANDOM = (parse_policy_spec("random"),)


def leaky(name: str = "leaky") -> object:
    return dataclasses.replace(scripted_mission(name), env="tests.fakes:LeakyEnv")


def seedless(name: str = "seedless") -> object:
    return dataclasses.replace(scripted_mission(name), env="tests.fakes:SeedlessEnv")


def test_the_check_tells_the_three_kinds_apart() -> None:
    assert check_mission(scripted_mission()).to_dict() == {
        "reproducible": True, "leaks_state": False, "note": ""}
    leaks = check_mission(leaky())  # type: ignore[arg-type]
    assert (leaks.reproducible, leaks.leaks_state) == (True, True)
    ignores = check_mission(seedless())  # type: ignore[arg-type]
    assert ignores.reproducible is False and "ignores its seed" in ignores.note


def test_built_in_missions_pass_the_check() -> None:
    for name in ("harvest", "evade", "goal_tasks"):
        check = check_mission(load_mission(name))
        assert (check.reproducible, check.leaks_state) == (True, False), name


def test_a_state_leaking_env_gives_the_same_results_at_jobs_1_and_2() -> None:
    config = EvalConfig((leaky(),), RANDOM, episodes=6)  # type: ignore[arg-type]
    one = evaluate(config, RunOptions(jobs=1))
    two = evaluate(config, RunOptions(jobs=2, executor=ExecutorKind.PROCESS))
    assert one.status == two.status == "complete"
    assert strip_timings(one.to_document()) == strip_timings(two.to_document())
    document = one.to_document()
    assert document["reproducible"] is True
    assert document["environments"]["leaky"]["leaks_state"] is True


def test_a_seed_ignoring_env_is_flagged(tmp_path: Path) -> None:
    report = evaluate(EvalConfig((seedless(),), RANDOM, episodes=2))  # type: ignore[arg-type]
    document = report.to_document()
    assert document["reproducible"] is False
    assert report.warnings == ["mission 'seedless': two fresh environments reset with the "
                               "same seed played different episodes: the environment "
                               "ignores its seed; its results are not reproducible"]
    mission = tmp_path / "seedless.yaml"
    mission.write_text("name: seedless\nenv: tests.fakes:SeedlessEnv\nparams: {agents: 2}\n")
    proc = subprocess.run([sys.executable, "-m", "parcat", "eval", "-m", str(mission), "-p",
                           "random", "-n", "2", "-f", "json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["reproducible"] is False
    assert "warning: mission 'seedless'" in proc.stderr


def test_non_finite_returns_and_observations_are_reported_not_hidden(tmp_path: Path) -> None:
    mission = dataclasses.replace(scripted_mission("nan", agents=2), env="tests.fakes:NaNEnv")
    report = evaluate(EvalConfig((mission,), RANDOM, episodes=2))  # type: ignore[arg-type]
    assert report.status == "complete"
    for episode in report.episodes:
        assert episode.warnings == ("agent '1': non-finite last observation",
                                    "agent '1': non-finite return (nan)")
    document = report.to_document()
    assert document["episodes"][0]["warnings"] == list(report.episodes[0].warnings)
    assert report.warnings == [
        "mission 'nan': 2 episode(s) with non-finite returns or odd observations (see "
        "\"warnings\" in the results); non-finite returns are left out of the statistics "
        "(column non_finite)"]
    rows = {row["policy"]: row for row in document["summary"]}
    assert (rows["*"]["episodes"], rows["*"]["non_finite"]) == (0, 2)
    mission_file = tmp_path / "nan.yaml"
    mission_file.write_text("name: nan\nenv: tests.fakes:NaNEnv\nparams: {agents: 2}\n")
    proc = subprocess.run([sys.executable, "-m", "parcat", "eval", "-m", str(mission_file),
                           "-p", "random", "-n", "2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "non-finite" in proc.stdout and "warning: mission 'nan'" in proc.stderr
