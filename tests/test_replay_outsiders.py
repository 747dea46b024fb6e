"""Replays of environments nobody here wrote: recorded by eval, played back by `parcat
replay --trust-code` from what their ``render()`` draws (``rgb_array``), written as GIF and
PNG and read back; turn-based games' rewards add up to their returns."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import imageio.v3 as iio
import numpy as np
import pytest

from parcat.cli.main import main
from parcat.cli.render import terminal_picture
from parcat.envs.missions import Mission
from parcat.episode import playback, replay
from parcat.eval.evaluate import EvalConfig, evaluate, make_config
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from tests.fakes import ScriptedEnv

pytest.importorskip("pygame")

OUTSIDERS = {
    # mission: its step limit here (a few steps show that it plays back)
    "mpe2.simple_spread_v3": 12,
    "pettingzoo.butterfly.pistonball_v6": 8,
    "pettingzoo.classic.connect_four_v3": 42,
    "gymnasium:CartPole-v1": 15,
}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The CLI in this process: exit code and stderr."""
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("mission", list(OUTSIDERS))
def test_an_outsiders_replay_plays_back_and_writes_a_gif_and_a_png(
        tmp_path: Path, mission: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config([mission], ["random"], episodes=1, seed=3,
                         overrides={"mission.max_steps": OUTSIDERS[mission]})
    report = evaluate(config, RunOptions(jobs=1), replay_dir=tmp_path)
    steps = report.episodes[0].steps
    assert steps > 2 and report.episodes[0].error is None
    recorded = tmp_path / replay.file_name(mission, 0)
    gif = tmp_path / "episode.gif"
    # the replay names code from outside parcat: it plays only with the user's leave
    code, err = cli(capsys, "replay", str(recorded), "-o", str(gif))
    assert code == 2 and "pass --trust-code if you trust the file" in err
    assert cli(capsys, "replay", str(recorded), "--trust-code", "-o", str(gif)) == (
        0, f"parcat: wrote {gif} ({steps + 1} frames)\n")  # as recorded: no note
    frames = iio.imread(gif)
    assert frames.shape[0] == steps + 1 and frames.shape[3] == 3
    assert 200 < frames.shape[1] <= 600 and 200 < frames.shape[2] <= 600
    assert len({frame.tobytes() for frame in frames}) > 1  # something moves
    png = tmp_path / "one.png"
    assert cli(capsys, "replay", str(recorded), "--trust-code", "-o", str(png), "--frame",
               "2")[0] == 0
    assert iio.imread(png).shape == frames[2].shape


TURN_BASED = {
    # game: (episodes, seed), so that some of them are won (random chess is mostly drawn)
    "connect_four_v3": (8, 1),
    "chess_v6": (1, 1),
    "texas_holdem_v4": (4, 0),
    "leduc_holdem_v4": (4, 0),
}


@pytest.mark.parametrize("game", list(TURN_BASED))
def test_turn_based_replays_rewards_add_up_to_the_returns_and_play_back(
        tmp_path: Path, game: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The final +1/-1 is shown after the last move: it was lost in 59 of 62 connect_four,
    chess and poker replays."""
    pytest.importorskip({"chess_v6": "chess", "texas_holdem_v4": "rlcard",
                         "leduc_holdem_v4": "rlcard"}.get(game, "pygame"))
    episodes, seed = TURN_BASED[game]
    mission = Mission(name=f"pettingzoo.classic.{game}", env=f"pettingzoo.classic.{game}:env",
                      max_steps=2000)
    config = EvalConfig((mission,), (parse_policy_spec("random"),), episodes, seed)
    report = evaluate(config, RunOptions(jobs=2), replay_dir=tmp_path)
    decided = []
    for result in report.episodes:
        assert result.error is None
        recorded = replay.read(tmp_path / replay.file_name(mission.name, result.episode_index))
        for i, agent in enumerate(result.agents):
            # a poker player who folds at once leaves the other one no move, and no row
            rows = recorded.arrays[f"rew_{i}"]
            paid = rows.sum() if len(rows) else recorded.meta["returns"][i]
            assert paid == pytest.approx(agent.reward)
        if any(agent.reward for agent in result.agents):
            decided.append(result)
        drawn = list(playback.frames(recorded, trust_code=True))
        assert len(drawn) == result.steps + 1 and not any(s.problems for s in drawn)
        assert all(isinstance(s.picture, np.ndarray) for s in drawn)
    assert decided  # some games were won, so some final rewards were recorded
    won, gif = decided[-1], tmp_path / f"{game}.gif"
    assert cli(capsys, "replay", str(tmp_path / replay.file_name(mission.name, won.episode_index)),
               "--trust-code", "-o", str(gif)) == (
        0, f"parcat: wrote {gif} ({won.steps + 1} frames)\n")
    assert iio.imread(gif).shape[0] == won.steps + 1


def test_an_env_that_does_not_replay_as_recorded_plays_back_with_one_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seedless = Mission(name="seedless", env="tests.fakes:SeedlessEnv",
                       params={"agents": 2, "max_steps": 5}, max_steps=5)
    evaluate(EvalConfig((seedless,), (parse_policy_spec("random"),), 1, 0), RunOptions(jobs=1),
             replay_dir=tmp_path)
    capsys.readouterr()
    code = main(["replay", str(tmp_path / replay.file_name("seedless", 0)), "--trust-code"])
    out, err = capsys.readouterr()
    assert code == 0 and "step 5/5" in out and err.count("\n") == 1
    assert out.count("(the environment draws nothing)") == 1
    assert re.fullmatch(r"parcat: note: the environment did not replay as recorded \(5 step\(s\); "
                        r"first: agent '0' earned .*, recorded .*\): it is not deterministic, "
                        r"or not the version that recorded it\n", err), err
    # nothing to draw is nothing to write
    gif = tmp_path / "x.gif"
    assert cli(capsys, "replay", str(tmp_path / replay.file_name("seedless", 0)),
               "--trust-code", "-o", str(gif)) == (
        2, "parcat: error: the replay's environment draws nothing (its render() gave None): "
        "there is no picture to write; play it without -o\n")
    assert not gif.exists()


class AnsiEnv(ScriptedEnv):
    """An outsider's environment that draws text only, and refuses render modes it lacks."""

    metadata: dict[str, Any] = {"name": "ansi", "render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not one of ['ansi']")
        super().__init__(**kwargs)
        self.render_mode = render_mode

    def render(self) -> str | None:
        return f"t={self.t}\n" if self.render_mode == "ansi" else None


def test_an_outsider_that_draws_text_only_plays_back_as_text(tmp_path: Path) -> None:
    mission = Mission(name="ansi", env="tests.test_replay_outsiders:AnsiEnv",
                      params={"agents": 2, "max_steps": 3}, max_steps=3)
    evaluate(EvalConfig((mission,), (parse_policy_spec("random"),), 1, 0), RunOptions(jobs=1),
             replay_dir=tmp_path)
    recorded = replay.read(tmp_path / replay.file_name("ansi", 0))
    drawn = list(playback.frames(recorded, trust_code=True))
    assert [shot.picture for shot in drawn] == ["t=0\n", "t=1\n", "t=2\n", "t=3\n"]
    assert not any(shot.problems for shot in drawn)


@pytest.mark.parametrize(("args", "message"), [
    (["--frame", "7", "-o", "x.png"], "--frame 7: replay '{file}' has frames 0 to 6 (one after "
     "each of its 6 steps)"),
    (["--frame", "1", "-o", "x.gif"], "--frame 1 picks the frame of a PNG; give -o FILE.png"),
])
def test_a_frame_the_replay_has_not_is_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        message: str) -> None:
    config = make_config(["harvest"], ["random"], episodes=1, overrides={"max_steps": 6})
    evaluate(config, RunOptions(jobs=1), replay_dir=tmp_path)
    file = str(tmp_path / replay.file_name("harvest", 0))
    args = [a if a[0] == "-" or a.isdigit() else str(tmp_path / a) for a in args]
    assert cli(capsys, "replay", file, *args) == (
        2, f"parcat: error: {message.format(file=file)}\n")


def test_a_picture_in_the_terminal_is_two_pixels_a_character() -> None:
    picture = np.zeros((40, 100, 3), np.uint8)
    picture[:20] = (255, 0, 0)  # red above, black below
    lines = terminal_picture(picture, 51).splitlines()
    assert len(lines) == 10 and all(line.count("▀") == 50 for line in lines)
    assert "\x1b[38;2;255;0;0m\x1b[48;2;255;0;0m▀" in lines[0]
    assert "\x1b[38;2;0;0;0m\x1b[48;2;0;0;0m▀" in lines[-1]
    # a tall picture fits the terminal's lines
    assert len(terminal_picture(np.zeros((400, 100, 3), np.uint8), 120, 30).splitlines()) <= 30
