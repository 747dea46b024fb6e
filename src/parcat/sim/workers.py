"""The processes of a parallel simulation, worker kinds whose one command is ``start(t0_ns)``:
the ``time.monotonic_ns()`` instant (one clock for the machine) all schedules count from.

The environment steps at ``t0 + k * period`` (absolute deadlines: a late step does not shift
the next; ``fast`` only waits for ``t0``) on each agent's latest action, publishes every
agent's observation, and replies with its :class:`~parcat.sim.world.WorldResult`. An agent
wakes at each cycle boundary ``t0 + m * cycle_time``, computes an action from its latest
observation and publishes it. The shared STOP flag ends every loop; SIGTERM (the parent's last
resort) ends the environment's run with the steps before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from parcat.ipc.process import ErrorReport, Handlers, ReportedError, Terminated
from parcat.ipc.shm import Codec
from parcat.policies.base import close_policies
from parcat.sim.agent import (
    AgentFailure,
    AgentRunner,
    CycleStats,
    InForce,
    describe_agent,
)
from parcat.sim.config import SimConfig
from parcat.sim.slots import H_EPISODE, H_STEP, SimBlock
from parcat.sim.world import World, WorldResult, env_error

SLEEP_CHUNK_NS = 20_000_000  # the longest sleep, so that a STOP flag is seen within 20 ms


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


def make_env(config: SimConfig, block_name: str, fast: bool) -> Handlers:
    """The environment of a parallel simulation: ``start(t0_ns)`` runs it."""
    world: World | None = None
    block: SimBlock | None = None

    def failed(exc: BaseException) -> ReportedError:
        if isinstance(exc, AgentFailure):
            return _reported(str(exc.agent.agent_id), str(exc), exc.cause)
        step = int(block.header[H_STEP]) if block is not None else 0
        return _reported(None, env_error(config, step, exc), exc)

    def close() -> None:
        if world is not None:
            world.close()
        if block is not None:
            block.close()

    try:
        world = World(config)
        block = attach_block(config, block_name)
        _publish_obs(world, block, 0)
    except Exception as exc:
        close()
        raise failed(exc) from None
    run = _with_errors(lambda t0_ns: _run_env(world, block, config, t0_ns, fast), failed)
    return Handlers({"start": run}, close=close)


def _run_env(world: World, block: SimBlock, config: SimConfig, t0_ns: int,
             fast: bool) -> WorldResult:
    indices = [a.spec.agent_index for a in config.process_agents]
    seqs = [0] * len(indices)
    try:
        for k in range(config.iters):
            if not sleep_until(t0_ns + (0 if fast else k * config.period_ns), block):
                break
            now_ns = time.monotonic_ns() - t0_ns
            for j, index in enumerate(indices):
                slot = block.actions[j]
                if slot.seq != seqs[j]:
                    snapshot = slot.read()
                    if snapshot is not None:
                        seqs[j], action, fields = snapshot
                        world.in_force[index] = InForce(action, int(fields[0]),
                                                        int(fields[1]) / 1e9)
            world.step(now_ns)
            _publish_obs(world, block, time.monotonic_ns() - t0_ns)
            block.header[H_EPISODE] = world.episode
            block.header[H_STEP] = world.steps
    except Terminated:
        pass  # the parent stopped a step that made no progress: the steps before are the run
    wall_s = (time.monotonic_ns() - t0_ns) / 1e9
    snapshots = [block.actions[j].read() for j in range(len(indices))]
    cycles = {index: CycleStats.from_fields(snapshot[2][2:])
              for index, snapshot in zip(indices, snapshots, strict=True) if snapshot is not None}
    return world.result(cycles, wall_s)


def _publish_obs(world: World, block: SimBlock, now_ns: int) -> None:
    for j, agent in enumerate(world.config.process_agents):
        obs = world.obs[agent.spec.agent_index]
        if obs is not None:
            block.obs[j].write(obs, (world.steps, world.episode, now_ns))


def make_agent(config: SimConfig, slot: int, block_name: str) -> Handlers:
    """One agent of a parallel simulation (``slot``: its index among process agents):
    ``start(t0_ns)`` runs it until the run stops."""
    agent = config.process_agents[slot]

    def failed(exc: BaseException) -> ReportedError:
        if isinstance(exc, AgentFailure):
            return _reported(str(agent.agent_id), str(exc), exc.cause)
        text = f"{describe_agent(agent)} failed: {type(exc).__name__}: {exc}"
        return _reported(str(agent.agent_id), text, exc)

    try:
        runner = AgentRunner(agent, config.mission, config.seed)
        block = attach_block(config, block_name)
    except Exception as exc:
        raise failed(exc) from None
    run = _with_errors(lambda t0_ns: _run_agent(runner, block, slot, t0_ns), failed)

    def close() -> None:
        block.close()
        close_policies([runner.policy])

    return Handlers({"start": run}, close=close)


def _with_errors(run: Callable[[int], Any],
                 failed: Callable[[BaseException], ReportedError]) -> Callable[[int], Any]:
    def guarded(t0_ns: int) -> Any:
        try:
            return run(t0_ns)
        except Exception as exc:
            raise failed(exc) from None

    return guarded


def _run_agent(runner: AgentRunner, block: SimBlock, slot: int, t0_ns: int) -> None:
    clock = runner.clock
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


def _reported(agent: str | None, text: str, exc: BaseException) -> ReportedError:
    report = ErrorReport.from_exception(exc, agent)
    return ReportedError(ErrorReport(report.kind, text, report.traceback, agent))
