"""The results file during a run: running snapshots, the final write, and resuming."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parcat.core.errors import ConfigError, OutputError
from parcat.episode.results import AgentResult, EpisodeResult, EpisodeStatus, ErrorInfo
from parcat.eval.report import SCHEMA, make_document, summarize
from parcat.eval.results_file import ResultsWriter, journal_path, load_finished

CONFIG = {"missions": ["harvest"], "policies": ["random"], "episodes": 6, "seed": 0}


def episode(index: int, status: EpisodeStatus = EpisodeStatus.OK,
            phase: str | None = None) -> EpisodeResult:
    error = None if phase is None else ErrorInfo("ValueError", "boom", "Traceback ...",
                                                 "agent_0", phase)
    return EpisodeResult(
        mission="harvest", episode_index=index, seed=100 + index, steps=10 + index,
        agents=(AgentResult("agent_0", "random", 1.5 * index),
                AgentResult("agent_1", "random", -0.25, late_actions=index)),
        stats={"delivered": float(index)}, status=status, error=error,
        task={"goal": [index, 0.5]} if index % 2 else None, duration_s=0.125 * index,
    )


class Run:
    """A run's episodes so far, as ``evaluate`` keeps them, and its document callback."""

    def __init__(self) -> None:
        self.episodes: list[EpisodeResult] = []
        self.statuses: list[str] = []

    def document(self, status: str) -> dict[str, Any]:
        self.statuses.append(status)
        return make_document(CONFIG, self.episodes, status, {"elapsed_s": 1.0})


def read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def test_each_snapshot_is_valid_json_with_the_episodes_so_far(tmp_path: Path) -> None:
    path, run = tmp_path / "results.json", Run()
    writer = ResultsWriter(path, run.document, CONFIG, every_s=0.0, ratio=0.0)
    for index in range(3):
        run.episodes.append(episode(index))
        writer.episode_finished()
        data = read(path)
        assert data["status"] == "running" and data["schema"] == SCHEMA
        assert [e["episode_index"] for e in data["episodes"]] == list(range(index + 1))
    assert run.statuses == ["running"] * 3
    assert not list(tmp_path.glob(".*.tmp"))  # every write was atomic and cleaned up


