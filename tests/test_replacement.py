"""Value over replacement (``parcat eval --candidate SPEC``): the pool of ``-p`` policies,
then the candidate in each member's place on the same seeds, paired episode by episode."""

from __future__ import annotations

import json

import pytest

from parcat.cli.main import main
from parcat.eval.evaluate import make_config
from parcat.eval.replacement import MEAN, value_over_replacement
from parcat.eval.report import strip_timings
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec


def harvest_pool(jobs: int) -> dict:
    config = make_config(["harvest"], ["greedy", "random"], episodes=6, seed=2,
                         overrides={"max_steps": 30})
    return strip_timings(value_over_replacement(config, parse_policy_spec("noop"),
                                                RunOptions(jobs=jobs), seed=2).to_document())


def test_replacing_the_strong_member_costs_more_than_the_weak_one() -> None:
    document = harvest_pool(1)
    rows = {r["replaced"]: r for r in document["replacement"]["rows"]}
    assert set(rows) == {"greedy", "random", MEAN}
    assert all(r["episodes"] == 6 for r in rows.values())
    # noop in greedy's place loses the deliveries greedy made; in random's, hardly anything
    assert rows["greedy"]["difference"]["high"] < rows["random"]["difference"]["low"]
    assert rows["greedy"]["pool"] == rows["random"]["pool"]  # one pool run, paired
    runs = document["runs"]
    assert list(runs) == ["pool", "greedy", "random"]
    assert {e["seed"] for e in runs["pool"]["episodes"]} == \
        {e["seed"] for e in runs["greedy"]["episodes"]}
    assert {a["policy"] for e in runs["greedy"]["episodes"] for a in e["agents"]} <= \
        {"noop", "random"}


def test_the_same_numbers_at_jobs_1_and_2() -> None:
    assert harvest_pool(1) == harvest_pool(2)


def test_cli_prints_the_table_and_writes_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", "harvest", "--set", "max_steps=20", "-p", "greedy", "-p",
                 "random", "-n", "3", "--candidate", "noop", "--no-progress", "-f",
                 "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "parcat.replacement/1"
    assert document["replacement"]["candidate"] == "noop"


@pytest.mark.parametrize(("args", "line"), [
    (["--candidate", "greedy"],
     "--candidate 'greedy' is in the pool already (-p); give a policy the pool does not have"),
    (["--candidate", "noop", "--each"],
     "--each and --candidate are different ways to compare: give one"),
    (["--candidate", "noop", "--precision", "0.1"],
     "--candidate cannot be combined with --precision yet"),
    (["--candidate", "nosuch"], "policy 'nosuch' is not a built-in"),
])
def test_bad_candidates_are_one_line(args: list[str], line: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-m", "harvest", "-p", "greedy", "-p", "random", "-n", "1", *args,
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parcat: error: {line}") and err.count("\n") == 1
