"""``parcat serve``: serve a policy over HTTP for ``parcat eval -p http://HOST:PORT``."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from parcat.cli import options as opts
from parcat.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    TERMINATED,
    said_interrupted,
    user_errors,
)

if TYPE_CHECKING:
    from parcat.serve.server import PolicyServer


def serve_command(
    policy: Annotated[str | None, opts.SHARED["policy"].option(
        more="The one to serve (a run directory brings its mission: -m may be left out).")
    ] = None,
    mission: Annotated[str | None, opts.SHARED["mission"].option(
        more="The one whose agents the policy plays.")] = None,
    set: opts.Overrides = None,
    host: Annotated[str, typer.Option("--host", metavar="HOST",
                                      help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, metavar="N",
                                      help="TCP port; 0: any free one (printed).")] = 0,
    socket_path: Annotated[Path | None, typer.Option(
        "--socket", metavar="PATH", help="Also listen on this Unix socket (removed on exit).")
    ] = None,
    max_batch: Annotated[int, typer.Option(
        "--max-batch", min=1, max=65_536, metavar="N",
        help="Most observations gathered into one policy call.")] = 256,
    max_wait_ms: Annotated[float, typer.Option(
        "--max-wait-ms", min=0.0, max=1000.0, metavar="MS",
        help="How long requests from clients acting together wait for the rest of their "
        "round before the policy runs.")] = 1.0,
    trust_code: opts.TrustCode = False,
) -> None:
    """Serve a policy over HTTP, for `parcat eval -p http://HOST:PORT`.

    Prints the URL on stdout (one line, so scripts can read it with --port 0) and logs on
    stderr. Requests that arrive together become one step_batch call. GET /stats: requests,
    batch sizes and latency, also printed when the server stops (Ctrl-C or SIGTERM).

    Exit codes: 2 bad input, 130 stopped by Ctrl-C, 143 stopped by SIGTERM.
    """
    with user_errors():
        server = _build(policy, mission, set or [], max_batch, max_wait_ms / 1000, trust_code)
        from parcat.serve.server import serve

        def ready(urls: list[str]) -> None:
            print(urls[0], flush=True)  # the one line on stdout, for scripts
            sharing = ("stateless: batched across clients" if server.stateless
                       else "stateful: an instance per client session")
            _say(f"policy '{server.spec.name}' for mission '{server.mission.name}' "
                 f"({sharing}) at {', '.join(urls)}")

        signum = serve(server, host, port, socket_path, ready)
    if signum == signal.SIGTERM:
        TERMINATED.set()
    said_interrupted(f"parcat: serve: stopped: {server.stats.summary()}")
    raise typer.Exit(EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED)


def _say(line: str) -> None:
    print(f"parcat: serve: {line}", file=sys.stderr, flush=True)


def _build(policy: str | None, mission: str | None, overrides: list[str], max_batch: int,
           max_wait_s: float, trust_code: bool) -> PolicyServer:
    """The server of ``-p`` for ``-m`` (a run's mission without it), its policies built."""
    from parcat.core.errors import ConfigError
    from parcat.core.settings import parse_overrides
    from parcat.eval.trained_run import load_missions
    from parcat.policies.specs import parse_policy_spec

    try:
        from parcat.serve.server import PolicyServer
    except ImportError as exc:
        raise ConfigError(f"parcat serve needs aiohttp ({exc}): "
                          "pip install 'parcat[serve]'") from None
    if policy is None:
        raise ConfigError("give the policy to serve with -p SPEC, e.g. "
                          "parcat serve -p mlp,width=256 -m harvest")
    spec = parse_policy_spec(policy, trust_code)
    missions = load_missions([mission] if mission else [], [spec.target],
                             parse_overrides(overrides), _say, trust_code)
    return PolicyServer(spec, missions[0], max_batch, max_wait_s)