def test_a_writer_made_directly_never_takes_over_a_journal_that_is_not_parcats(
        tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    journal = journal_path(path)
    journal.write_text("my own journal\n")
    with pytest.raises(OutputError, match=re.escape(
            f"--output '{path}': '{journal}' is not a parcat eval journal, and the run would "
            "replace it; move it away or give another --output")):
        ResultsWriter(path, Run().document, CONFIG)
    assert journal.read_text() == "my own journal\n"


def test_snapshots_are_rate_limited_but_the_final_write_is_not(tmp_path: Path) -> None:
    path, run = tmp_path / "results.json", Run()
    writer = ResultsWriter(path, run.document, CONFIG, every_s=3600.0)
    for index in range(5):
        run.episodes.append(episode(index))
        writer.episode_finished()
    assert not path.exists() and run.statuses == []
    writer.finish("complete")
    data = read(path)
    assert data["status"] == "complete" and len(data["episodes"]) == 5
    assert data["config"] == CONFIG


def test_resume_reads_back_exactly_what_was_written(tmp_path: Path) -> None:
    path, run = tmp_path / "results.json", Run()
    run.episodes = [episode(i) for i in range(4)]
    ResultsWriter(path, run.document, CONFIG).finish("interrupted")
    finished = load_finished(path, CONFIG)
    assert finished == {("harvest", i): episode(i) for i in range(4)}


def test_resume_keeps_a_running_snapshot_left_by_a_killed_run(tmp_path: Path) -> None:
    path, run = tmp_path / "results.json", Run()
    writer = ResultsWriter(path, run.document, CONFIG, every_s=0.0, ratio=0.0)
    run.episodes = [episode(0), episode(1)]
    writer.episode_finished()
    (tmp_path / ".results.json.abc123.tmp").write_text('{"half": ')  # killed mid-write
    assert read(path)["status"] == "running"
    assert set(load_finished(path, CONFIG)) == {("harvest", 0), ("harvest", 1)}
    # the next run starts: a temp file it did not make may be the user's, and stays
    ResultsWriter(path, run.document, CONFIG)
    assert (tmp_path / ".results.json.abc123.tmp").read_text() == '{"half": '
    assert path.exists()


def test_resume_runs_again_what_failed_because_of_where_or_when_it_ran(tmp_path: Path) -> None:
    path, run = tmp_path / "results.json", Run()
    run.episodes = [episode(0), episode(1, EpisodeStatus.TIMEOUT),
                    episode(2, EpisodeStatus.FAILED, "worker"),
                    episode(3, EpisodeStatus.FAILED, "policy"),
                    episode(4, EpisodeStatus.FAILED, "step")]
    ResultsWriter(path, run.document, CONFIG).finish("failed")
    # a policy or environment error happens again with the same seeds: it is kept
    assert sorted(i for _, i in load_finished(path, CONFIG)) == [0, 3, 4]


def test_resume_without_a_file_starts_from_nothing(tmp_path: Path) -> None:
    assert load_finished(tmp_path / "absent.json", CONFIG) == {}


def test_a_csv_output_holds_the_summary_and_cannot_be_resumed(tmp_path: Path) -> None:
    path, run = tmp_path / "results.csv", Run()
    run.episodes = [episode(i) for i in range(3)]
    ResultsWriter(path, run.document, CONFIG).finish("complete")
    rows = list(csv.DictReader(path.read_text().splitlines()))
    assert rows and rows[0]["mission"] == "harvest"
    with pytest.raises(ConfigError, match=re.escape(
            "--resume needs a JSON --output (a CSV holds no episodes)")):
        load_finished(path, CONFIG)


def test_resume_refuses_another_configs_results(tmp_path: Path) -> None:
    path, run = tmp_path / "results.json", Run()
    run.episodes = [episode(0)]
    ResultsWriter(path, run.document, CONFIG).finish("complete")
    with pytest.raises(ConfigError, match=re.escape(
            f"--resume: '{path}' was written by a run with other missions, policies, "
            "episodes or seed; use another --output or the same arguments")):
        load_finished(path, {**CONFIG, "seed": 1})


@pytest.mark.parametrize("text", ['{"schema": "something.else"}', "[1, 2]"])
def test_resume_refuses_files_that_are_not_parcat_results(tmp_path: Path, text: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(
            f"--resume: '{path}' is not a parcat eval results file")):
        load_finished(path, CONFIG)


def test_resume_refuses_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{"schema": ')
    with pytest.raises(ConfigError, match=re.escape(f"--resume: cannot read '{path}': ")):
        load_finished(path, CONFIG)


def test_resume_names_a_malformed_episode(tmp_path: Path) -> None:
    path, run = tmp_path / "results.json", Run()
    run.episodes = [episode(0), episode(1)]
    ResultsWriter(path, run.document, CONFIG).finish("complete")
    data = read(path)
    del data["episodes"][1]["seed"]
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=re.escape(
            f"--resume: '{path}': episode 1 is malformed (KeyError('seed')); "
            "use another --output")):
        load_finished(path, CONFIG)


def _mutations() -> st.SearchStrategy[Any]:
    junk = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                     st.floats(allow_nan=True), st.text(max_size=8),
                     st.lists(st.integers(), max_size=3),
                     st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
    return st.tuples(st.integers(0, 5), st.sampled_from(
        ["mission", "episode_index", "seed", "steps", "agents", "stats", "status", "error",
         "duration_s", "warnings", "reward", "agent_id", "late_actions"]), junk)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(_mutations(), min_size=1, max_size=4), cut=st.integers(0, 4000))
def test_fuzzed_resume_files_load_or_give_a_config_error(
    tmp_path: Path, mutations: list[tuple[int, str, Any]], cut: int
) -> None:
    path, run = tmp_path / "fuzz.json", Run()
    journal_path(path).unlink(missing_ok=True)  # the last example's, which may be cut anywhere
    run.episodes = [episode(i, EpisodeStatus.FAILED, "step") if i == 2 else episode(i)
                    for i in range(6)]
    ResultsWriter(path, run.document, CONFIG).finish("complete")
    data = read(path)
    for index, key, value in mutations:
        target = data["episodes"][index]
        if key in ("reward", "agent_id", "late_actions"):
            agents = target["agents"]
            if not (isinstance(agents, list) and agents and isinstance(agents[0], dict)):
                continue  # an earlier mutation replaced the agents
            target = agents[0]
        target[key] = value
    journal = journal_path(path)
    lines = [json.dumps({"schema": "parcat.eval.journal", "version": 1, "config": CONFIG})]
    lines += [json.dumps(e) for e in data["episodes"]]
    journal.write_text(("\n".join(lines) + "\n")[:cut or None])
    path.write_text(json.dumps(data))
    try:
        finished = load_finished(path, CONFIG)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--resume: ")
    else:
        assert all(isinstance(a.reward, float) for e in finished.values() for a in e.agents)
        summarize(list(finished.values()))  # whatever loaded can be summarised
