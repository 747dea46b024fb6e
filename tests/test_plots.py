"""Report-ready pictures from real small runs, read back: PNG sizes, SVG titles, PDF
headers, and the panels, series and marks of the figure each drawing function returns."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parcat.bench.suite import MEASUREMENTS, run_suite
from parcat.cli.main import main
from parcat.cli.plot_sources import bench_of, cross_of, results_of, results_points, training_of
from parcat.core.figures import Curve, save_figure, training_figure

pytest.importorskip("matplotlib")
from matplotlib.image import imread

EVAL = ["eval", "-m", "evade", "--set", "max_steps=15", "-n", "4", "-p", "greedy", "-p",
        "random", "--no-progress", "-j", "1"]
TRAIN = ["train", "-m", "goal_tasks", "--epochs", "6", "--steps-per-epoch", "25",
         "--checkpoint-every", "2", "--eval-episodes", "2", "--gradient-steps", "5",
         "--env-workers", "0", "--no-progress"]


def plot(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``parcat plot`` in this process: exit code and stderr."""
    capsys.readouterr()
    code = main(["plot", *args])
    return code, capsys.readouterr().err


def svg_text(path: Path) -> str:
    """The visible text of a matplotlib SVG (written with text kept as text)."""
    return " ".join(re.findall(r">([^<>]+)</text>", path.read_text()))


