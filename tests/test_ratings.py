"""Bradley–Terry ratings from cross-play games (parcat.eval.ratings), on simulated outcomes
of a known model: intervals that cover the truth, finite ratings for a policy that always
wins, reproducible bootstraps, duplicate games for sides on different scales, and the
per-side outcomes (win/draw/loss, illegal moves, the environment's numbers)."""

from __future__ import annotations

import numpy as np
import pytest

from parcat.episode.results import AgentResult, EpisodeResult, EpisodeStatus, ErrorInfo
from parcat.eval.ratings import (
    DUPLICATE,
    ELO,
    WIN_DRAW_LOSS,
    Seats,
    has_winner,
    illegal_move,
    rate,
    side_label,
    side_rows,
)
from tests.rank_fakes import AGENTS, DuelEnv

SEATS = Seats("duel", ("player_0",), ("player_1",))
NAMES = ["a", "b", "c", "d"]


def duel(index: int, first: str, second: str, returns: tuple[float, float],
         stats: dict[str, float] | None = None, mission: str = "duel") -> EpisodeResult:
    """One episode of ``first`` (player_0) against ``second`` (player_1)."""
    return EpisodeResult(mission, index, index, 1,
                         (AgentResult("player_0", first, returns[0]),
                          AgentResult("player_1", second, returns[1])), stats or {})


def simulated(truth: np.ndarray, episodes: int, seed: int, seat: float = 0.3,
              draw: float = 0.1) -> list[EpisodeResult]:
    """Cross-play of a known Bradley–Terry population: every ordered pair plays
    ``episodes`` episodes; player_0 scores p = 1 / (1 + exp(r_1 - r_0 - seat)) on average,
    with a draw ``draw`` of the time."""
    rng = np.random.default_rng(seed)
    found = []
    for index in range(episodes):
        for i, first in enumerate(NAMES):
            for j, second in enumerate(NAMES):
                if i == j:
                    continue
                p = 1 / (1 + np.exp(truth[j] - truth[i] - seat))
                u = rng.random()
                outcome = (1.0, -1.0) if u < p - draw / 2 else (
                    (0.0, 0.0) if u < p + draw / 2 else (-1.0, 1.0))
                found.append(duel(index, first, second, outcome))
    return found


def test_known_ratings_fall_within_their_intervals_in_90_percent_of_50_trials() -> None:
    truth = np.array([-1.0, -0.3, 0.4, 0.9])
    centred = (truth - truth.mean()) * ELO
    covered = []
    for trial in range(50):
        table, = rate([SEATS], simulated(truth, 40, seed=trial), NAMES, reps=300, seed=trial)
        assert table.kind == WIN_DRAW_LOSS
        covered.append([r.rating.low <= centred[NAMES.index(r.policy)] <= r.rating.high
                        for r in table.ratings])
    # measured: 96.5% of the 200 intervals, and all four at once in 92% of the trials
    assert np.mean(covered) >= 0.9
    assert np.mean(np.all(covered, axis=1)) >= 0.9


def test_the_best_rated_policy_is_the_strongest_and_the_seat_advantage_is_found() -> None:
    table, = rate([SEATS], simulated(np.array([-1.0, -0.3, 0.4, 0.9]), 60, seed=7, seat=1.0),
                  NAMES, reps=300, seed=0)
    assert [r.policy for r in table.ratings] == ["d", "c", "b", "a"]
    assert table.ratings[0].p_best > 0.9
    assert abs(sum(r.p_best for r in table.ratings) - 1) < 1e-9
    assert table.seat is not None and table.seat.low <= ELO <= table.seat.high


def test_a_policy_that_wins_every_game_has_a_finite_rating() -> None:
    pairs = (("a", "b"), ("b", "c"))  # the winner first; then with seats swapped
    games = [duel(e, win, lose, (1.0, -1.0)) for e in range(10) for win, lose in pairs]
    games += [duel(e, lose, win, (-1.0, 1.0)) for e in range(10) for win, lose in pairs]
    table, = rate([SEATS], games, ["a", "b", "c"], reps=200)
    assert [r.policy for r in table.ratings] == ["a", "b", "c"]
    assert all(np.isfinite([r.rating.low, r.rating.value, r.rating.high]).all()
               for r in table.ratings)
    assert table.ratings[0].p_best == 1.0


def test_the_bootstrap_is_a_function_of_its_seed() -> None:
    games = simulated(np.array([0.0, 0.2, 0.4, 0.6]), 10, seed=1)
    one = rate([SEATS], games, NAMES, reps=200, seed=5)[0].to_dict()
    assert one == rate([SEATS], games, NAMES, reps=200, seed=5)[0].to_dict()
    assert one != rate([SEATS], games, NAMES, reps=200, seed=6)[0].to_dict()


