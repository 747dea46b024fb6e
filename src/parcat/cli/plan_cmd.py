"""``parcat plan``: print the plan for an eval command line without running anything."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from parcat.cli import options as opts
from parcat.cli.common import SummaryFormat, print_json, user_errors
from parcat.cli.flag_config import settings_command
from parcat.cli.lazy import held_imports
from parcat.core.resources import available_cpus, visible_gpus


@dataclass(frozen=True)
class PlanSettings(opts.EvalFlags):
    """Everything ``parcat plan`` is told: eval's shared flags and how to print."""

    format: opts.TableOrJson = SummaryFormat.TABLE


@settings_command(PlanSettings, skips=opts.EvalSettings)
def plan_command(settings: PlanSettings) -> None:
    """Show how `parcat eval` with the same flags would use the machine, and why.

    It runs nothing. -c FILE: the YAML file eval reads; keys only eval has (output,
    precision, ...) are skipped.
    """
    with held_imports():  # here, not at the top: `parcat plan --help` needs none of them
        from parcat.cli.render import key_value_table, stdout_console
        from parcat.eval.evaluate import make_tasks, plan_to_dict
        from parcat.parallel.run_options import plan_run
    with user_errors():
        config, options = settings.args().build()
        plan = plan_run(config.missions, config.policies, len(make_tasks(config)), options)
    info = plan_to_dict(plan)
    info["cpus_available"] = available_cpus()
    info["gpus_visible"] = visible_gpus() if options.gpus is None else options.gpus
    info["tasks"] = len(config.missions) * config.episodes
    if settings.format is SummaryFormat.JSON:
        print_json(info)
        return
    rows = [(k, v) for k, v in info.items() if k not in ("reasons", "notes")]
    stdout_console().print(key_value_table(rows, title="plan"))
    for reason in plan.reasons:
        typer.echo(f"- {reason}")
    for note in plan.notes:
        typer.echo(f"- note: {note}")
