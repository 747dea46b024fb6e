"""Messages that explain: the eval header in words (what ran, not what was planned), returns
said to be per agent, totals said to be totals, did-you-mean for mission parameters and policy
keywords, a hint for a mission given without -m, the files written named on stderr, sim's
tables within a 120-column terminal."""

from __future__ import annotations

import io
import json
import os
import re
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from parcat.cli import sim_cmd
from parcat.cli.eval_cmd import header
from parcat.cli.main import main
from parcat.envs.missions import load_mission
from parcat.eval.evaluate import EvalConfig, evaluate
from parcat.parallel.planner import ExecutorKind
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from parcat.sim import SimMode, load_sim_config, run_sim, summarize
from tests.reliability.helpers import (
    episodes_journaled,
    kill_group,
    start_cli,
    wait_until,
    write_slow_mission,
)


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_eval_header_says_what_ran_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["eval", "-m", "harvest", "-n", "3", "--executor", "inline",
                        "--no-progress"], capsys)
    assert code == 0
    assert re.match(r"3 episodes of harvest in \d+\.\d\d s, one at a time in this process; "
                    r"returns per agent", out), out


def test_the_header_names_the_worker_processes_that_came_up_not_the_plans() -> None:
    config = EvalConfig((load_mission("harvest"),), (parse_policy_spec("greedy"),), episodes=4)
    report = evaluate(config, RunOptions(jobs=2, executor=ExecutorKind.PROCESS))
    assert report.worker_processes == 2
    assert re.fullmatch(r"4 episodes of harvest in \d+\.\d\d s on 2 worker processes, one at "
                        r"a time each; returns per agent", header(report))
    # a plan of two workers none of which came up (the run ended first): this process ran it
    report.worker_processes = 0
    assert ", one at a time in this process;" in header(report)
    report.config = replace(config, missions=(*config.missions, load_mission("evade")))
    assert header(report).startswith("4 episodes of 2 missions in ")


def test_resume_says_how_many_episodes_it_found(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "r.json"
    args = ["eval", "-m", "harvest", "-n", "4", "-o", str(out_file), "--no-progress"]
    assert run(args, capsys)[0] == 0
    document = json.loads(out_file.read_text())
    document["episodes"], document["status"] = document["episodes"][:3], "interrupted"
    out_file.write_text(json.dumps(document))
    code, out, err = run([*args, "--resume"], capsys)
    assert code == 0
    assert out.startswith("4 episodes of harvest (3 found in --output, 1 run now) in "), out
    assert err == (f"parcat: note: --resume: 3 finished episode(s) found in {out_file}; 1 to "
                   f"run\nparcat: wrote {out_file}\n")


@pytest.mark.parametrize(("args", "line"), [
    (["--set", "agent=8"], "mission 'harvest' has no parameter 'agent' (did you mean "
     "'agents'?); known: agents, max_steps, resources, size, view"),
    (["-p", "mlp,widht=64"], "policy 'mlp,widht=64': no keyword 'widht' (did you mean "
     "'width'?); mlp's keywords: width, depth, init_seed, agent_ids (mission 'harvest')"),
    (["-p", "random,seed=3"], "policy 'random,seed=3': no keyword 'seed'; random takes no "
     "keywords (mission 'harvest')"),
])
def test_a_mistyped_key_is_one_line_with_the_valid_ones(
        args: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["eval", "-m", "harvest", "-n", "1", *args], capsys) == (
        2, "", f"parcat: error: {line}\n")


@pytest.mark.parametrize(("args", "hint"), [
    (["eval", "harvest"], "missions are given with -m: parcat eval -m harvest"),
    (["plan", "harvest", "evade"], "missions are given with -m: parcat plan -m harvest -m evade"),
])
def test_a_mission_without_its_flag_hints_at_it(args: list[str], hint: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(args, capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"parcat: error: parcat {args[0]}: Got unexpected extra argument")
    assert err.endswith(f"; {hint}\n")


def test_compare_given_a_third_file_gets_no_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["compare", "a", "b", "c"], capsys)[2] == (
        "parcat: error: parcat compare: Got unexpected extra argument(s) (c)\n")


def test_eval_names_every_file_it_wrote(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out_file, trace, replays = tmp_path / "r.json", tmp_path / "t.json", tmp_path / "rp"
    code, _, err = run(["eval", "-m", "harvest", "-n", "2", "-o", str(out_file), "--trace",
                        str(trace), "--replay-dir", str(replays), "--no-progress"], capsys)
    assert code == 0
    assert err.splitlines() == [f"parcat: wrote {out_file}",
                                f"parcat: wrote {replays} (2 replays and index.json)",
                                f"parcat: wrote {trace}"]


def test_sim_tables_fit_a_120_column_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_sim_config(Path("configs/sim.yaml"), {}, flags={"iters": 20, "output": ""})
    record = run_sim(cfg, SimMode.SEQUENTIAL)

    def shown(width: int) -> list[str]:
        console = Console(file=io.StringIO(), width=width, highlight=False)
        monkeypatch.setattr(sim_cmd, "stdout_console", lambda: console)
        sim_cmd.show_summary(summarize(record), record.meta["wall_s"])
        return console.file.getvalue().splitlines()  # type: ignore[attr-defined]

    lines = shown(120)
    assert max(len(line) for line in lines) <= 120
    assert len(lines) == len(shown(1000))  # no cell wrapped onto a second line


def test_an_interrupted_eval_says_one_line_not_which_files_it_wrote(tmp_path: Path) -> None:
    mission, out = write_slow_mission(tmp_path), tmp_path / "r.json"
    proc = start_cli(["eval", "-m", str(mission), "-p", "random", "-n", "40", "-o", str(out),
                      "--executor", "inline"], tmp_path)
    try:
        assert wait_until(lambda: episodes_journaled(out) > 0, 60), "no episode journaled"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
        _, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 130, err
    assert err.splitlines()[-1:] == ["interrupted: the results so far are shown above (and in "
                                     "--output, if given)"], err
    assert "parcat: wrote" not in err
