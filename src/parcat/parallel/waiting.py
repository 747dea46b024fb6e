"""Work that waits: how much of it to keep in flight, and how many CPUs its CPU part needs.

A policy step that waits (a model behind a server or an API, a device in another process)
or an environment step that waits (a game server) costs wall time but little CPU, so
budgeting a CPU for every step in flight leaves the machine idle while the run crawls. The
calibration (:mod:`parcat.parallel.calibration`) measures both steps' wall and CPU time;
work that mostly waits gets *concurrency*: many episodes (and, when the policy waits,
agents) in flight in one process, up to a limit of its own (``--concurrency``), and CPUs
only for the share of it that computes. Pure functions of plain numbers; the
planner (:mod:`parcat.parallel.planner`) turns them into a plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_CONCURRENCY = 256
"""The auto limit on agent calls in flight: threads cost a little memory each, and a
server behind the policy may not take more at once anyway."""
WAITING_SHARE = 0.5
"""A step whose CPU time is below this share of its wall time waits more than it computes."""
WAITING_MIN_S = 0.5e-3
"""Shorter steps are not worth threads, whatever their share: handing them over costs more."""


def step_waits(wall_s: float | None, cpu_s: float | None) -> bool:
    """Whether a step of ``wall_s`` seconds that used ``cpu_s`` seconds of CPU mostly waits
    (``False`` when either was not measured)."""
    if wall_s is None or cpu_s is None:
        return False
    return wall_s >= WAITING_MIN_S and cpu_s < WAITING_SHARE * wall_s


@dataclass(frozen=True)
class Concurrency:
    """How much waiting work is in flight at once, and what its CPU part needs."""

    limit: int
    """Agent calls in flight at most (``--concurrency``, or auto)."""
    episodes: int
    """Episodes in flight at once."""
    agents: int
    """Agents of an episode in flight at once."""
    policy_threads: int
    """Policy threads per episode (the episode's own thread steps one agent, unless an
    action deadline puts every agent on a policy thread)."""
    cpus: int
    """CPUs the CPU part of the calls in flight needs (at least 1)."""
    reasons: tuple[str, ...]


def plan_concurrency(tasks: int, agents: int, wall_s: float, cpu_s: float,
                     given: int | None, agents_at_once: bool, deadline: bool,
                     env_wall_s: float = 0.0, env_cpu_s: float = 0.0) -> Concurrency:
    """Agent calls in flight for ``tasks`` episodes of ``agents`` agents whose policy steps
    take ``wall_s`` (``cpu_s`` of it computing) and whose environment steps take
    ``env_wall_s`` (``env_cpu_s``): every agent of every episode when ``given`` is ``None``
    (at most :data:`MAX_CONCURRENCY`), else ``given``.

    ``agents_at_once``: an episode's agents may step at the same time (on policy threads:
    only worth it when the policy step waits); ``deadline``: an action timeout is set, so
    no agent steps on the episode's own thread.
    """
    per_episode = agents if agents_at_once else 1
    wanted = max(1, tasks) * per_episode
    reasons = [_waits_reason(what, wall, cpu) for what, wall, cpu in (
        ("a policy step", wall_s, cpu_s), ("an environment step", env_wall_s, env_cpu_s))
        if step_waits(wall, cpu)]
    if given is None:
        limit = min(MAX_CONCURRENCY, wanted)
        capped = f", capped at {MAX_CONCURRENCY}" if wanted > MAX_CONCURRENCY else ""
        every = "every agent of every episode" if agents_at_once else "every episode"
        reasons.append(f"concurrency {limit} (auto): {every} in flight ({wanted}){capped}")
    else:
        limit = given
        reasons.append(f"concurrency {limit} (--concurrency): agent calls in flight at most")
    in_episode = max(1, min(per_episode, limit))
    episodes = max(1, min(max(1, tasks), limit // in_episode))
    threads = in_episode if deadline else in_episode - 1
    calls = episodes * in_episode
    # an episode's step: the environment's, then its agents, in_episode at a time
    step_wall = env_wall_s + math.ceil(agents / in_episode) * wall_s
    busy = episodes * (env_cpu_s + agents * cpu_s) / step_wall if step_wall > 0 else 0.0
    cpus = max(1, math.ceil(busy))
    reasons.append(f"{episodes} episode(s) x {in_episode} agent(s) in flight: {calls} "
                   f"call(s) at once compute ~{busy:.2f} CPU(s) between them")
    return Concurrency(limit, episodes, in_episode, threads, cpus, tuple(reasons))


def _waits_reason(what: str, wall_s: float, cpu_s: float) -> str:
    return (f"{what} waits: {_time(wall_s)} of wall time, {_time(cpu_s)} of CPU "
            f"({cpu_s / wall_s:.0%}): CPUs are budgeted for the CPU part only, and the "
            "wait gets concurrency (threads), not processes")


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.1f} ms"
