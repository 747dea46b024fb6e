"""``parcat missions list|show``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.common import OutputFormat, SummaryFormat, print_json, user_errors, write_csv
from parcat.cli.lazy import held_imports

# the library, gymnasium, numpy and rich are imported in the commands, not here:
# `parcat missions --help` needs none of them


def describe_space(space: Any) -> str:
    """A short description of a gymnasium space (bounds summarised, not listed)."""
    import gymnasium
    import numpy as np
    if isinstance(space, gymnasium.spaces.Box):
        low, high = float(np.min(space.low)), float(np.max(space.high))
        return f"Box({low:g}..{high:g}, shape={space.shape}, {space.dtype})"
    return str(space)


app = typer.Typer(help="List and inspect missions.", no_args_is_help=True)


@app.command("list")
def list_command(fmt: opts.Format = OutputFormat.TABLE) -> None:
    """List the missions reachable by name (./missions/ first, then the built-in ones)."""
    with held_imports():
        from parcat.cli.render import list_table, stdout_console
        from parcat.envs.missions import list_missions, shadows_builtin
    problems: list[str] = []
    with user_errors():
        missions = list_missions(problems)
    for problem in problems:  # one bad file in ./missions/ hides none of the others
        typer.echo(f"parcat: warning: {problem}; left out", err=True)
    shadows = [shadows_builtin(Path(m.source)) for m in missions]
    if fmt is OutputFormat.JSON:
        print_json([{"name": m.name, "description": m.description, "source": m.source,
                     "shadows_builtin": shadow} for m, shadow in zip(missions, shadows,
                                                                     strict=True)])
        return
    if fmt is OutputFormat.CSV:
        write_csv(["name", "description", "source"],
                  [(m.name, m.description, m.source) for m in missions])
        return
    stdout_console().print(list_table(
        ["mission", "description"],
        [(m.name, f"(not the built-in one: {m.source}) {m.description}" if shadow
          else m.description) for m, shadow in zip(missions, shadows, strict=True)]))


@app.command("show")
def show_command(
    mission: Annotated[str, typer.Argument(metavar="MISSION", help="Mission name or YAML path.",
                                           autocompletion=opts.complete_missions)],
    fmt: opts.TableOrJson = SummaryFormat.TABLE,
) -> None:
    """Show a mission: its environment, parameters, agents and spaces."""
    with held_imports():
        from parcat.cli.render import key_value_table, stdout_console
        from parcat.envs.missions import load_mission
    with user_errors():
        m = load_mission(mission)
        specs = m.agents()
        agents = [s.agent_id for s in specs]
        spaces = {str(s.agent_id): (describe_space(s.observation_space),
                                    describe_space(s.action_space)) for s in specs}
    info = {
        "name": m.name,
        "description": m.description,
        "env": m.env,
        "heuristic": m.heuristic,
        "max_steps": m.max_steps,
        "source": m.source,
        "params": dict(m.params),
        "agents": [str(a) for a in agents],
        "spaces": {a: {"observation": o, "action": s} for a, (o, s) in spaces.items()},
    }
    if fmt is SummaryFormat.JSON:
        print_json(info)
        return
    rows = [(k, info[k]) for k in ("name", "description", "env", "heuristic", "max_steps",
                                    "source")]
    rows += [(f"params.{k}", v) for k, v in m.params.items()]
    rows.append(("agents", ", ".join(str(a) for a in agents)))
    first = str(agents[0])
    rows.append((f"observation ({first})", spaces[first][0]))
    rows.append((f"action ({first})", spaces[first][1]))
    stdout_console().print(key_value_table(rows, title=f"mission {m.name}"))
