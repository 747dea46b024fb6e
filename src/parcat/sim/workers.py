"""Entry points of a parallel simulation's processes: the environment and each agent.

Both start with ``(conn, parent_pid, ...)`` (see :class:`parcat.ipc.process.Worker`),
build what they need, attach the shared block, send ``("ready",)`` and wait for
``("start", t0_ns)``: ``t0_ns`` is a ``time.monotonic_ns()`` instant (the clock is shared by
every process of the machine) from which all schedules count.

- The environment steps at ``t0 + k * period`` (absolute deadlines: a late step does not
  shift the ones after it; ``fast`` only waits for ``t0``), applies each agent's latest
  action (the neutral action before its first), publishes every agent's new observation
  tagged with the step and episode, and finally sends ``("done", result, cycles, wall_s)``.
- An agent sleeps until its next cycle boundary ``t0 + m * cycle_time``, reads its latest
  observation, computes an action, publishes it with the step it was based on, its compute
  time and its cycle statistics, and moves to the first boundary after the computation
  ended (boundaries it ran past are counted as missed; the record counts missed cycles
  from wall time too, as an agent frozen in a computation never updates its own count).

A process that raises sends ``("error", ErrorReport)`` (the agent, a message naming it,
and the traceback); the shared STOP flag
ends every loop; SIGTERM (the parent's last resort) exits through ``SystemExit``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from parcat.ipc.process import ErrorReport, Terminated, become_worker
from parcat.ipc.shm import Codec
from parcat.sim.agent import (
    AgentFailure,
    AgentRunner,
    CycleClock,
    CycleStats,
    InForce,
    describe_agent,
)
from parcat.sim.config import SimConfig
from parcat.sim.slots import H_EPISODE, H_STEP, SimBlock
from parcat.sim.world import World, WorldResult

SLEEP_CHUNK_NS = 20_000_000
"""Longest single sleep, so a STOP flag is seen within 20 ms."""


def attach_block(config: SimConfig, name: str | None = None) -> SimBlock:
    """The run's shared block (``name=None`` creates it) laid out for its process agents."""
    agents = config.process_agents
    return SimBlock([Codec.for_space(a.spec.observation_space) for a in agents],
                    [Codec.for_space(a.spec.action_space) for a in agents], name=name)


def sleep_until(deadline_ns: int, block: SimBlock) -> bool:
    """Sleep until ``deadline_ns`` (monotonic); ``False`` if the run was stopped meanwhile."""
    while not block.stopped:
        remaining = deadline_ns - time.monotonic_ns()
        if remaining <= 0:
            return True
        time.sleep(min(remaining, SLEEP_CHUNK_NS) / 1e9)
    return False


def env_main(conn: Connection, parent_pid: int, config: SimConfig, block_name: str,
             fast: bool) -> None:
    """Run the environment of a parallel simulation."""
    become_worker(parent_pid)  # one BLAS thread: one process per agent already
    world: World | None = None
    block: SimBlock | None = None
    try:
        world = World(config)
        block = attach_block(config, block_name)
        _publish_obs(world, block, 0, 0)
        conn.send(("ready",))
        message = conn.recv()
        if message[0] == "start":
            conn.send(("done", *_run_env(world, block, config, message[1], fast)))
    except AgentFailure as failure:
        _report(conn, str(failure.agent.agent_id), str(failure), failure.cause)
    except (SystemExit, Terminated):
        pass
    except Exception as exc:
        step = int(block.header[H_STEP]) if block is not None else 0
        text = (f"the environment of mission '{config.mission.name}' raised at step {step}: "
                f"{type(exc).__name__}: {exc}")
        _report(conn, None, text, exc)
    finally:
        if world is not None:
            world.close()
        if block is not None:
            block.close()
        with contextlib.suppress(OSError):
            conn.close()
    sys.exit(0)


