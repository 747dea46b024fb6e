"""stdout holds the command's output alone: what user code prints goes to stderr, in this
process and in workers, so ``-f json`` always parses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.helpers import kill_group, start_cli

PRINTING = "tests.fakes:PrintingPolicy"


@pytest.mark.parametrize("layout", [
    ["--jobs", "1", "--executor", "inline"],
    ["--jobs", "1", "--executor", "process"],
    ["--jobs", "2"],
])
def test_a_policy_that_prints_never_breaks_json_on_stdout(tmp_path: Path,
                                                          layout: list[str]) -> None:
    proc = start_cli(["eval", "-m", "harvest", "--set", "agents=2", "--set", "max_steps=5",
                      "-n", "2", "-p", PRINTING, "-f", "json", *layout], tmp_path)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, err
    document = json.loads(out)
    assert document["schema"] == "parcat.eval"
    assert "stepped" in err