def test_sides_on_different_scales_play_duplicate_games_on_one_seed() -> None:
    # the row side scores about -1, the column side about +10: comparing the two sides of
    # one episode would make every column player win; on one seed, each policy's two seats
    # added up compare what matters
    seats = Seats("chase", ("pursuer_0", "pursuer_1"), ("evader",))

    def chase(index: int, pursuer: str, evader: str, returns: tuple[float, float]
              ) -> EpisodeResult:
        return EpisodeResult("chase", index, index, 1, (
            AgentResult("pursuer_0", pursuer, returns[0]),
            AgentResult("pursuer_1", pursuer, returns[0]),
            AgentResult("evader", evader, returns[1])))
    episodes = []
    for index in range(8):
        episodes += [chase(index, "good", "bad", (-0.5, 9.0)),
                     chase(index, "bad", "good", (-1.5, 11.0))]
    table, = rate([seats], episodes, ["bad", "good"], reps=100)
    assert table.kind == DUPLICATE and table.seat is None
    assert [r.policy for r in table.ratings] == ["good", "bad"]
    assert [r.games for r in table.ratings] == [8, 8]  # one game a seed, both seats


def test_illegal_moves_win_draw_loss_and_metrics_per_policy_and_side() -> None:
    episodes = [duel(0, "a", "b", (1.0, -1.0), {"captured": 1.0}),
                duel(1, "a", "b", (0.0, 0.0), {"captured": 0.0}),
                duel(0, "b", "a", (-1.0, 0.0), {"captured": 1.0}),  # b moved illegally
                duel(2, "a", "a", (1.0, -1.0))]  # self-play: no game
    assert has_winner(episodes)
    assert illegal_move(episodes[2], ["player_0"]) and not illegal_move(episodes[0], ["player_1"])
    rows = {(r.policy, r.side): r for r in side_rows([SEATS], episodes, reps=50)}
    assert set(rows) == {("a", "player_0"), ("b", "player_1"), ("b", "player_0"),
                         ("a", "player_1")}
    first = rows[("a", "player_0")]
    assert first.episodes == 2 and first.illegal_moves == 0
    assert [first.outcomes[k].value for k in ("win", "draw", "loss")] == [0.5, 0.5, 0.0]
    assert first.metrics["captured"].value == 0.5
    assert rows[("b", "player_0")].illegal_moves == 1
    assert rows[("a", "player_1")].outcomes["win"].value == 1.0


@pytest.mark.parametrize(("agents", "others", "label"), [
    (("pursuer_0", "pursuer_1"), ("evader",), "pursuer"),
    (("player_0",), ("player_1",), "player_0"),
    (("agent_0", "agent_1"), ("agent_2", "agent_3"), "agent_0,agent_1"),
])
def test_a_side_is_named_by_its_prefix_or_its_agents(agents: tuple[str, ...],
                                                     others: tuple[str, ...],
                                                     label: str) -> None:
    assert side_label(agents, others) == label


def test_a_policy_whose_episodes_all_failed_is_listed_last_unrated() -> None:
    games = simulated(np.array([0.0, 0.5, 1.0, 0.0]), 6, seed=3)
    games = [e if "d" not in {a.policy for a in e.agents} else
             EpisodeResult(e.mission, e.episode_index, e.seed, 0, e.agents,
                           status=EpisodeStatus.FAILED,
                           error=ErrorInfo("ValueError", "crashed", "", "player_0"))
             for e in games]
    table, = rate([SEATS], games, NAMES, reps=100)
    assert [r.policy for r in table.ratings][-1] == "d"
    last = table.ratings[-1]
    assert np.isnan(last.rating.value) and last.p_best == 0 and last.games == 0
    assert table.ratings[-2].ahead is None
    rated = [r.rating.value for r in table.ratings[:-1]]
    assert abs(np.mean(rated)) < 1e-9  # the mean of the rated policies is 0


def test_the_duel_envs_games_recover_known_ratings_in_90_percent_of_50_trials() -> None:
    # the outcomes drawn by the test environment itself (tests.rank_fakes.DuelEnv: player_0
    # wins with Bradley–Terry's probability, seat advantage included), each seed as
    # parcat plays it; test_rank.py plays it through `parcat eval --cross`
    truth = np.array([-1.0, -0.3, 0.4, 0.9])
    centred = (truth - truth.mean()) * ELO
    env = DuelEnv(seat=0.3)
    covered = []
    for trial in range(50):
        episodes = []
        for index in range(30):
            for i, j in ((i, j) for i in range(4) for j in range(4) if i != j):
                env.reset(seed=trial * 1000 + index)
                rewards = env.step(dict(zip(AGENTS, ([truth[i]], [truth[j]]), strict=True)))[1]
                episodes.append(duel(index, NAMES[i], NAMES[j],
                                     (rewards["player_0"], rewards["player_1"])))
        table, = rate([SEATS], episodes, NAMES, reps=200, seed=trial)
        covered.append([r.rating.low <= centred[NAMES.index(r.policy)] <= r.rating.high
                        for r in table.ratings])
    # measured: 96.5% of the 200 intervals, and all four at once in 92% of the trials
    assert np.mean(covered) >= 0.9
    assert np.mean(np.all(covered, axis=1)) >= 0.9
