"""``parcat plot``: training curves from ``parcat train``'s metrics log."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parcat.cli.charts import line_chart, save_chart
from parcat.cli.common import user_errors
from parcat.cli.lazy import held_imports
from parcat.errors import ConfigError
from parcat.outputs import check_output_file


def plot_command(
    metrics: Annotated[Path, typer.Argument(help="metrics.jsonl, or a run directory.")],
    field: Annotated[str, typer.Option(help="reward, reward_min, reward_max, episodes, "
                                       "episode_length, loss, epsilon, total_env_steps or "
                                       "env_steps_per_s.")] = "reward",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="SVG/PNG file "
                                                "(needs matplotlib).")] = None,
) -> None:
    """Draw a training curve per agent: in the terminal, or to a file with matplotlib."""
    with held_imports():  # here, not at the top: `parcat plot --help` needs none of them
        from parcat.train.metrics import read_metrics
    with user_errors():
        path = metrics
        if metrics.is_dir():
            found = [metrics / n for n in ("metrics.jsonl", "metrics.csv")
                     if (metrics / n).is_file()]
            path = found[0] if found else metrics / "metrics.jsonl"
        if not path.is_file():
            raise ConfigError(f"no metrics log at '{path}' (parcat train writes metrics.jsonl)")
        if output is not None and output.suffix.lower() not in (".svg", ".png", ".pdf"):
            raise ConfigError(f"--output must end in .svg, .png or .pdf, got '{output.name}'")
        if output is not None:
            check_output_file(output, "--output")
        records = read_metrics(path)
        if not records or field not in records[0]:
            valid = ", ".join(k for k in (records[0] if records else {}) if k != "epoch")
            raise ConfigError(f"metrics have no field '{field}'; valid: {valid}")
        series: dict[str, list[float]] = {}
        for record in records:
            value = record[field]
            items = value.items() if isinstance(value, dict) else [(field, value)]
            for name, v in items:
                number = v if isinstance(v, int | float) and not isinstance(v, bool) else None
                series.setdefault(name, []).append(float("nan") if number is None
                                                   else float(number))
        epochs = [float(r["epoch"]) for r in records]
        if output is not None:
            save_chart(output, {k: (epochs, v) for k, v in series.items()}, "epoch", field)
            typer.echo(f"wrote {output}")
            return
    typer.echo(f"{field} per epoch ({len(records)} epochs)")
    typer.echo(line_chart(series))
