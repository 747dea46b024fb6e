"""One flag vocabulary: a shared flag is spelled, shown, grouped and explained the same in
every command, which may add its own words (:data:`parcat.cli.options.SHARED`); ``-o`` takes
its format from the extension, ``-f`` offers only what the command writes, ``-c`` works for
eval too, completion completes; every help ends with examples."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from parcat.cli.main import COMMANDS, app, main
from parcat.cli.options import SHARED
from parcat.eval.report import strip_timings

runner = CliRunner()

TAKES = {
    "eval": {"mission", "policy", "config", "set", "seed", "jobs", "output", "format",
             "progress", "trace", "trust_code"},
    "plan": {"mission", "policy", "config", "set", "seed", "jobs", "format", "trust_code"},
    "train": {"mission", "config", "set", "seed", "jobs", "output", "format", "progress"},
    "sim": {"config", "set", "seed", "output", "format", "progress", "trust_code"},
    "serve": {"mission", "policy", "set", "trust_code"},
    "bench": {"output", "format", "progress"},
    "plot": {"output"},
    "compare": {"policy", "seed", "format"},
    "rank": {"seed", "format"},
    "replay": {"output", "trust_code"},
    "missions list": {"format"},
    "missions show": {"format"},
    "policies list": {"format"},
}
"""Which shared flags each command takes (README's table says the same)."""
ALIASES = {("train", "output"): {"--run-dir"}, ("bench", "output"): {"--chart"}}
"""Older long forms kept beside a shared flag."""
PYTHON_TYPE = re.compile(r"INTEGER|FLOAT|TEXT|BOOLEAN|<(bool|int|float|str|path|list\[str\])>")
"""How Click (and Typer 0.29) show a value's Python type."""


def commands() -> dict[str, Any]:
    """Every command's Click object by its words (``missions show``)."""
    found: dict[str, Any] = {}
    for entry in COMMANDS:
        command = entry.load()
        subs = getattr(command, "commands", None)
        if subs:
            found.update({f"{entry.name} {name}": sub for name, sub in subs.items()})
        else:
            found[entry.name] = command
    return found


def shared_flags(command: Any) -> dict[str, Any]:
    """The shared flags among ``command``'s options, by their name in SHARED."""
    found = {}
    for param in command.params:
        for name, flag in SHARED.items():
            if flag.decls[0].split("/")[0] in param.opts:
                found[name] = param
    return found


@pytest.mark.parametrize(("words", "command"), commands().items(), ids=list(commands()))
def test_every_shared_flag_reads_the_same_in_every_command(words: str, command: Any) -> None:
    found = shared_flags(command)
    assert set(found) == TAKES[words]
    for name, param in found.items():
        flag = SHARED[name]
        decls = [d for decl in flag.decls for d in decl.split("/")]
        long_forms = {d for d in decls if d.startswith("--")}
        short_forms = {d for d in decls if not d.startswith("--")}
        assert set(param.opts) | set(param.secondary_opts) == (
            long_forms | short_forms | ALIASES.get((words, name), set())), (words, name)
        # the same words first; a command may add its own (eval: "Repeat for several.")
        assert param.help.startswith(flag.help), (words, name)
        assert param.rich_help_panel == flag.panel, (words, name)
        assert param.metavar in (flag.metavars or (None, "")), (words, name, param.metavar)


@pytest.mark.parametrize(("words", "command"), commands().items(), ids=list(commands()))
def test_no_option_shows_a_python_type_for_its_value(words: str, command: Any) -> None:
    ctx = command.context_class(command)
    options = [p for p in command.params if p.param_type_name == "option"]
    for param in [*options, command.get_help_option(ctx)]:
        if param.is_flag:
            continue  # a flag shows no value
        shown = param.make_metavar(ctx)
        assert not PYTHON_TYPE.fullmatch(shown), (words, param.opts, shown)


@pytest.mark.parametrize("words", ["", *commands()])
def test_every_help_ends_with_two_to_four_examples(
        words: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main([*words.split(), "--help"]) == 0
    out = capsys.readouterr().out
    tail = out[out.rindex("Examples:"):].split("\n")[1:]
    examples = [line.strip() for line in tail if line.strip()]
    assert 2 <= len(examples) <= 4 and all(e.startswith("parcat ") for e in examples), out


@pytest.mark.parametrize("line", [line for entry in COMMANDS for line in entry.examples])
def test_every_example_is_a_valid_command_line(line: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # parsing refuses an unknown flag or command before --help answers
    assert main([*shlex.split(line.partition("#")[0])[1:], "--help"]) == 0, capsys.readouterr()


def test_eval_help_groups_its_options_and_talks_of_eval_only(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["eval", "--help"]) == 0
    out = capsys.readouterr().out
    for panel in ("Options", "Parallelism", "Failures and time limits", "Output",
                  "Comparing policies"):
        assert f"─ {panel} ─" in out
    assert "learner." not in out and "train takes" not in out
    assert main(["compare", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "eval and plan" not in out and "compare the agents it played" in out
    assert main(["train", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "learner.KEY=VALUE sets a learner option" in out
    assert "E.g. configs/cartpole-dqn.yaml" in out and "[default: 20]" in out


def test_root_help_offers_shell_completion(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--install-completion " in out and "--show-completion " in out
    assert "<bool>" not in out
    # a real process: completion reads the program's name and environment, not the runner's
    # Typer detects the shell from the process tree; this variable makes it take the shell
    # as the option's value instead (a test run may have no shell among its ancestors)
    shown = subprocess.run([sys.executable, "-m", "parcat", "--show-completion", "bash"],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert shown.returncode == 0, shown.stderr
    assert "_parcat_completion" in shown.stdout and "complete " in shown.stdout


@pytest.mark.parametrize(("line", "expected"), [
    ("parcat ev", "eval"),
    ("parcat eval --jo", "--jobs"),  # a lazy command's flags complete too
    ("parcat train --env-w", "--env-workers"),  # and the flags made from TrainConfig
])
def test_bash_completion_completes_commands_and_flags(line: str, expected: str) -> None:
    # what bash's completion function (parcat --install-completion bash) runs on <TAB>
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    script = subprocess.run([sys.executable, "-m", "parcat", "--show-completion", "bash"],
                            capture_output=True, text=True, timeout=60, env=env).stdout
    instruction = re.search(r"_PARCAT_COMPLETE=(\w+)", script)
    assert instruction is not None, script
    env = {**env, "_PARCAT_COMPLETE": instruction[1], "COMP_WORDS": line,
           "COMP_CWORD": str(len(line.split()) - 1)}
    done = subprocess.run([sys.executable, "-m", "parcat"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout.split(), done.stdout
    assert "Usage" not in done.stdout


COMPLETE_ENV = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
"""A real shell's environment, ``parcat`` on its PATH (the venv's)."""


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize(("words", "expected"), [
    (["parcat", "ev"], ["eval"]),
    (["parcat", "eval", "--jo"], ["--jobs"]),
    (["parcat", "eval", "-m", ""], ["evade", "goal_tasks", "harvest"]),
    (["parcat", "eval", "-m", "ha"], ["harvest"]),
    (["parcat", "missions", "show", "go"], ["goal_tasks"]),
])
def test_bash_completes_as_installed(words: list[str], expected: list[str]) -> None:
    # real bash runs the script --install-completion installs, as <TAB> would
    script = ("source <(parcat --show-completion bash); COMP_WORDS=(\"$@\"); "
              "COMP_CWORD=$(($# - 1)); _parcat_completion parcat; "
              "printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "-c", script, "bash", *words], capture_output=True,
                          text=True, timeout=120, env=COMPLETE_ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == expected, done.stdout


@pytest.mark.parametrize(("shell", "extra"), [
    ("zsh", {}), ("fish", {"_TYPER_COMPLETE_FISH_ACTION": "get-args"})])
def test_zsh_and_fish_complete_flags_and_missions(shell: str, extra: dict[str, str]) -> None:
    # what their installed scripts run on <TAB> (the shells are not installed here)
    def complete(line: str) -> str:
        env = {**COMPLETE_ENV, **extra, "_PARCAT_COMPLETE": f"complete_{shell}",
               "_TYPER_COMPLETE_ARGS": line}
        done = subprocess.run([sys.executable, "-m", "parcat"], capture_output=True,
                              text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout
    assert "--jobs" in complete("parcat eval --jo")
    assert "harvest" in complete("parcat eval -m ha") and "Usage" not in complete("parcat ev")


def test_policy_help_shows_the_whole_spec_syntax(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["eval", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Policy NAME[,KEY=VALUE...][@WEIGHT]: a built-in" in out
    assert "<bool>" not in out and "<int>" not in out


def one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("args", "expected"), [
    (["eval", "-m", "harvest", "-n", "1", "-o", "{tmp}/r.txt"],
     "--output '{tmp}/r.txt': unknown extension '.txt'; expected .json (the full results), "
     ".csv (the summary)"),
    (["eval", "-m", "harvest", "-n", "1", "-o", "{tmp}/results"],
     "--output '{tmp}/results': unknown extension (none); expected .json (the full results), "
     ".csv (the summary)"),
    (["plot", "{tmp}/metrics.jsonl", "-o", "{tmp}/curve.jpg"],
     "--output '{tmp}/curve.jpg': unknown extension '.jpg'; expected .svg (an SVG image), "
     ".png (a PNG image), .pdf (a PDF)"),
    (["bench", "--quick", "--history", "{tmp}/h.jsonl", "-o", "{tmp}/chart.txt"],
     "--output '{tmp}/chart.txt': unknown extension '.txt'; expected .svg (an SVG image), "
     ".png (a PNG image), .pdf (a PDF)"),
    (["bench", "--quick", "--history", "{tmp}/h.jsonl", "--chart", "{tmp}/chart.gif"],
     "--output '{tmp}/chart.gif': unknown extension '.gif'; expected .svg (an SVG image), "
     ".png (a PNG image), .pdf (a PDF)"),
    (["replay", "{tmp}/x.npz", "-o", "{tmp}/x.svg"],
     "--output '{tmp}/x.svg': unknown extension '.svg'; expected .gif (an animated GIF), .mp4 "
     "(an H.264 video), .png (one frame, --frame N)"),
])
def test_an_output_extension_the_command_does_not_write_is_one_line_exit_2(
        args: list[str], expected: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.format(tmp=tmp_path) for a in args]
    assert one_line(args, capsys) == (2, "", f"parcat: error: {expected.format(tmp=tmp_path)}\n")
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing was written


@pytest.mark.parametrize(("command", "args"), [
    ("plan", ["-m", "harvest"]), ("train", ["-m", "goal_tasks"]), ("sim", []),
    ("bench", ["--quick"]), ("missions show", ["harvest"]),
])
def test_format_csv_is_refused_where_the_command_writes_none(
        command: str, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = one_line([*command.split(), *args, "-f", "csv"], capsys)
    assert (code, out) == (2, "")
    assert err == (f"parcat: error: parcat {command}: Invalid value for '--format' / '-f': "
                   "'csv' is not one of 'table', 'json'.\n")


def test_policies_and_missions_list_write_real_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = one_line(["policies", "list", "-f", "csv"], capsys)
    assert code == 0 and out.splitlines()[0] == "name,target,description"
    assert any(line.startswith("greedy,mission heuristic,") for line in out.splitlines())
    code, out, _ = one_line(["missions", "list", "-f", "csv"], capsys)
    assert code == 0 and out.splitlines()[0] == "name,description,source"
    assert any(line.startswith("harvest,") for line in out.splitlines())


def test_the_table_says_star_for_all_agents_as_json_and_csv_do(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = one_line(["eval", "-m", "goal_tasks", "-n", "1", "--no-progress"], capsys)
    assert code == 0
    rows = [[cell.strip() for cell in line.strip("| ").split("|")]
            for line in out.splitlines() if line.startswith("| goal_tasks")]
    assert [row[:2] for row in rows] == [["goal_tasks", "*"], ["goal_tasks", "greedy"]]


@pytest.mark.parametrize(("args", "expected"), [
    (["train", "-m", "goal_tasks", "-m", "harvest"],
     "parcat train takes one -m/--mission, got 2 (goal_tasks, harvest); give one"),
    (["compare", "a.json", "b.json", "-p", "greedy", "-p", "random"],
     "parcat compare takes one -p/--policy, got 2 (greedy, random); give one"),
])
def test_a_command_that_takes_one_mission_or_policy_says_so(
        args: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert one_line(args, capsys) == (2, "", f"parcat: error: {expected}\n")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_eval_config_file_runs_what_the_same_flags_run(tmp_path: Path) -> None:
    config = write(tmp_path / "eval.yaml", "missions: [goal_tasks, harvest]\n"
                   "policies: [greedy, random]\nepisodes: 2\nseed: 7\nset: {max_steps: 20}\n"
                   f"output: {tmp_path / 'from_file.json'}\nprogress: false\n")
    flags = ["-m", "goal_tasks", "-m", "harvest", "-p", "greedy", "-p", "random", "-n", "2",
             "--seed", "7", "--set", "max_steps=20", "--no-progress"]
    assert runner.invoke(app, ["eval", "-c", str(config)]).exit_code == 0
    assert runner.invoke(app, ["eval", *flags, "-o", str(tmp_path / "flags.json")]
                         ).exit_code == 0
    from_file = json.loads((tmp_path / "from_file.json").read_text())
    from_flags = json.loads((tmp_path / "flags.json").read_text())
    assert len(from_file["episodes"]) == 4
    assert strip_timings(from_file)["episodes"] == strip_timings(from_flags)["episodes"]


def test_flags_win_over_the_config_file_and_set_merges_key_by_key(tmp_path: Path) -> None:
    config = write(tmp_path / "eval.yaml", "missions: goal_tasks\nepisodes: 5\n"
                   "set: {max_steps: 20, agents: 2}\n")
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["eval", "-c", str(config), "-n", "1", "--set", "agents=3",
                                 "-o", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert len(document["episodes"]) == 1
    episode = document["episodes"][0]
    assert len(episode["agents"]) == 3 and episode["steps"] == 20


def test_plan_reads_the_eval_config_file_and_skips_what_only_eval_does(
        tmp_path: Path) -> None:
    config = write(tmp_path / "eval.yaml", "missions: [goal_tasks]\nepisodes: 3\njobs: 1\n"
                   f"output: {tmp_path / 'r.json'}\nprecision: 0.1\n")
    result = runner.invoke(app, ["plan", "-c", str(config), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tasks"] == 3
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(("command", "text", "expected"), [
    ("eval", "missions: [goal_tasks]\nepisodez: 3\n",
     "unknown key 'episodez'; valid: action_timeout_ms, address, against, backend, "
     "candidate, concurrency, cross, each, "
     "episode_timeout, episodes, executor, fail_fast, format, gpus, jobs, lockstep, "
     "max_episodes, "
     "missions, output, parallel_policy, policies, policy_strategy, precision, progress, "
     "rating, replay_dir, resume, retries, seed, set, start_method, trace"),
    ("eval", "episodes: many\n", "key 'episodes' must be an integer, got 'many'"),
    ("eval", "executor: warp\n",
     "key 'executor' must be one of auto, inline, thread, process, ray, got 'warp'"),
    ("eval", "set: 3\n", "key 'set' must be a mapping or a list of KEY=VALUE, got 3"),
    ("eval", "- harvest\n", "expected a mapping of keys, got list"),
    ("train", "epoch: 3\n",
     "unknown key 'epoch'; valid: address, backend, best_episodes, checkpoint_every, "
     "env_workers, envs_per_worker, epochs, eval_episodes, force, format, gradient_steps, "
     "init_from, jobs, learner, loggers, metrics_format, mirror, mission, mode, monte_carlo, "
     "negamax, overrides, parallel_training, pool_every, pool_share, pool_size, progress, render, "
     "resume, run_dir, seed, seeds, set, shared_learner, steps_per_epoch, total_steps, "
     "train_interval, train_steps, train_threads"),
    ("train", "mode: fast\n", "key 'mode' must be one of sync, async, got 'fast'"),
    ("train", "learner: ppo\n", "key 'learner' must be a mapping, got 'ppo'"),
])
def test_a_bad_config_file_is_one_line_naming_the_key(
        command: str, text: str, expected: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path / f"{command}.yaml", text)
    assert one_line([command, "-c", str(config)], capsys) == (
        2, "", f"parcat: error: --config '{config}': {expected}\n")


def test_train_output_is_the_run_directory_and_no_progress_keeps_stderr_quiet(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = runner.invoke(app, [
        "train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=30",
        "--steps-per-epoch", "20", "--env-workers", "0", "--envs-per-worker", "2",
        "--gradient-steps", "2", "--epochs", "2", "-o", str(run), "-f", "json", "--no-progress"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["checkpoint"] == str(run) and len(document["epochs"]) == 2
    assert result.stderr == ""


config_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True),
              st.text(max_size=8), st.sampled_from(["goal_tasks", "greedy", "inline", "json"])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.dictionaries(st.sampled_from(
    ["missions", "policies", "episodes", "seed", "jobs", "set", "executor", "retries",
     "episode_timeout", "parallel_policy", "output", "format", "bogus"]),
    config_values, max_size=5))
def test_a_fuzzed_config_file_plans_or_is_one_line(
        tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
        data: dict[str, object]) -> None:
    config = tmp_path_factory.mktemp("c") / "eval.yaml"
    config.write_text(yaml.safe_dump(data))
    code, out, err = one_line(["plan", "-c", str(config), "-m", "goal_tasks", "-f", "json"],
                              capsys)
    assert code in (0, 2) and (code == 0 or data), err  # an empty file changes nothing
    if code == 2:
        assert out == "" and err.startswith("parcat: error: ") and err.count("\n") == 1, err
