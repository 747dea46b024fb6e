"""A simulation's trajectories: one panel per episode (or ``--episode N``) with axes and
units, from real sequential runs, read back from the figure and the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parcat.cli.main import main
from parcat.core.errors import ConfigError
from parcat.sim import SimRecord, run_sim
from parcat.sim.svg import CREATOR, MAX_PANELS, trajectories_of
from tests.sim.helpers import make_config

pytest.importorskip("matplotlib")
from matplotlib.image import imread

AGENTS = [{"agent": "evader", "policy": "random", "cycle_time": 0.02}]


def simulate(tmp_path: Path, mission: str = "evade", **params: object) -> SimRecord:
    config = make_config(tmp_path, AGENTS if mission == "evade" else
                         [{"policy": "random", "cycle_time": 0.02}], mission=mission,
                         iters=45, params=params, output=str(tmp_path / "out"),
                         debug={"render_traj": True})
    return run_sim(config, "sequential")


def test_a_panel_per_episode_with_axes_and_units(tmp_path: Path) -> None:
    record = simulate(tmp_path, max_steps=20)
    numbers, steps = np.unique(record.arrays["episode"], return_counts=True)
    assert len(numbers) >= 3  # 45 steps of episodes of at most 20
    axes = trajectories_of(record).get_axes()
    assert [ax.get_title() for ax in axes] == [
        f"episode {n} ({s} steps)" for n, s in zip(numbers, steps, strict=True)]
    assert {(ax.get_xlabel(), ax.get_ylabel()) for ax in axes} == {
        ("x (arena units)", "y (arena units)")}
    assert all(len(ax.get_lines()) == 3 * len(record.agent_ids) for ax in axes)  # path, ends
    (one,) = trajectories_of(record, episode=1).get_axes()
    assert one.get_title() == axes[1].get_title()
    with pytest.raises(ConfigError, match=rf"^--episode 99: the record has episodes "
                       rf"{', '.join(map(str, numbers))}$"):
        trajectories_of(record, episode=99)
    svg = (tmp_path / "out" / "trajectories.svg").read_text()
    assert f"<dc:title>{CREATOR}</dc:title>" in svg and axes[-1].get_title() in svg


def test_harvest_is_drawn_in_cells_on_its_map(tmp_path: Path) -> None:
    record = simulate(tmp_path, "harvest", size=12, max_steps=50)
    (ax,) = trajectories_of(record).get_axes()
    assert ax.get_xlabel() == "x (cells)" and ax.get_xlim() == (0.0, 12.0)


def test_plot_draws_a_sim_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    simulate(tmp_path, max_steps=20)
    out = tmp_path / "out"
    assert main(["plot", str(out), "--episode", "2", "-o", str(tmp_path / "ep.png")]) == 0
    height, width, _ = imread(tmp_path / "ep.png").shape
    assert 300 < width < 1.5 * height + 300  # one square panel, not three
    capsys.readouterr()
    assert main(["plot", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"parcat: error: '{out}': a simulation's trajectories are drawn to a file; give -o "
        "FILE.png (or .svg, .pdf)\n")


def test_a_long_run_draws_its_first_episodes_and_says_so(tmp_path: Path) -> None:
    config = make_config(tmp_path, AGENTS, iters=80, params={"max_steps": 5})
    record = run_sim(config, "sequential")
    episodes = len(np.unique(record.arrays["episode"]))
    assert episodes > MAX_PANELS
    figure = trajectories_of(record)
    assert len(figure.get_axes()) == MAX_PANELS
    assert (f"the first {MAX_PANELS} of {episodes} episodes (parcat plot DIR --episode N -o "
            "FILE draws another)") in figure.get_suptitle().replace("\n", " ")
    (last,) = trajectories_of(record, episode=episodes - 1).get_axes()
    assert last.get_title().startswith(f"episode {episodes - 1} ")
