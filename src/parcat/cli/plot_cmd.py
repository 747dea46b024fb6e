"""``parcat plot``: training curves from ``parcat train``'s metrics log."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parcat.cli.charts import line_chart, save_chart
from parcat.cli.common import user_errors
from parcat.errors import ConfigError
from parcat.train.metrics import read_metrics


def plot_command(
    metrics: Annotated[Path, typer.Argument(help="metrics.jsonl, or a run directory.")],
    field: Annotated[str, typer.Option(help="reward, loss, epsilon or env_steps_per_s.")] = (
        "reward"
    ),
    output: Annotated[Path | None, typer.Option("--output", "-o", help="SVG/PNG file "
                                                "(needs matplotlib).")] = None,
) -> None:
    """Draw a training curve per agent: in the terminal, or to a file with matplotlib."""
    with user_errors():
        path = metrics / "metrics.jsonl" if metrics.is_dir() else metrics
        if not path.is_file():
            raise ConfigError(f"no metrics log at '{path}' (parcat train writes metrics.jsonl)")
        records = read_metrics(path)
        if not records or field not in records[0]:
            valid = ", ".join(k for k in (records[0] if records else {}) if k != "epoch")
            raise ConfigError(f"metrics have no field '{field}'; valid: {valid}")
        series: dict[str, list[float]] = {}
        for record in records:
            value = record[field]
            items = value.items() if isinstance(value, dict) else [(field, value)]
            for name, v in items:
                series.setdefault(name, []).append(float("nan") if v is None else float(v))
        epochs = [float(r["epoch"]) for r in records]
        if output is not None:
            save_chart(output, {k: (epochs, v) for k, v in series.items()}, "epoch", field)
            typer.echo(f"wrote {output}")
            return
    typer.echo(f"{field} per epoch ({len(records)} epochs)")
    typer.echo(line_chart(series))
