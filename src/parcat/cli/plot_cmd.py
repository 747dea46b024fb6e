"""``parcat plot``: training curves, results, cross-play maps and simulation trajectories,
in the terminal or to a file with matplotlib."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.charts import CHART_FORMATS, line_chart, matrix_text
from parcat.cli.common import user_errors, wrote
from parcat.cli.lazy import held_imports
from parcat.core.errors import ConfigError
from parcat.core.output_paths import check_output_file, check_output_suffix
from parcat.core.readfile import read_regular

FIELDS = ("reward", "reward_min", "reward_max", "eval_return", "episodes", "episode_length",
          "loss", "epsilon", "total_env_steps", "env_steps_per_s")
"""What ``--field`` draws of a training run (the metrics log's keys)."""
DOCUMENTS = {"parcat.cross/1": "`parcat eval --cross`", "parcat.eval": "`parcat eval -o`",
             "parcat.each/2": "`parcat eval --each`"}
"""The results files ``parcat plot`` draws, by schema, and the command that writes each."""


class Statistic(str, enum.Enum):
    """What a point or curve of several episodes or runs is."""

    MEAN = "mean"
    IQM = "iqm"


def plot_command(
    paths: Annotated[list[Path], typer.Argument(metavar="FILE", show_default=False, help=(
        "A run directory or metrics.jsonl (several: seeds of one config, drawn as their "
        "mean or IQM with a 95% band); a results file of `parcat eval -o`, `--each -o` or "
        "`--cross -o`; or a `parcat sim` folder (its trajectories)."))],
    field: Annotated[str, typer.Option("--field", metavar="NAME", help=(
        "Training metric, against environment steps: " + ", ".join(FIELDS) + "."))
    ] = "reward",
    statistic: Annotated[Statistic, typer.Option("--stat", help=(
        "Per policy (results) or across runs (several run directories): the mean or the "
        "interquartile mean, each with a 95% interval."))] = Statistic.MEAN,
    episode: Annotated[int | None, typer.Option("--episode", metavar="N", help=(
        "A simulation's one episode to draw (default: a panel per episode)."))] = None,
    output: opts.OutputFile = None,
) -> None:
    """Draw training curves, results with 95% intervals, a cross-play map or a simulation's
    trajectories: in the terminal, or to a file with matplotlib.

    -o FILE: the image, .svg, .png or .pdf (needs matplotlib).
    """
    with user_errors():
        if output is not None:
            check_output_suffix(output, "--output", CHART_FORMATS)
        document = _document(paths[0])
        if (document is not None or _is_sim(paths[0])) and len(paths) > 1:
            raise ConfigError(f"'{paths[0]}' is drawn alone; several paths are runs "
                              "(run directories or metrics logs) of one config")
        if output is not None:
            check_output_file(output, "--output")
            from parcat.core.figures import check_matplotlib
            check_matplotlib(output, "chart")
        with held_imports():  # here, not at the top: `parcat plot --help` needs none of them
            from parcat.cli import plot_sources as sources
        if document is not None:
            _plot_document(document, paths[0], statistic.value, output)
        elif _is_sim(paths[0]):
            _plot_sim(paths[0], episode, output)
        else:
            curves, marks, title = sources.training_of(paths, field, statistic.value)
            if output is not None:
                from parcat.core.figures import training_figure
                _save(training_figure(curves, field, title, marks), output)
                return
            epochs = len(curves[0].values) if curves else 0
            typer.echo(f"{field} per epoch ({epochs} epochs)")
            typer.echo(line_chart({c.name: list(c.values) for c in curves}))


def _save(figure: Any, path: Path) -> None:
    from parcat.core.figures import save_figure
    save_figure(figure, path)
    wrote(path)


def _is_sim(path: Path) -> bool:
    from parcat.sim.record import RECORD_FILE
    return (path / RECORD_FILE).is_file() or path.suffix == ".npz"


def _document(path: Path) -> dict[str, Any] | None:
    """The results document in ``path``, if it is a JSON file."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return None
    try:
        document = json.loads(read_regular(path))
    except (OSError, ValueError, RecursionError) as exc:  # unreadable, not JSON, too deep
        raise ConfigError(f"cannot read '{path}' ({type(exc).__name__}); give a metrics log, "
                          "a run directory or a `parcat eval -o`, `--each -o` or `--cross -o` "
                          "file") from exc
    if not isinstance(document, dict) or document.get("schema") not in DOCUMENTS:
        raise ConfigError(f"'{path}' is no metrics log nor a `parcat eval -o`, `--each -o` "
                          "or `--cross -o` file")
    return document


def _plot_document(document: dict[str, Any], path: Path, statistic: str,
                   output: Path | None) -> None:
    from parcat.cli import plot_sources as sources
    try:
        if document["schema"] == "parcat.cross/1":
            _plot_cross(document, path, output)
            return
        points = sources.results_points(document, statistic, path.name)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
        writer = DOCUMENTS[document["schema"]]
        raise ConfigError(f"'{path}' is a damaged {writer} file ({type(exc).__name__}); run "
                          f"{writer} again") from exc
    if output is not None:
        _save(sources.results_of(points, statistic, path.name), output)
        return
    typer.echo(f"{statistic} return per agent with its 95% interval, per mission and policy")
    for p in points:
        typer.echo(f"{p.mission}  {p.policy}: {p.value:.3f} [{p.low:.3f}, {p.high:.3f}] "
                   f"({p.episodes} episodes)")


def _plot_cross(document: dict[str, Any], path: Path, output: Path | None) -> None:
    """One figure per mission: both sides' mean return for each pair of policies."""
    from parcat.cli import plot_sources as sources
    for n, table in enumerate(document["cross"]):
        if output is not None:
            target = output if n == 0 else output.with_stem(f"{output.stem}-{n}")
            _save(sources.cross_of(table, path.name), target)
            continue
        for side, who in (("row", "rows"), ("col", "columns")):
            typer.echo(f"{table['mission']}: mean return of "
                       f"{', '.join(table[f'{side}_agents'])} per agent (the {who}' policy)")
            typer.echo(matrix_text(table["policies"], [
                [float("nan") if c[side]["value"] is None else c[side]["value"] for c in row]
                for row in table["cells"]]))


def _plot_sim(path: Path, episode: int | None, output: Path | None) -> None:
    from parcat.sim.record import SimRecord
    from parcat.sim.svg import trajectories_of
    if output is None:
        raise ConfigError(f"'{path}': a simulation's trajectories are drawn to a file; give "
                          "-o FILE.png (or .svg, .pdf)")
    try:
        record = SimRecord.load(path)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot read the simulation record '{path}' "
                          f"({type(exc).__name__}); run `parcat sim -o DIR` again") from exc
    _save(trajectories_of(record, episode), output)