def _run_env(world: World, block: SimBlock, config: SimConfig, t0_ns: int,
             fast: bool) -> tuple[WorldResult, dict[int, CycleStats], float]:
    indices = [a.spec.agent_index for a in config.process_agents]
    in_force = world.default_actions()
    seqs = [0] * len(indices)
    steps = 0
    try:
        for k in range(config.iters):
            deadline = t0_ns + (0 if fast else k * config.period_ns)
            if not sleep_until(deadline, block):
                break
            now_ns = time.monotonic_ns() - t0_ns
            for j, index in enumerate(indices):
                slot = block.actions[j]
                if slot.seq != seqs[j]:
                    snapshot = slot.read()
                    if snapshot is not None:
                        seqs[j], action, fields = snapshot
                        in_force[index] = InForce(action, int(fields[0]), int(fields[1]) / 1e9)
            world.step(k, now_ns, in_force)
            steps = k + 1
            _publish_obs(world, block, steps, time.monotonic_ns() - t0_ns)
            block.header[H_EPISODE] = world.episode
            block.header[H_STEP] = steps
    except Terminated:
        pass  # the parent stopped a step that made no progress: the steps before are the run
    wall_s = (time.monotonic_ns() - t0_ns) / 1e9
    cycles = {}
    for j, index in enumerate(indices):
        snapshot = block.actions[j].read()
        if snapshot is not None:
            cycles[index] = CycleStats.from_fields(snapshot[2][2:])
    return world.result(steps), cycles, wall_s


def _publish_obs(world: World, block: SimBlock, step: int, now_ns: int) -> None:
    for j, agent in enumerate(world.config.process_agents):
        obs = world.obs[agent.spec.agent_index]
        if obs is not None:
            block.obs[j].write(obs, (step, world.episode, now_ns))


def agent_main(conn: Connection, parent_pid: int, config: SimConfig, slot: int,
               block_name: str) -> None:
    """Run one agent of a parallel simulation (``slot``: its index among process agents)."""
    become_worker(parent_pid)
    agent = config.process_agents[slot]
    block: SimBlock | None = None
    try:
        runner = AgentRunner(agent, config.mission, config.seed)
        block = attach_block(config, block_name)
        conn.send(("ready",))
        message = conn.recv()
        if message[0] == "start":
            _run_agent(runner, block, slot, message[1])
    except AgentFailure as failure:
        _report(conn, str(agent.agent_id), str(failure), failure.cause)
    except (SystemExit, Terminated):
        pass
    except Exception as exc:
        text = f"{describe_agent(agent)} failed: {type(exc).__name__}: {exc}"
        _report(conn, str(agent.agent_id), text, exc)
    finally:
        if block is not None:
            block.close()
        with contextlib.suppress(OSError):
            conn.close()
    sys.exit(0)


def _run_agent(runner: AgentRunner, block: SimBlock, slot: int, t0_ns: int) -> None:
    clock = CycleClock(runner.config.cycle_ns)
    obs_slot, act_slot = block.obs[slot], block.actions[slot]
    obs: Any = None
    step = episode = 0
    while sleep_until(t0_ns + clock.next_ns, block):
        start_ns = time.monotonic_ns() - t0_ns
        snapshot = obs_slot.read()
        if snapshot is not None:
            _, obs, fields = snapshot
            step, episode = int(fields[0]), int(fields[1])
        item = runner.act(obs, step, episode, start_ns)
        runner.stats.missed += clock.advance(time.monotonic_ns() - t0_ns)
        compute_ns = round(item.compute_s * 1e9)
        act_slot.write(item.action, (item.based_on, compute_ns, *runner.stats.as_fields()))


def _report(conn: Connection, agent: str | None, text: str, exc: BaseException) -> None:
    report = ErrorReport.from_exception(exc, agent)
    with contextlib.suppress(OSError, ValueError):
        conn.send(("error", ErrorReport(report.kind, text, report.traceback, agent)))
