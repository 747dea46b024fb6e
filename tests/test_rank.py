"""Ranking in one command: ``parcat eval --cross`` prints and records Bradley–Terry ratings,
``parcat rank FILE`` rates a file again (and refuses a damaged one in one line), ``--each``
on a turn-based game plays an opponent, the outcomes per side (Connect Four's win/draw/loss
and illegal moves, evade's capture rate), and ``--cross --precision`` spending episodes
where the ranking is uncertain."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from parcat.cli.main import main
from parcat.eval.evaluate import make_config
from parcat.eval.ratings import ELO
from parcat.eval.report import strip_timings
from parcat.eval.tournament import cross_play
from parcat.parallel.run_options import RunOptions

CONNECT_FOUR = "name: connect_four\nenv: pettingzoo.classic.connect_four_v3:env\nmax_steps: 42\n"
DUEL = "name: duel\nenv: tests.rank_fakes:DuelEnv\nmax_steps: 1\n"
ROOT = Path(__file__).resolve().parents[1]
HEURISTIC, IGNORES_MASK = "tests.rank_fakes:Heuristic", "tests.rank_fakes:IgnoresMask"
EVADE = ["-m", "evade", "--set", "max_steps=15", "-p", "greedy", "-p", "random", "-p", "noop",
         "-n", "3", "--no-progress"]


def mission(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"{text.split()[1]}.yaml"
    path.write_text(text)
    return str(path)


def test_connect_four_cross_ranks_the_heuristic_first_and_counts_illegal_moves(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c4.json"
    # noop stacks column 0 too, legally: the column fills, and the policy that ignores the
    # mask plays it again
    assert main(["eval", "-m", mission(tmp_path, CONNECT_FOUR), "-p", "noop", "-p", HEURISTIC,
                 "-p", IGNORES_MASK, "-n", "2", "--cross", "--executor", "inline",
                 "--no-progress", "-o", str(out)]) == 0
    table = capsys.readouterr().out
    assert "connect_four: Bradley–Terry ratings from win/draw/loss games" in table
    assert "illegal moves" in table
    document = json.loads(out.read_text())
    ratings, = document["ratings"]
    assert ratings["games"] == "win/draw/loss"
    assert ratings["ratings"][0]["policy"] == HEURISTIC
    assert ratings["ratings"][0]["p_best"] > 0.5
    assert all(r["rating"]["low"] <= r["rating"]["value"] <= r["rating"]["high"]
               for r in ratings["ratings"])
    illegal = {(r["policy"], r["side"]): r["illegal_moves"] for r in document["sides"]}
    assert {side for (_, side) in illegal} == {"player_0", "player_1"}
    assert sum(n for (policy, _), n in illegal.items() if policy == IGNORES_MASK) > 0
    assert all(n == 0 for (policy, _), n in illegal.items() if policy != IGNORES_MASK)
    assert document["ratings_model"]["model"] == "bradley-terry"


def test_the_duel_ranks_known_strengths_within_their_intervals(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    strengths = [-1.0, 0.0, 1.0]
    policies = [f"tests.rank_fakes:Strength,rating={s:g}" for s in strengths]
    assert main(["eval", "-m", mission(tmp_path, DUEL), *(f for p in policies for f in ("-p", p)),
                 "-n", "30", "--cross", "--executor", "inline", "--no-progress",
                 "--format", "json"]) == 0
    ratings, = json.loads(capsys.readouterr().out)["ratings"]
    assert [r["policy"] for r in ratings["ratings"]] == policies[::-1]
    truth = dict(zip(policies, (np.array(strengths) - np.mean(strengths)) * ELO, strict=True))
    for rating in ratings["ratings"]:
        assert rating["rating"]["low"] <= truth[rating["policy"]] <= rating["rating"]["high"]


def test_rank_rates_a_cross_file_again_as_eval_did(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cross.json"
    assert main(["eval", *EVADE, "--seed", "4", "--cross", "-o", str(out)]) == 0
    capsys.readouterr()
    document = json.loads(out.read_text())
    assert main(["rank", str(out), "--format", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again == {k: document[k] for k in ("ratings_model", "ratings", "sides")}
    assert again["ratings"][0]["games"] == "duplicate score"
    assert again["ratings"][0]["ratings"][0]["policy"] == "greedy"
    assert main(["rank", str(out), "--seed", "5", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ratings_model"]["bootstrap"]["seed"] == 5


def test_evades_capture_rate_shows_per_policy_and_side(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cross.json"
    assert main(["eval", *EVADE, "--cross", "-o", str(out)]) == 0
    table = capsys.readouterr().out
    assert "evade: per policy and side" in table and "captured" in table
    assert main(["rank", str(out), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    rate = {(r["policy"], r["side"]): float(r["captured"]) for r in rows}
    assert set(rate) == {(p, s) for p in ("greedy", "random", "noop")
                         for s in ("pursuer", "evader")}
    # pursuers that chase capture, whoever evades; an evader is caught by greedy pursuers
    assert rate[("greedy", "pursuer")] == 1.0 > rate[("noop", "pursuer")]
    assert rate[("noop", "evader")] > 0
    assert {"rating", "rating_low", "rating_high", "p_best", "captured_low"} <= set(rows[0])


def test_each_on_a_turn_based_game_plays_an_opponent_in_both_seats(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", mission(tmp_path, CONNECT_FOUR), "-p", HEURISTIC, "-p", "noop",
                 "-n", "2", "--each", "--executor", "inline", "--no-progress",
                 "--format", "json"]) == 0
    captured = capsys.readouterr()
    # (PettingZoo's own deprecation warning may follow, the first time it is built)
    assert captured.err.splitlines()[0] == (
        "parcat: note: connect_four: turn-based: --each plays every policy against 'random' "
        "in both seats on the same seeds, not against itself (--against SPEC names another)")
    document = json.loads(captured.out)
    assert document["each"]["against"] == "random"
    rows = {r["policy"]: r for r in document["each"]["rows"]}
    assert rows[HEURISTIC]["episodes"] == 4  # two seeds, both seats
    assert rows[HEURISTIC]["mean"]["value"] == 1.0  # it beats random every time
    runs = document["runs"][HEURISTIC]
    assert [{a["policy"] for a in run["episodes"][0]["agents"]} for run in runs] == \
        [{HEURISTIC, "random"}] * 2


def test_against_names_the_opponent_on_any_mission(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", "evade", "--set", "max_steps=15", "-p", "greedy", "-p", "noop",
                 "-n", "2", "--each", "--against", "random", "--no-progress", "--format",
                 "json"]) == 0
    captured = capsys.readouterr()
    assert "evade: --each plays every policy against 'random'" in captured.err
    rows = {r["policy"]: r for r in json.loads(captured.out)["each"]["rows"]}
    assert rows["greedy"]["mean"]["value"] != rows["noop"]["mean"]["value"]


@pytest.mark.parametrize(("args", "line"), [
    (["--against", "random"], "--against SPEC is the opponent of --each: give --each too"),
    (["--each", "--against", "nosuch"], "policy 'nosuch' is not a built-in"),
    (["--each", "--against", "random", "-m", "goal_tasks", "--set", "agents=1"],
     "mission 'goal_tasks' has one agent: --cross and --against need two sides"),
])
def test_bad_against_is_one_line(args: list[str], line: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    mission_args = [] if "-m" in args else ["-m", "evade"]
    assert main(["eval", *mission_args, "-p", "greedy", "-p", "noop", "-n", "1", *args,
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parcat: error: {line}") and err.count("\n") == 1


DAMAGED = [
    (b"{", "rank: cannot read '{f}': not valid JSON"),
    (b'{"schema": "parcat.eval/1"}', "rank: '{f}' is not a `parcat eval --cross` file"),
    (b'{"schema": "parcat.cross/1", "cross": {}}', "rank: '{f}': \"cross\" is not a list"),
    (b'{"schema": "parcat.cross/1", "cross": [3]}',
     "rank: '{f}': cross[0] has no \"mission\" name"),
    (b'{"schema": "parcat.cross/1", "cross": [{"mission": "m", "row_agents": ["a"], '
     b'"col_agents": [1], "policies": ["p"]}]}',
     "rank: '{f}': cross[0]: \"col_agents\" is not a list of names"),
    (b'{"schema": "parcat.cross/1", "cross": [{"mission": "m", "row_agents": ["a"], '
     b'"col_agents": ["b"], "policies": ["p"]}], "episodes": [{"mission": 1}]}',
     "rank: '{f}': episode 0 is malformed"),
]


@pytest.mark.parametrize(("content", "line"), DAMAGED)
def test_a_damaged_cross_file_is_one_line_and_exit_2(
        tmp_path: Path, content: bytes, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    damaged = tmp_path / "cross.json"
    damaged.write_bytes(content)
    assert main(["rank", str(damaged)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parcat: error: {line.format(f=damaged)}") and err.count("\n") == 1


def test_a_missing_cross_file_is_one_line(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rank", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err.startswith(f"parcat: error: rank: cannot read "
                                              f"'{tmp_path / 'none.json'}'")


def evade_cross(jobs: int, precision: float, max_episodes: int) -> dict:
    config = make_config(["evade"], ["greedy", "random", "noop"], episodes=4, seed=0,
                         overrides={"max_steps": 20})
    return strip_timings(cross_play(config, RunOptions(jobs=jobs), precision=precision,
                                    max_episodes=max_episodes).to_document())


def test_precision_spends_episodes_where_the_ranking_is_uncertain() -> None:
    document = evade_cross(1, precision=150, max_episodes=60)
    episodes = [[c["episodes"] for c in row] for row in document["cross"][0]["cells"]]
    # greedy (row 0) catches every evader: its rank is clear after the first round, while
    # random and noop, close in their duplicate games, play on
    assert episodes[0][2] < episodes[1][2] and episodes[1][2] == episodes[2][1]
    assert all(episodes[i][i] == 4 for i in range(3))  # self-play is not rated
    gaps = [r["ahead_of_next"] for r in document["ratings"][0]["ratings"][:-1]]
    assert all(g["low"] > 0 or (g["high"] - g["low"]) / 2 < 150 for g in gaps)
    # a uniform schedule needs 28 episodes a pair (252 in all) to get there
    assert sum(map(sum, episodes)) < 252


def test_precision_schedules_the_same_episodes_at_jobs_1_and_2() -> None:
    assert evade_cross(1, precision=150, max_episodes=12) == \
        evade_cross(2, precision=150, max_episodes=12)


def test_a_precision_that_is_not_positive_is_one_line(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert main(["eval", *EVADE, "--cross", "--precision", "0"]) == 2
    assert capsys.readouterr().err == "parcat: error: --precision must be > 0, got 0.0\n"


@pytest.mark.parametrize("kind", [["--cross"], ["--each", "--against", "noop"],
                                  ["--candidate", "noop"]])
def test_ctrl_c_stops_a_comparison_at_once_with_what_ran(tmp_path: Path, kind: list[str]) -> None:
    # every pair would run ~100 s: carrying on after Ctrl-C to the next pair would miss the
    # deadline by far
    marker, out = tmp_path / "began", tmp_path / "out.json"
    slow = f"tests.rank_fakes:Slow,marker={marker}"
    command = [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "--set", "max_steps=100",
               "-n", "50", "-p", slow, "-p", "greedy", *kind, "--no-progress", "-o", str(out)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), process.stderr.read() if process.poll() is not None else ""
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert err.rstrip().splitlines()[-1].startswith("interrupted: the results so far")
    assert json.loads(out.read_text())["schema"].startswith("parcat.")


def test_compare_shows_evades_capture_rate_per_side_in_table_json_and_csv(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    for policy, out in zip(("noop", "greedy"), files, strict=True):
        assert main(["eval", "-m", "evade", "--set", "max_steps=30", "-p", policy, "-n", "4",
                     "--no-progress", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["compare", *map(str, files), "--format", "json"]) == 0
    rows = {(r["side"], r["metric"]): r for r in json.loads(capsys.readouterr().out)}
    assert {("pursuer", "captured"), ("evader", "captured"), ("pursuer", "capture_step"),
            ("pursuer", "return"), ("evader", "return")} <= set(rows)
    assert ("*", "return") not in rows  # a mean of pursuers' and evaders' returns means nothing
    assert rows[("pursuer", "return")]["episodes_a"] == 4  # one score per episode and side
    caught = rows[("pursuer", "captured")]
    assert caught["mean_a"] == 0.0 < caught["mean_b"]  # greedy pursuers catch, noop ones do not
    assert rows[("pursuer", "capture_step")]["difference"]["value"] < 0  # and sooner
    assert main(["compare", *map(str, files), "--format", "csv"]) == 0
    csv_rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {(r["side"], r["metric"]) for r in csv_rows} == set(rows)
    assert main(["compare", *map(str, files)]) == 0
    table = capsys.readouterr().out
    returns, _, per_side = table.partition("per side")
    assert [line.split("|")[1].strip() for line in returns.splitlines()
            if line.startswith("| evade")] == ["evade (pursuer)", "evade (evader)"]
    assert "| evader " in per_side and "captured" in per_side and "return" not in per_side


def test_compare_counts_win_draw_loss_and_illegal_moves_per_side(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    for second, out in zip((IGNORES_MASK, HEURISTIC), files, strict=True):
        assert main(["eval", "-m", mission(tmp_path, CONNECT_FOUR), "-p", "noop", "-p", second,
                     "-n", "2", "--executor", "inline", "--no-progress", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["compare", *map(str, files), "--format", "json"]) == 0
    rows = {(r["side"], r["metric"]): r for r in json.loads(capsys.readouterr().out)}
    # player_1 ignores the mask in A and loses by an illegal move; the heuristic wins in B
    assert (rows[("player_1", "illegal moves")]["mean_a"],
            rows[("player_1", "illegal moves")]["mean_b"]) == (1.0, 0.0)
    assert (rows[("player_1", "win")]["mean_a"], rows[("player_1", "win")]["mean_b"]) == \
        (0.0, 1.0)
    assert rows[("player_0", "loss")]["mean_b"] == 1.0
    assert {m for _, m in rows} == {"return", "win", "draw", "loss", "illegal moves"}


def test_connect_four_ranks_random_mlp_noop_and_a_heuristic_alike_at_jobs_1_and_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 25's acceptance run in one command; threads for --jobs 2, as worker processes
    # would check PettingZoo's environment once per pair (~3 s each, 16 pairs)
    policies = ["random", "mlp", "noop", HEURISTIC]
    found = []
    for jobs, executor in (("1", "inline"), ("2", "thread")):
        assert main(["eval", "-m", mission(tmp_path, CONNECT_FOUR),
                     *(f for p in policies for f in ("-p", p)), "-n", "2", "--cross",
                     "--jobs", jobs, "--executor", executor, "--no-progress",
                     "--format", "json"]) == 0
        found.append(strip_timings(json.loads(capsys.readouterr().out)))
    assert found[0]["ratings"] == found[1]["ratings"]
    assert found[0]["episodes"] == found[1]["episodes"]
    ranking = [r["policy"] for r in found[0]["ratings"][0]["ratings"]]
    assert ranking[0] == HEURISTIC and sorted(ranking) == sorted(policies)
    assert all(r["rating"]["low"] < r["rating"]["value"] < r["rating"]["high"]
               for r in found[0]["ratings"][0]["ratings"])
