"""A policy's optional ``close()`` (sync or ``async def``): every policy parcat builds is
closed once when parcat is done with it, wherever it ran, and a close that fails is a
warning, never a failed run.

The policies write a line per build and per close to a file named in their spec, so the
count holds across worker processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from parcat.envs.missions import load_mission
from parcat.policies.base import AgentSpec
from parcat.policies.specs import parse_policy_spec
from parcat.sim import run_sim
from parcat.stepping.base import PolicyCache, Seat
from tests.fakes import StatefulPolicy
from tests.serve.servers import running_server
from tests.sim.helpers import make_config

ROOT = Path(__file__).resolve().parents[2]
HARVEST = ["-m", "harvest", "--set", "agents=2", "--set", "max_steps=5", "-n", "4"]


class LoggedPolicy(StatefulPolicy):
    """Writes ``built`` when made and ``closed`` when closed (``how``: ``sync``, ``async``,
    or ``raise``: a close that fails)."""

    def __init__(self, spec: AgentSpec, log: str, how: str = "sync") -> None:
        super().__init__(spec)
        self.log, self.how = log, how
        self.name = uuid.uuid4().hex  # not id(): a closed policy's id is reused by the next
        self._write("built")

    def _write(self, what: str) -> None:
        with open(self.log, "a") as out:
            out.write(f"{what} {self.name}\n")

    def close(self) -> None:
        if self.how == "raise":
            raise RuntimeError("the client was already gone")
        self._write("closed")


class AsyncLoggedPolicy(LoggedPolicy):
    async def close(self) -> None:  # type: ignore[override]
        await asyncio.sleep(0.001)  # on parcat's loop, as an aiohttp session needs
        self._write("closed")


def counts(log: Path) -> tuple[set[str], set[str]]:
    """The policies built and those closed, each closed at most once."""
    lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
    closed = [who for what, who in lines if what == "closed"]
    assert len(closed) == len(set(closed)), "a policy was closed twice"
    return {who for what, who in lines if what == "built"}, set(closed)


def parcat(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("policy", ["LoggedPolicy", "AsyncLoggedPolicy"])
@pytest.mark.parametrize("flags", [
    ["--jobs", "1"],
    ["--jobs", "2"],
    ["--executor", "inline"],
    ["--jobs", "2", "--parallel-policy", "--policy-strategy", "thread"],
    ["--jobs", "3", "--parallel-policy", "--policy-strategy", "process"],
], ids=lambda f: "_".join(f).replace("-", ""))
def test_every_policy_parcat_builds_is_closed_once(tmp_path: Path, policy: str,
                                                    flags: list[str]) -> None:
    log = tmp_path / "log"
    done = parcat("eval", *HARVEST, "-p", f"tests.policies.test_close:{policy},log={log}",
                  "-f", "json", *flags)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    built, closed = counts(log)
    assert built and built == closed


def test_a_close_that_raises_is_one_warning_and_the_results_stand(tmp_path: Path) -> None:
    log = tmp_path / "log"
    done = parcat("eval", *HARVEST, "-p",
                  f"tests.policies.test_close:LoggedPolicy,log={log},how=raise", "-f", "json")
    assert done.returncode == 0, done.stderr
    assert "LoggedPolicy.close() raised RuntimeError('the client was already gone')" in done.stderr
    assert "Traceback" not in done.stderr
    assert [e["status"] for e in json.loads(done.stdout)["episodes"]] == ["ok"] * 4


def test_a_policy_dropped_while_its_step_runs_is_closed_only_when_the_step_ends(
        tmp_path: Path) -> None:
    log = tmp_path / "log"
    mission = load_mission("harvest", {"agents": 2})
    [agent, _] = mission.agents()
    spec = parse_policy_spec(f"tests.policies.test_close:LoggedPolicy,log={log}")
    cache = PolicyCache()
    cache.reset(mission, [Seat(agent, spec, 0)])
    step: Future[Any] = Future()
    cache.forget(agent.agent_index, running=step)
    built, closed = counts(log)
    assert len(built) == 1 and not closed
    step.set_result(0)
    assert counts(log) == (built, built)


def test_a_lent_policy_is_closed_by_its_lender_only(tmp_path: Path) -> None:
    log = tmp_path / "log"
    mission = load_mission("harvest", {"agents": 2})
    seats = [Seat(a, parse_policy_spec(f"tests.policies.test_close:SharedLoggedPolicy,log={log}"),
                  0) for a in mission.agents()]
    lender = PolicyCache()
    lender.reset(mission, seats)
    borrower = PolicyCache(lender)
    borrower.reset(mission, seats)
    borrower.clear()
    built, closed = counts(log)
    assert len(built) == 2 and not closed
    lender.clear()
    assert counts(log) == (built, built)


class SharedLoggedPolicy(LoggedPolicy):
    stateless = True


def test_the_simulator_closes_its_policies(tmp_path: Path) -> None:
    log = tmp_path / "log"
    here = "tests.policies.test_close"
    agents = [{"agent": "evader", "policy": f"{here}:AsyncLoggedPolicy,log={log}",
               "cycle_time": 0.02},
              {"agent": "pursuer_0", "policy": f"{here}:LoggedPolicy,log={log}",
               "cycle_time": 0.01}]  # the period: a lockstep agent
    for mode in ("sequential", "parallel"):
        run_sim(make_config(tmp_path, agents, iters=20), mode)
    built, closed = counts(log)
    assert built and built == closed


def test_a_server_closes_each_session_s_policy_and_the_rest_at_shutdown(tmp_path: Path) -> None:
    log = tmp_path / "log"
    spec = f"tests.policies.test_close:LoggedPolicy,log={log}"
    with running_server("-p", spec, "-m", "harvest", "--set", "agents=2") as (proc, url):
        done = parcat("eval", *HARVEST, "-p", url, "-f", "json")
        assert done.returncode == 0, done.stderr
        built, closed = counts(log)
        assert closed and closed < built  # the sessions the client closed; not the server's
    assert proc.returncode is not None
    built, closed = counts(log)
    assert built == closed
