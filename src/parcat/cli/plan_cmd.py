"""``parcat plan``: print the plan for an eval command line without running anything."""

from __future__ import annotations

from typing import Annotated

import typer

from parcat.cli import options as opts
from parcat.cli.common import OutputFormat, print_json, user_errors
from parcat.cli.render import key_value_table, stdout_console
from parcat.evaluate import make_tasks, plan_to_dict
from parcat.parallel.launch import plan_run
from parcat.parallel.planner import ExecutorKind, PolicyStrategy
from parcat.resources import available_cpus, visible_gpus


def plan_command(
    missions: opts.Missions,
    policies: opts.Policies = None,
    episodes: opts.Episodes = 10,
    seed: opts.Seed = 0,
    overrides: opts.Overrides = None,
    jobs: opts.Jobs = None,
    executor: opts.Executor = ExecutorKind.AUTO,
    parallel_policy: opts.ParallelPolicy = False,
    strategy: opts.Strategy = PolicyStrategy.AUTO,
    action_timeout_ms: opts.ActionTimeout = None,
    gpus: opts.Gpus = None,
    start_method: opts.StartMethod = None,
    backend: opts.Backend = None,
    address: opts.Address = None,
    trace: opts.Trace = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="table or json.")
    ] = OutputFormat.TABLE,
) -> None:
    """Show how `parcat eval` with the same flags would use the machine, and why."""
    with user_errors():
        config, options = opts.build(
            missions, policies, episodes, seed, overrides, jobs, executor, parallel_policy,
            strategy, action_timeout_ms, gpus, start_method, trace is not None,
            backend=backend, address=address,
        )
        plan = plan_run(config.missions, config.policies, len(make_tasks(config)), options)
    info = plan_to_dict(plan)
    info["cpus_available"] = available_cpus()
    info["gpus_visible"] = visible_gpus() if gpus is None else gpus
    info["tasks"] = len(config.missions) * config.episodes
    if fmt is OutputFormat.JSON:
        print_json(info)
        return
    rows = [(k, v) for k, v in info.items() if k != "reasons"]
    stdout_console().print(key_value_table(rows, title="plan"))
    for reason in plan.reasons:
        typer.echo(f"- {reason}")
