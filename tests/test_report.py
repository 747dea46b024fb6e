"""Summaries: the statistics are right, per policy and for all agents."""

from __future__ import annotations

import io
import math

import pytest

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
