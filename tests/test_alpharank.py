"""α-Rank of cross-play games (parcat.eval.alpharank): a rock-paper-scissors population
shares the mass evenly where Bradley–Terry can only call it a tie, a transitive one puts it
on the best, and ``--rating alpharank`` ranks by it in ``eval --cross`` and ``rank``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from parcat.cli.main import main
from parcat.eval.alpharank import alpharank, stationary
from parcat.eval.ratings import rate
from tests.test_ratings import NAMES, SEATS, duel, simulated

DUEL = "name: duel\nenv: tests.rank_fakes:DuelEnv\nmax_steps: 1\n"


def cycle(episodes: int) -> list:
    """a beats b beats c beats a, every time, in both seats; d loses to all of them."""
    beats = [("a", "b"), ("b", "c"), ("c", "a"), ("a", "d"), ("b", "d"), ("c", "d")]
    found = []
    for index in range(episodes):
        for win, lose in beats:
            found += [duel(index, win, lose, (1.0, -1.0)), duel(index, lose, win, (-1.0, 1.0))]
    return found


def test_rock_paper_scissors_shares_the_mass_evenly() -> None:
    masses = stationary(np.array([[0.5, 0.0, 1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5]]))
    np.testing.assert_allclose(masses, [1 / 3] * 3)
    table, = alpharank([SEATS], cycle(5), NAMES, reps=100)
    mass = {r.policy: r.rating for r in table.ratings}
    for name in "abc":
        assert mass[name].value == pytest.approx(1 / 3, abs=1e-6)
        assert mass[name].low - 1e-9 <= 1 / 3 <= mass[name].high + 1e-9
    assert mass["d"].value < 1e-6 and table.ratings[-1].policy == "d"
    # Bradley–Terry gives the cycle one rating each: the same, so it ranks nothing in it
    ratings = {r.policy: r.rating.value for r in rate([SEATS], cycle(5), NAMES, reps=50)[0].ratings}
    assert max(ratings[n] for n in "abc") - min(ratings[n] for n in "abc") < 1e-6


def test_a_transitive_population_puts_the_mass_on_the_best() -> None:
    masses = stationary(np.array([[0.5, 0.6, 0.7], [0.4, 0.5, 0.6], [0.3, 0.4, 0.5]]))
    assert masses[0] > 0.99
    table, = alpharank([SEATS], simulated(np.array([-1.0, -0.3, 0.4, 0.9]), 40, seed=2),
                       NAMES, reps=200, seed=0)
    best = table.ratings[0]
    assert best.policy == "d" and best.rating.value > 0.9 and best.p_best > 0.9
    assert abs(sum(r.rating.value for r in table.ratings) - 1) < 1e-9
    assert all(r.rating.low <= r.rating.value <= r.rating.high for r in table.ratings)


def test_the_masses_are_a_function_of_the_seed() -> None:
    games = simulated(np.array([0.0, 0.1, 0.2, 0.3]), 10, seed=1)
    one = alpharank([SEATS], games, NAMES, reps=100, seed=5)[0].to_dict()
    assert one == alpharank([SEATS], games, NAMES, reps=100, seed=5)[0].to_dict()
    assert one != alpharank([SEATS], games, NAMES, reps=100, seed=6)[0].to_dict()


def test_rating_alpharank_ranks_eval_cross_and_rank(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mission = tmp_path / "duel.yaml"
    mission.write_text(DUEL)
    out = tmp_path / "cross.json"
    policies = [f"tests.rank_fakes:Strength,rating={s}" for s in (-2, 0, 2)]
    assert main(["eval", "-m", str(mission), *(f for p in policies for f in ("-p", p)),
                 "-n", "10", "--cross", "--rating", "alpharank", "--executor", "inline",
                 "--no-progress", "-o", str(out)]) == 0
    assert "duel: α-Rank mass from win/draw/loss games" in capsys.readouterr().out
    document = json.loads(out.read_text())
    assert document["alpharank_model"]["model"] == "alpha-rank"
    masses, = document["alpharank"]
    assert masses["ratings"][0]["policy"] == policies[-1]
    assert masses["ratings"][0]["rating"]["value"] > 0.9
    assert main(["rank", str(out), "--rating", "alpharank", "--format", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["alpharank"] == document["alpharank"]
    assert main(["rank", str(out), "--format", "json"]) == 0
    assert "alpharank" not in json.loads(capsys.readouterr().out)


def test_rating_without_cross_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", "evade", "-p", "greedy", "-n", "1", "--rating", "alpharank",
                 "--no-progress"]) == 2
    assert capsys.readouterr().err == ("parcat: error: --rating alpharank ranks a --cross "
                                       "population: give --cross too\n")
