"""--each (every policy on its own, paired episodes) and --cross (every pair of policies
across a mission's two sides), and compare's normalised aggregate across missions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from parcat.cli.main import main
from parcat.core.errors import ConfigError
from parcat.envs.missions import load_mission
from parcat.eval.compare import OVERALL, compare
from parcat.eval.evaluate import make_config
from parcat.eval.report import strip_timings
from parcat.eval.stats import normalised
from parcat.eval.tournament import cross_play, evaluate_each, sides
from parcat.parallel.run_options import RunOptions


def test_each_plays_every_policy_alone_on_the_same_episodes() -> None:
    config = make_config(["harvest"], ["greedy", "random", "noop"], episodes=12, seed=3,
                         overrides={"max_steps": 40})
    result = evaluate_each(config, RunOptions(jobs=1))
    assert list(result.reports) == ["greedy", "random", "noop"]
    for name, (report,) in result.reports.items():  # one run each: harvest is no duel
        assert {a.policy for e in report.episodes for a in e.agents} == {name}
    seeds = [[e.seed for e in r.episodes] for (r,) in result.reports.values()]
    assert seeds[0] == seeds[1] == seeds[2]  # paired: the same episodes
    rows = {r.policy: r for r in result.rows}
    assert rows["greedy"].difference is None and rows["greedy"].improvement is None
    # the scripted heuristic beats random on every episode: P(random > greedy) is 0
    random = rows["random"]
    assert random.improvement is not None and random.improvement.high < 0.05
    assert random.difference is not None and random.difference.high < 0
    assert random.mean.low <= random.mean.value <= random.mean.high


def test_each_over_missions_adds_a_normalised_overall_row() -> None:
    config = make_config(["harvest", "goal_tasks"], ["greedy", "random"], episodes=6, seed=1,
                         overrides={"max_steps": 30})
    result = evaluate_each(config, RunOptions(jobs=1))
    overall = {r.policy: r for r in result.rows if r.mission == OVERALL}
    assert set(overall) == {"greedy", "random"}
    assert all(0.0 <= r.mean.value <= 1.0 for r in overall.values())
    assert overall["greedy"].mean.value > overall["random"].mean.value


@pytest.mark.parametrize("jobs", [2])
def test_each_and_cross_give_the_same_numbers_in_parallel(jobs: int) -> None:
    config = make_config(["evade"], ["greedy", "random"], episodes=4, seed=2,
                         overrides={"max_steps": 25})
    for run in (evaluate_each, cross_play):
        one = run(config, RunOptions(jobs=1)).to_document()  # type: ignore[operator]
        many = run(config, RunOptions(jobs=jobs)).to_document()  # type: ignore[operator]
        assert _without_timings(one) == _without_timings(many)


def _without_timings(value: object) -> object:
    return strip_timings(value)


def test_sides_split_by_agent_id_prefix_or_in_halves() -> None:
    assert sides(load_mission("evade")) == ([0, 1, 2], [3])
    assert sides(load_mission("harvest")) == ([0, 1], [2, 3])
    with pytest.raises(ConfigError, match="has one agent: --cross and --against need two"):
        sides(load_mission("goal_tasks", {"agents": 1}))


def test_cross_seats_the_row_policy_on_one_side_and_the_column_policy_on_the_other() -> None:
    config = make_config(["evade"], ["greedy", "noop"], episodes=3, seed=0,
                         overrides={"max_steps": 20})
    result = cross_play(config, RunOptions(jobs=1))
    table = result.tables[0]
    assert table.row_agents == ["pursuer_0", "pursuer_1", "pursuer_2"]
    assert table.col_agents == ["evader"]
    assert len(result.episodes) == 4 * 3
    pairs = {(tuple(a.policy for a in e.agents if a.agent_id != "evader"),
              next(a.policy for a in e.agents if a.agent_id == "evader"))
             for e in result.episodes}
    assert pairs == {(("greedy",) * 3, "greedy"), (("greedy",) * 3, "noop"),
                     (("noop",) * 3, "greedy"), (("noop",) * 3, "noop")}
    # pursuers that chase beat pursuers that stand still, whatever the evader does
    cells = table.cells
    assert cells[0][1].row.value > cells[1][1].row.value


def test_compare_overall_weighs_missions_on_different_scales_alike() -> None:
    a = {"big": np.array([1000.0, 1100.0, 900.0]), "small": np.array([0.0, 0.1, 0.2])}
    b = {"big": np.array([1001.0, 1101.0, 901.0]), "small": np.array([1.0, 1.1, 1.2])}
    overall = compare(a, b, reps=200)[-1]
    assert overall.mission == OVERALL
    # pooled raw returns would be dominated by 'big' (+1 of ~1000); normalised, 'small'
    # (+1 of a 1.2 range) counts as much
    assert overall.difference.value == pytest.approx(
        np.mean([1 / 201, 1 / 1.2]), rel=1e-6)
    na, nb = normalised([a, b])
    assert min(v.min() for v in (*na.values(), *nb.values())) == 0.0
    assert max(v.max() for v in (*na.values(), *nb.values())) == 1.0


def test_cli_each_cross_and_the_cross_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    base = ["eval", "-m", "evade", "--set", "max_steps=15", "-n", "3", "-p", "greedy",
            "-p", "random", "--no-progress"]
    assert main([*base, "--each", "--format", "json"]) == 0
    each = json.loads(capsys.readouterr().out)
    assert each["schema"] == "parcat.each/2"
    assert [r["policy"] for r in each["each"]["rows"]] == ["greedy", "random"]
    out = tmp_path / "cross.json"
    assert main([*base, "--cross", "-o", str(out)]) == 0
    table = capsys.readouterr().out
    assert "rows play pursuer_0, pursuer_1, pursuer_2; columns play evader" in table
    assert main(["plot", str(out)]) == 0
    assert "evade: mean return of pursuer_0" in capsys.readouterr().out


@pytest.mark.parametrize(("extra", "line"), [
    (["--each", "--cross"], "--each and --cross are different ways to compare: give one"),
    (["--cross", "-o", "x.csv"], "--cross writes its results as JSON: give -o FILE.json"),
    (["--each", "--precision", "0.1"], "--each cannot be combined with --precision yet"),
])
def test_bad_tournament_flags_are_one_line(extra: list[str], line: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", "evade", "-p", "greedy", "-p", "random", *extra]) == 2
    assert capsys.readouterr().err == f"parcat: error: {line}\n"
    assert re.escape(line)
