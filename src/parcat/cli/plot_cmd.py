"""``parcat plot``: training curves from ``parcat train``'s metrics log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.charts import CHART_FORMATS, line_chart, matrix_text, save_chart, save_matrix
from parcat.cli.common import user_errors
from parcat.cli.lazy import held_imports
from parcat.core.errors import ConfigError
from parcat.core.output_paths import check_output_file, check_output_suffix
from parcat.core.readfile import read_regular


def plot_command(
    metrics: Annotated[Path, typer.Argument(metavar="FILE",
        help="metrics.jsonl, a run directory, or a `parcat eval --cross -o FILE.json` file.")],
    field: Annotated[str, typer.Option(
        "--field", metavar="NAME", help="reward, reward_min, reward_max, episodes, "
        "episode_length, loss, epsilon, total_env_steps or env_steps_per_s.")] = "reward",
    output: opts.OutputFile = None,
) -> None:
    """Draw a training curve per agent: in the terminal, or to a file with matplotlib.

    -o FILE: the image, .svg, .png or .pdf (needs matplotlib).
    """
    with held_imports():  # here, not at the top: `parcat plot --help` needs none of them
        from parcat.train.metrics import read_metrics
    with user_errors():
        if output is not None:
            check_output_suffix(output, "--output", CHART_FORMATS)
        cross = _cross_document(metrics)
        if cross is not None:
            if output is not None:
                check_output_file(output, "--output")
            try:
                _plot_cross(cross, output)
            except (KeyError, TypeError, IndexError, AttributeError) as exc:
                raise ConfigError(f"'{metrics}' is a damaged `parcat eval --cross` file "
                                  f"({type(exc).__name__}); run the cross-play again") from exc
            return
        path = metrics
        if metrics.is_dir():
            found = [metrics / n for n in ("metrics.jsonl", "metrics.csv")
                     if (metrics / n).is_file()]
            path = found[0] if found else metrics / "metrics.jsonl"
        if not path.is_file():
            raise ConfigError(f"no metrics log at '{path}' (parcat train writes metrics.jsonl)")
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
                number = isinstance(v, int | float) and not isinstance(v, bool)
                series.setdefault(name, []).append(float(v) if number else float("nan"))
        epochs = [float(r["epoch"]) for r in records]
        if output is not None:
            save_chart(output, {k: (epochs, v) for k, v in series.items()}, "epoch", field)
            typer.echo(f"wrote {output}")
            return
    typer.echo(f"{field} per epoch ({len(records)} epochs)")
    typer.echo(line_chart(series))


def _cross_document(path: Path) -> dict[str, Any] | None:
    """The ``parcat eval --cross`` document in ``path``, if that is what it holds."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return None
    try:
        document = json.loads(read_regular(path))
    except (OSError, ValueError, RecursionError) as exc:  # unreadable, not JSON, too deep
        raise ConfigError(f"cannot read '{path}' ({type(exc).__name__}); give a metrics log, "
                          "a run directory or a `parcat eval --cross -o` file") from exc
    if not isinstance(document, dict) or document.get("schema") != "parcat.cross/1":
        raise ConfigError(f"'{path}' is no metrics log nor a `parcat eval --cross` file")
    return document


def _plot_cross(document: dict[str, Any], output: Path | None) -> None:
    """One matrix per mission: the row side's mean return for each pair of policies."""
    for n, table in enumerate(document["cross"]):
        labels = table["policies"]
        values = [[float("nan") if c["row"]["value"] is None else c["row"]["value"]
                   for c in row] for row in table["cells"]]
        title = (f"{table['mission']}: mean return of {', '.join(table['row_agents'])} "
                 f"(rows) against {', '.join(table['col_agents'])} (columns)")
        if output is None:
            typer.echo(title)
            typer.echo(matrix_text(labels, values))
            continue
        target = output if n == 0 else output.with_stem(f"{output.stem}-{n}")
        save_matrix(target, labels, values, title, "column policy", "row policy")
        typer.echo(f"wrote {target}")