def lines_labelled(ax: Any) -> list[str]:
    return [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three seeds of one training config, in the usual run layout."""
    folder = tmp_path_factory.mktemp("runs")
    for seed in range(3):
        assert main([*TRAIN, "--seed", str(seed), "-o", str(folder / f"s{seed}")]) == 0
    return folder


def test_an_eval_results_file_is_a_panel_per_mission_with_intervals(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.json"
    assert main([*EVAL, "-m", "harvest", "-o", str(results)]) == 0
    document = json.loads(results.read_text())
    points = results_points(document, "mean", "results.json")
    # evade's pursuers and evader apart, as the eval table's rows
    assert {(p.mission, p.policy) for p in points} == {
        ("harvest", "greedy"), ("harvest", "random"), *(
            ("evade", f"{p} [{side}]") for p in ("greedy", "random")
            for side in ("pursuer", "evader"))}
    for point in points:  # the same interval as the eval table's
        row = next(s for s in document["summary"] if (s["mission"], s["policy"] + (
            f" [{s['side']}]" if s.get("side") else "")) == (point.mission, point.policy))
        assert (point.low, point.value, point.high) == pytest.approx(
            (row["ci95_low"], row["mean"], row["ci95_high"]))
        assert point.agents and point.episodes == row["episodes"]
    figure = results_of(points, "mean", "results.json")
    axes = figure.get_axes()
    assert [ax.get_title() for ax in axes] == ["evade", "harvest"]
    # an error bar per policy (and side: evade's pursuers and evader)
    assert [len(ax.containers) for ax in axes] == [4, 2]
    assert axes[0].get_ylabel() == "mean return per agent (95% interval)"
    assert plot(capsys, str(results), "-o", str(tmp_path / "r.png"))[0] == 0
    height, width, _ = imread(tmp_path / "r.png").shape
    assert width > 1000 and height > 400
    assert plot(capsys, str(results), "--stat", "iqm", "-o", str(tmp_path / "r.svg")) == (
        0, f"parcat: wrote {tmp_path / 'r.svg'}\n")
    assert "results.json: iqm return per agent, 95% interval (bootstrap)" in svg_text(
        tmp_path / "r.svg")


def test_an_each_results_file_is_drawn_from_its_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    each = tmp_path / "each.json"
    assert main([*EVAL, "--each", "-o", str(each)]) == 0
    rows = json.loads(each.read_text())["each"]["rows"]
    points = results_points(json.loads(each.read_text()), "iqm", "each.json")
    assert [(p.policy, p.value) for p in points] == [(r["policy"], r["iqm"]["value"])
                                                      for r in rows]
    assert plot(capsys, str(each), "-o", str(tmp_path / "each.pdf"))[0] == 0
    assert (tmp_path / "each.pdf").read_bytes().startswith(b"%PDF")


def test_a_training_curve_is_against_steps_with_evaluation_and_best(
        runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = runs / "s0"
    curves, marks, title = training_of([run], "reward", "mean")
    assert title == "run s0 on goal_tasks: reward"
    assert [c.name for c in curves] == ["agent_0"] and curves[0].low is not None
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert list(curves[0].steps) == [r["total_env_steps"] for r in records]
    best_epoch = json.loads((run / "best" / "manifest.json").read_text())["epoch"]
    assert marks.best == [(records[best_epoch - 1]["total_env_steps"],
                           f"best checkpoint (epoch {best_epoch})")]
    assert len(marks.evaluation[0].values) == 3  # a checkpoint every 2 of 6 epochs
    ax = training_figure(curves, "reward", title, marks).get_axes()[0]
    assert ax.get_xlabel() == "environment steps"
    assert lines_labelled(ax) == ["agent_0 (smoothed)", "agent_0 evaluation return",
                                  f"best checkpoint (epoch {best_epoch})"]
    assert len(ax.collections) == 1  # the min-to-max band
    assert all(t == int(t) for t in ax.get_xticks())
    assert plot(capsys, str(run), "-o", str(tmp_path / "curve.svg"))[0] == 0
    assert "run s0 on goal_tasks: reward" in svg_text(tmp_path / "curve.svg")


def test_several_runs_are_one_curve_with_a_bootstrap_band(
        runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [runs / f"s{seed}" for seed in range(3)]
    curves, _, title = training_of(paths, "reward", "iqm")
    assert title == "run s0, s1, s2 on goal_tasks: reward (iqm of 3 runs, 95% bootstrap band)"
    (curve,) = curves
    assert curve.low is not None and curve.high is not None and not curve.raw
    finite = np.isfinite(curve.values)
    assert np.all(curve.low[finite] <= curve.values[finite] + 1e-9)
    assert np.all(curve.values[finite] <= curve.high[finite] + 1e-9)
    assert plot(capsys, *map(str, paths), "-o", str(tmp_path / "seeds.png"))[0] == 0
    assert imread(tmp_path / "seeds.png").shape[1] > 800


def test_integer_metrics_get_integer_ticks(runs: Path) -> None:
    curves, marks, title = training_of([runs / "s0"], "episodes", "mean")
    assert set(curves[0].values) == {0.0, 4.0}  # 4 envs, episodes of 50 steps, epochs of 25
    ax = training_figure(curves, "episodes", title, marks).get_axes()[0]
    assert all(t == int(t) for t in [*ax.get_xticks(), *ax.get_yticks()])
    steady = Curve("episodes", curves[0].steps, np.full(len(curves[0].steps), 4.0))
    ax = training_figure([steady], "episodes", title).get_axes()[0]
    ax.figure.canvas.draw()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["3", "4", "5"]


def test_the_cross_play_map_shows_both_sides(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    cross = tmp_path / "cross.json"
    assert main([*EVAL, "--cross", "-o", str(cross)]) == 0
    table = json.loads(cross.read_text())["cross"][0]
    figure = cross_of(table, "cross.json")
    panels = [ax for ax in figure.get_axes() if ax.get_images()]
    assert [ax.get_title() for ax in panels] == [
        "row side (pursuer_0, pursuer_1, pursuer_2)", "column side (evader)"]
    bars = [ax for ax in figure.get_axes() if not ax.get_images()]
    assert [ax.get_ylabel() for ax in bars] == ["mean return per agent"] * 2
    cell = table["cells"][0][1]["col"]
    texts = [t.get_text() for t in panels[1].texts]
    assert f"{cell['value']:.2f}\n[{cell['low']:.2f}, {cell['high']:.2f}]\nn=4" in texts
    assert plot(capsys, str(cross), "-o", str(tmp_path / "cross.png"))[0] == 0
    height, width, _ = imread(tmp_path / "cross.png").shape
    assert width > 1.8 * height


def test_the_bench_chart_has_ideal_scaling_and_the_load(tmp_path: Path) -> None:
    scaling = [m for m in MEASUREMENTS if m.name == "episode scaling"]
    record = run_suite(quick=True, max_jobs=2, repeats=3, measurements=scaling)
    ax = bench_of(record).get_axes()[0]
    assert list(ax.get_xticks()) == [1, 2]
    assert lines_labelled(ax)[0] == "ideal (speedup = jobs)"
    assert list(ax.get_lines()[0].get_ydata()) == [1, 2]
    assert ax.containers  # the measured points with their range
    assert "on " in ax.get_title() and "CPUs" in ax.get_title()
    assert any("load: other processes used" in t.get_text() for t in ax.texts)
    save_figure(ax.figure, tmp_path / "bench.png")
    assert imread(tmp_path / "bench.png").shape[0] > 300


def test_plot_refusals_are_one_line(tmp_path: Path, runs: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "cross.json"
    results.write_text(json.dumps({"schema": "parcat.cross/1", "cross": []}))
    assert plot(capsys, str(results), str(runs / "s0")) == (
        2, f"parcat: error: '{results}' is drawn alone; several paths are runs (run "
        "directories or metrics logs) of one config\n")
    assert plot(capsys, str(runs / "s0"), "--field", "nope") == (
        2, f"parcat: error: '{runs / 's0' / 'metrics.jsonl'}' has no field 'nope'; valid: "
        + ", ".join(k for k in json.loads((runs / "s0/metrics.jsonl").read_text()
                                          .splitlines()[0]) if k != "epoch") + "\n")
    assert plot(capsys, str(runs / "s0"), "--stat", "median")[0] == 2



def test_a_picture_without_matplotlib_is_one_line(runs: Path, tmp_path: Path) -> None:
    code = ("import sys; sys.modules['matplotlib'] = None; from parcat.cli.main import main; "
            f"sys.exit(main(['plot', {str(runs / 's0')!r}, '-o', {str(tmp_path / 'c.png')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert (proc.returncode, proc.stderr) == (2, (
        f"parcat: error: writing '{tmp_path / 'c.png'}' needs matplotlib: pip install "
        "'parcat[plot]' (or pip install matplotlib); without -o the chart is drawn in the "
        "terminal\n"))
    assert not (tmp_path / "c.png").exists()
