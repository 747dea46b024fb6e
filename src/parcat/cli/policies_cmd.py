"""``parcat policies list``."""

from __future__ import annotations

import typer

from parcat.cli import options as opts
from parcat.cli.common import OutputFormat, print_json, write_csv
from parcat.cli.lazy import held_imports

app = typer.Typer(help="List the built-in policies.", no_args_is_help=True)

SPEC_HELP = (
    "Other specs: module:Class[,KEY=VALUE...] (Class(agent_spec, **kwargs)), or a checkpoint "
    "directory written by parcat train. Append @WEIGHT to set a policy's share of the agents."
)


@app.command("list")
def list_command(fmt: opts.Format = OutputFormat.TABLE) -> None:
    """List the built-in policy names usable with -p."""
    with held_imports():  # here, not at the top: `parcat policies --help` needs none of them
        from parcat.cli.render import list_table, stdout_console
        from parcat.policies.specs import BUILTINS
    rows = [(name, ref or "mission heuristic", text) for name, (ref, text) in BUILTINS.items()]
    if fmt is OutputFormat.JSON:
        print_json([{"name": n, "target": t, "description": d} for n, t, d in rows])
        return
    if fmt is OutputFormat.CSV:
        write_csv(["name", "target", "description"], rows)
        return
    stdout_console().print(list_table(["policy", "implementation", "description"], rows))
    typer.echo(SPEC_HELP)
