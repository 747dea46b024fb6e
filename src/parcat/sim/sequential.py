"""The sequential simulation: the parallel semantics in simulated time, in one process.

Step ``k`` happens at simulated time ``t_k = k * period``. An agent whose cycle boundary
(``m * cycle_time``) has been reached by ``t_k`` computes a new action from the observation
of step ``k`` (in force at step ``k``: computing takes no simulated time), and its next cycle
starts at the first boundary after ``t_k``; otherwise its previous action stays in force and
grows older. Everything runs on integer nanoseconds, so the run is a pure function of the
configuration; with every ``cycle_time`` equal to the period it is exactly a lockstep rollout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from parcat.core.errors import USER_CODE_ERRORS, EpisodeError
from parcat.ipc.process import SHUTTING_DOWN
from parcat.policies.base import close_policies
from parcat.sim.agent import AgentFailure, AgentRunner
from parcat.sim.config import SimConfig
from parcat.sim.progress import PROGRESS_EVERY_S, SimProgress
from parcat.sim.record import SimRecord, make_record
from parcat.sim.world import World, empty_result, env_error


def run_sequential(config: SimConfig,
                   on_progress: Callable[[SimProgress], None] | None = None) -> SimRecord:
    """Run the simulation in simulated time; Ctrl-C ends it early (``interrupted``).

    Raises:
        EpisodeError: a policy or the environment raised (the agent is named).
    """
    start = time.perf_counter()
    world: World | None = None
    runners: dict[int, AgentRunner] = {}
    try:
        try:
            world = World(config)
            for agent in config.process_agents:  # one by one: those built are closed below
                runners[agent.spec.agent_index] = AgentRunner(agent, config.mission, config.seed)
        except KeyboardInterrupt:  # before the first step: an empty record
            result = empty_result(config, time.perf_counter() - start)
            return make_record(config, "sequential", False, result, True)
        return _run(world, runners, config, start, on_progress)
    finally:
        if world is not None:
            world.close()
        close_policies(runner.policy for runner in runners.values())


def _run(world: World, runners: dict[int, AgentRunner], config: SimConfig, start: float,
         on_progress: Callable[[SimProgress], None] | None) -> SimRecord:
    interrupted = False
    next_report = start + PROGRESS_EVERY_S
    try:
        for k in range(config.iters):
            now_ns = k * config.period_ns
            for index, runner in runners.items():
                if runner.clock.due(now_ns):
                    world.in_force[index] = runner.act(world.obs[index], k, world.episode,
                                                       now_ns)
                    runner.clock.advance(now_ns)
            world.step(now_ns)
            if on_progress is not None and time.perf_counter() >= next_report:
                next_report += PROGRESS_EVERY_S
                on_progress(SimProgress(world.steps, config.iters, world.episode,
                                        time.perf_counter() - start))
    except KeyboardInterrupt:
        SHUTTING_DOWN.set()
        interrupted = True
    except AgentFailure as failure:
        raise EpisodeError(str(failure)) from failure.cause
    except USER_CODE_ERRORS as exc:
        raise EpisodeError(env_error(config, world.steps, exc)) from exc
    result = world.result({i: r.stats for i, r in runners.items()}, time.perf_counter() - start)
    return make_record(config, "sequential", False, result, interrupted)
