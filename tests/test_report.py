"""Summaries: the statistics are right, per policy and for all agents, and per side where
the agents have different roles (evade's pursuers and evader)."""

from __future__ import annotations

import io
import json
import math

import pytest

from parcat.cli.main import main
from parcat.episode.results import AgentResult, EpisodeResult, EpisodeStatus, ErrorInfo
from parcat.eval.report import describe, strip_timings, summarize, summary_csv, t_quantile_95


def episode(index: int, rewards: list[tuple[str, float]], ok: bool = True) -> EpisodeResult:
    return EpisodeResult(
        mission="m", episode_index=index, seed=index, steps=1,
        agents=tuple(AgentResult(f"a{i}", p, r) for i, (p, r) in enumerate(rewards)),
        status=EpisodeStatus.OK if ok else EpisodeStatus.FAILED,
        error=None if ok else ErrorInfo("E", "boom", "tb"),
    )


def test_describe_matches_textbook_values() -> None:
    s = describe("m", "p", [1.0, 2.0, 3.0, 4.0], failed=0)
    assert s.mean == 2.5 and s.min == 1.0 and s.max == 4.0
    assert s.std == pytest.approx(math.sqrt(5 / 3))
    half = 3.182 * math.sqrt(5 / 3) / 2
    assert (s.ci95_low, s.ci95_high) == pytest.approx((2.5 - half, 2.5 + half))
    assert t_quantile_95(1000) == pytest.approx(1.96, abs=0.01)


def test_summary_per_policy_uses_per_agent_means_and_skips_failures() -> None:
    episodes = [
        episode(0, [("x", 1.0), ("x", 3.0), ("y", 10.0)]),
        episode(1, [("x", 5.0), ("y", 0.0), ("y", 2.0)]),
        episode(2, [("x", 100.0), ("y", 100.0)], ok=False),
    ]
    rows = {(s.mission, s.policy): s for s in summarize(episodes)}
    assert rows[("m", "x")].mean == pytest.approx((2.0 + 5.0) / 2)
    assert rows[("m", "y")].mean == pytest.approx((10.0 + 1.0) / 2)
    assert rows[("m", "*")].mean == pytest.approx((14 / 3 + 7 / 3) / 2)
    assert rows[("m", "*")].failed == 1 and rows[("m", "*")].episodes == 2
    assert summary_csv(rows.values()).splitlines()[0].startswith("mission,policy,episodes")


def test_strip_timings_removes_nested_timing_keys() -> None:
    doc = {"timing": {"elapsed_s": 1}, "episodes": [{"duration_s": 2.0, "steps": 3}]}
    assert strip_timings(doc) == {"episodes": [{"steps": 3}]}


def test_retries_are_summed_per_policy_and_round_trip_but_are_no_result() -> None:
    played = EpisodeResult("m", 0, 0, 1, (AgentResult("a0", "x", 1.0, retries=2),
                                          AgentResult("a1", "y", 2.0, retries=1)))
    failed = EpisodeResult("m", 1, 1, 1, (AgentResult("a0", "x", 0.0, retries=4),),
                           status=EpisodeStatus.FAILED, error=ErrorInfo("E", "boom", "tb"))
    rows = {s.policy: s.retries for s in summarize([played, failed])}
    assert rows == {"*": 7, "x": 6, "y": 1}
    header, everyone, *_ = summary_csv(summarize([played])).splitlines()
    assert header.endswith(",retries") and everyone.endswith(",3")
    assert EpisodeResult.from_dict(played.to_dict()) == played
    with pytest.raises(TypeError, match="retries: expected an integer, got str"):
        EpisodeResult.from_dict({**played.to_dict(), "agents": [
            {"agent_id": "a0", "policy": "x", "reward": 1.0, "retries": "2"}]})
    clean = EpisodeResult("m", 0, 0, 1, (AgentResult("a0", "x", 1.0), AgentResult("a1", "y", 2.0)))
    assert strip_timings(played.to_dict()) == strip_timings(clean.to_dict())


def test_the_table_shows_retries_only_when_there_are_some() -> None:
    from rich.console import Console

    from parcat.cli.render import summary_table

    def shown(retries: int) -> str:
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(summary_table(summarize([
            EpisodeResult("m", 0, 0, 1, (AgentResult("a0", "x", 1.0, retries=retries),))])))
        return console.export_text()

    assert "retries" in shown(3) and "retries" not in shown(0)


def chase(index: int, pursuer: str, evader: str) -> EpisodeResult:
    """Two pursuers scoring about -1 and an evader scoring about +10: different scales."""
    return EpisodeResult("chase", index, index, 1, (
        AgentResult("pursuer_0", pursuer, -1.0 - index), AgentResult("pursuer_1", pursuer, -1.0),
        AgentResult("evader", evader, 10.0 + index)))


def test_sides_of_an_asymmetric_mission_get_their_own_rows_and_none_mixes_them() -> None:
    rows = summarize([chase(0, "x", "y"), chase(1, "y", "y")])
    assert [(s.policy, s.side, s.episodes) for s in rows] == [
        ("*", "pursuer", 2), ("*", "evader", 2), ("x", "pursuer", 1), ("y", "evader", 2),
        ("y", "pursuer", 1)]
    by = {(s.policy, s.side): s for s in rows}
    assert by[("*", "pursuer")].mean == pytest.approx((-1.0 + -1.5) / 2)
    assert by[("*", "evader")].mean == pytest.approx(10.5)
    # a mission whose agents share one role keeps one row for all of them
    symmetric = summarize([episode(0, [("x", 1.0), ("y", 3.0)])])
    assert [(s.policy, s.side) for s in symmetric] == [("*", ""), ("x", ""), ("y", "")]
    assert "side" in summary_csv(rows).splitlines()[0].split(",")


def test_plain_eval_on_evade_shows_pursuers_and_evader_apart(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", "evade", "--set", "max_steps=10", "-p", "greedy", "-n", "2",
                 "--no-progress", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert [(s["policy"], s["side"]) for s in summary] == [
        ("*", "pursuer"), ("*", "evader"), ("greedy", "pursuer"), ("greedy", "evader")]
    assert main(["eval", "-m", "evade", "--set", "max_steps=10", "-p", "greedy", "-n", "2",
                 "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert "| side " in table and "| evader " in table and "| pursuer " in table
