"""Replays: every episode's observations, actions and rewards, written where it ran, read
back, and played again from the seed and the actions."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from parcat.envs.missions import Mission
from parcat.episode import playback, replay
from parcat.eval.evaluate import EvalConfig, evaluate, make_config
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec


@pytest.mark.parametrize("jobs", [1, 2])
def test_every_episode_is_recorded_and_plays_back_to_the_same_rewards(
        tmp_path: Path, jobs: int) -> None:
    config = make_config(["harvest", "evade"], ["greedy", "random"], episodes=3, seed=2,
                         overrides={"max_steps": 15})
    report = evaluate(config, RunOptions(jobs=jobs), replay_dir=tmp_path)
    index = json.loads((tmp_path / replay.INDEX).read_text())
    assert (index["format"], index["version"]) == (replay.FORMAT, replay.VERSION)
    assert [(e["mission"], e["episode_index"]) for e in index["episodes"]] == \
        [(r.mission, r.episode_index) for r in report.episodes]
    for result in report.episodes:
        recorded = replay.read(tmp_path / replay.file_name(result.mission, result.episode_index))
        assert recorded.meta["seed"] == result.seed and recorded.meta["steps"] == result.steps
        for i, agent in enumerate(result.agents):
            # the per-step rewards add up to the episode's return
            assert recorded.arrays[f"rew_{i}"].sum() == pytest.approx(agent.reward)
            assert len(recorded.arrays[f"obs_{i}"]) == len(recorded.arrays[f"act_{i}"])
        drawn = list(playback.frames(recorded))
        assert [shot.step for shot in drawn] == list(range(result.steps + 1))
        assert all(not shot.problems for shot in drawn)
        assert all(isinstance(shot.picture, str) and shot.picture for shot in drawn)


def test_the_same_seed_records_the_same_arrays_at_any_worker_count(tmp_path: Path) -> None:
    config = make_config(["harvest"], ["random"], episodes=4, seed=5, overrides={"max_steps": 10})
    for jobs in (1, 2):
        evaluate(config, RunOptions(jobs=jobs), replay_dir=tmp_path / str(jobs))
    for k in range(4):
        one = replay.read(tmp_path / "1" / replay.file_name("harvest", k))
        two = replay.read(tmp_path / "2" / replay.file_name("harvest", k))
        assert one.meta == two.meta
        assert all(np.array_equal(one.arrays[key], two.arrays[key]) for key in one.arrays)


def test_a_turn_based_game_records_each_turn_and_plays_back(tmp_path: Path) -> None:
    nim = Mission(name="nim", env="tests.envs.nim:NimEnv", params={"low": 5, "high": 15},
                  max_steps=100)
    config = EvalConfig((nim,), (parse_policy_spec("random"),), 6, 0)
    report = evaluate(config, RunOptions(jobs=1), replay_dir=tmp_path)
    for result in report.episodes:
        recorded = replay.read(tmp_path / replay.file_name("nim", result.episode_index))
        assert recorded.meta["turn_based"] is True
        moves = sum(len(recorded.arrays[f"step_{i}"]) for i in range(2))
        assert moves == result.steps
        # the winner's +1 and the loser's -1 come after their last move: recorded all the same
        for i, agent in enumerate(result.agents):
            assert recorded.arrays[f"rew_{i}"].sum() == pytest.approx(agent.reward)
        drawn = list(playback.frames(recorded, trust_code=True))
        assert [shot.step for shot in drawn] == list(range(result.steps + 1))
        assert all(not shot.problems for shot in drawn)
    # observations are flattened: the pile and the 3-entry action mask
    assert recorded.arrays["obs_0"].shape[1] == 4


@pytest.mark.parametrize(("content", "message"), [
    (None, "does not exist or is not a file"),
    (b"not a zip", "cannot be read"),
])
def test_a_bad_replay_file_is_one_clear_error(tmp_path: Path, content: bytes | None,
                                              message: str) -> None:
    path = tmp_path / "x.npz"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(replay.ReplayError, match=re.escape(message)):
        replay.read(path)


def test_another_format_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "v2.npz"
    meta = json.dumps({"format": replay.FORMAT, "version": 2})
    np.savez(path, meta=np.array(meta))
    with pytest.raises(replay.ReplayError, match=re.escape("is format version 2; this parcat "
                                                           "reads version 1")):
        replay.read(path)


def parcat(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_eval_replay_dir_then_parcat_replay_shows_the_episode(tmp_path: Path) -> None:
    run = parcat("eval", "-m", "harvest", "-n", "2", "--set", "max_steps=6", "--replay-dir",
                 "replays", "--format", "json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    index = json.loads((tmp_path / "replays" / replay.INDEX).read_text())
    assert [e["file"] for e in index["episodes"]] == ["harvest-000000.npz", "harvest-000001.npz"]
    shown = parcat("replay", "replays/harvest-000001.npz", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("harvest episode 1 (seed ")
    assert [f"step {k}/6" in shown.stdout for k in range(7)] == [True] * 7
    assert "################" in shown.stdout and not shown.stderr
    assert shown.stdout.count("legend: # wall, B base, * resource, 0-9 agent (index mod 10)") == 7
    drawn = parcat("replay", "replays/harvest-000000.npz", "-o", "ep.gif", cwd=tmp_path)
    assert (drawn.returncode, drawn.stderr) == (0, "parcat: wrote ep.gif (7 frames)\n")
    gif = iio.imread(tmp_path / "ep.gif")
    assert gif.shape[0] == 7 and gif.shape[1] > 300 and gif.shape[2] > 250
    assert not np.array_equal(gif[0], gif[-1])  # the agents moved
    one = parcat("replay", "replays/harvest-000000.npz", "-o", "ep.png", "--frame", "0",
                 cwd=tmp_path)
    assert (one.returncode, one.stderr) == (0, "parcat: wrote ep.png (1 frame)\n")
    png = iio.imread(tmp_path / "ep.png")
    # the first frame of the GIF, as a static viewer shows it; the walls in their colour
    assert png.shape == gif[0].shape and png.shape[2] == 3
    assert (png.reshape(-1, 3) == (120, 120, 120)).all(axis=1).sum() > 60 * 100


def test_a_replay_written_as_mp4_reads_back_frame_by_frame(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from parcat.cli.main import main
    from parcat.episode.pictures import MOVIE_BLOCK
    evaluate(make_config(["harvest"], ["random"], episodes=1, overrides={"max_steps": 9}),
             RunOptions(jobs=1), replay_dir=tmp_path)
    recorded, gif, mp4 = (tmp_path / name for name in ("harvest-000000.npz", "ep.gif",
                                                         "ep.mp4"))
    assert main(["replay", str(recorded), "-o", str(gif)]) == 0
    capsys.readouterr()
    assert main(["replay", str(recorded), "-o", str(mp4), "--fps", "5"]) == 0
    assert capsys.readouterr().err == f"parcat: wrote {mp4} (10 frames)\n"
    assert iio.immeta(mp4)["fps"] == 5
    video, still = iio.imread(mp4), iio.imread(gif)
    # each side padded to H.264's 16-pixel blocks around the GIF's picture
    assert video.shape[0] == 10 and video.shape[3] == 3
    assert [side % MOVIE_BLOCK for side in video.shape[1:3]] == [0, 0]
    assert all(0 <= pad < MOVIE_BLOCK for pad in np.subtract(video.shape[1:3], still.shape[1:3]))
    # lossy, but the same pictures: each frame is near the GIF's and far from the others
    h, w = still.shape[1:3]
    error = np.abs(video[:, :h, :w].astype(int) - still.astype(int)).mean(axis=(1, 2, 3))
    assert error.max() < 8
    assert np.abs(video[0, :h, :w].astype(int) - still[-1]).mean() > error.max()


@pytest.mark.parametrize(("args", "line"), [
    (["replay", "missing.npz"], "parcat: error: replay 'missing.npz' does not exist or is not a "
     "file; replays are the *.npz files in a --replay-dir folder (listed in its index.json)"),
    (["replay", "missing.npz", "-o", "x.svg"], "parcat: error: --output 'x.svg': unknown "
     "extension '.svg'; expected .gif (an animated GIF), .mp4 (an H.264 video), .png (one "
     "frame, --frame N)"),
    (["replay", "missing.npz", "--frame", "3"], "parcat: error: --frame 3 picks the frame of "
     "a PNG; give -o FILE.png"),
    (["eval", "-m", "harvest", "--replay-dir", "/dev/null"], "parcat: error: --replay-dir "
     "'/dev/null' is a character device, not a folder; give the path of a folder"),
])
def test_bad_replay_input_is_one_line_exit_2(tmp_path: Path, args: list[str], line: str) -> None:
    result = parcat(*args, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, line + "\n")


def test_a_long_episode_s_gif_shows_every_kth_step_within_the_frame_cap() -> None:
    from parcat.episode import pictures
    cap = pictures.MAX_GIF_FRAMES
    assert [pictures.stride(n) for n in (0, cap - 1, cap, 2 * cap - 1, 2 * cap)] == [1, 1, 2, 2, 3]
    for steps in (cap, 3 * cap + 7, 10**8):
        k = pictures.stride(steps)
        shown = len(range(0, steps + 1, k)) + (steps % k != 0)  # the last step is kept too
        assert shown <= cap + 1
