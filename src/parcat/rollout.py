"""The episode path: ``run_episode`` is the one place an episode is stepped.

Everything that runs episodes in parallel only decides *where* this code runs. An episode
is a pure function of (mission, policy specs, run seed, episode index): the environment
seed, the policy assignment and every policy's seed are derived from those four with
``numpy.random.SeedSequence`` (see :mod:`parcat.seeding`).
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parcat import seeding
from parcat.envs.base import ParallelEnv
from parcat.missions import Mission
from parcat.policies.assignment import assign_policies
from parcat.policies.base import AgentSpec, Policy
from parcat.policies.specs import PolicySpec, make_policy
from parcat.results import AgentResult, EpisodeResult, EpisodeStatus, ErrorInfo


@dataclass(frozen=True)
class EpisodeTask:
    """One unit of work: an episode of a mission with a set of policy specs."""

    mission: Mission
    """The mission to play."""
    policies: tuple[PolicySpec, ...]
    """The policies, with their weights; assigned to agents from the seed."""
    seed: int
    """The run's base seed."""
    episode_index: int
    """The episode's index within its mission."""

    @property
    def key(self) -> tuple[str, int]:
        """Identifies the episode within a run (for de-duplication and resume)."""
        return (self.mission.name, self.episode_index)


@dataclass
class _Progress:
    steps: int = 0


class _PolicyFailure(Exception):
    def __init__(self, agent: Any, phase: str) -> None:
        super().__init__(agent, phase)
        self.agent = agent
        self.phase = phase


class EpisodeRunner:
    """Runs episodes, keeping environments and policies alive between them.

    Reusing them is safe because every episode resets the environment and every policy
    with seeds derived for that episode; a policy must clear all its memory in ``reset``.
    """

    def __init__(self) -> None:
        self._envs: dict[Mission, ParallelEnv] = {}
        self._policies: dict[tuple[Mission, PolicySpec, int], Policy] = {}

    def run(self, task: EpisodeTask) -> EpisodeResult:
        """Play one episode; an exception in the env or a policy becomes a failed result."""
        start = time.perf_counter()
        mission = task.mission
        env_seed = seeding.episode_seed(task.seed, mission.key, task.episode_index)
        agent_ids: list[Any] = []
        names: list[str] = []
        totals: dict[Any, float] = {}
        progress = _Progress()
        phase = "setup"
        try:
            env = self._env(mission)
            agent_ids = list(env.possible_agents)
            seats = assign_policies(
                [p.weight for p in task.policies],
                len(agent_ids),
                seeding.assignment_seed(task.seed, mission.key, task.episode_index),
            )
            names = [task.policies[s].name for s in seats]
            policies = self._setup_policies(env, task, seats, agent_ids)
            phase = "reset"
            obs, _ = env.reset(seed=env_seed)
            totals = dict.fromkeys(agent_ids, 0.0)
            phase = "step"
            _play(env, policies, obs, totals, mission.max_steps, progress)
            result_status, error = EpisodeStatus.OK, None
        except _PolicyFailure as failure:
            cause = failure.__cause__ or failure
            result_status = EpisodeStatus.FAILED
            error = _error_info(cause, failure.agent, failure.phase)
        except Exception as exc:
            result_status, error = EpisodeStatus.FAILED, _error_info(exc, None, phase)
        env_now = self._envs.get(mission)
        stats, env_task = (_stats(env_now), _task(env_now)) if error is None else ({}, None)
        if error is not None:
            # an environment that raised may be in any state: the next episode gets a new one
            self._discard_env(mission)
        return EpisodeResult(
            mission=mission.name,
            episode_index=task.episode_index,
            seed=env_seed,
            steps=progress.steps,
            agents=tuple(
                AgentResult(str(a), names[i] if names else "?", float(totals.get(a, 0.0)))
                for i, a in enumerate(agent_ids)
            ),
            stats=stats,
            status=result_status,
            error=error,
            task=env_task,
            duration_s=time.perf_counter() - start,
        )

    def close(self) -> None:
        """Close every cached environment."""
        for env in self._envs.values():
            close = getattr(env, "close", None)
            if close is not None:
                close()
        self._envs.clear()
        self._policies.clear()

    def _discard_env(self, mission: Mission) -> None:
        env = self._envs.pop(mission, None)
        close = getattr(env, "close", None)
        if close is not None:
            # a broken env may fail to close; it is dropped anyway
            with contextlib.suppress(Exception):
                close()

    def _env(self, mission: Mission) -> ParallelEnv:
        env = self._envs.get(mission)
        if env is None:
            env = self._envs[mission] = mission.make_env()
        return env

    def _setup_policies(
        self, env: ParallelEnv, task: EpisodeTask, seats: Sequence[int], agent_ids: list[Any]
    ) -> dict[Any, Policy]:
        mission = task.mission
        policies: dict[Any, Policy] = {}
        for index, (agent_id, seat) in enumerate(zip(agent_ids, seats, strict=True)):
            spec = task.policies[seat]
            key = (mission, spec, index)
            policy = self._policies.get(key)
            if policy is None:
                agent = AgentSpec(
                    mission=mission.name,
                    agent_id=agent_id,
                    agent_index=index,
                    observation_space=env.observation_space(agent_id),
                    action_space=env.action_space(agent_id),
                    params=dict(mission.params),
                )
                policy = self._policies[key] = make_policy(spec, mission, agent)
            try:
                policy.reset(seeding.agent_seed(task.seed, mission.key, task.episode_index, index))
            except Exception as exc:
                raise _PolicyFailure(agent_id, "reset") from exc
            policies[agent_id] = policy
        return policies


def run_episode(
    mission: Mission, policies: Sequence[PolicySpec], seed: int, episode_index: int = 0
) -> EpisodeResult:
    """Play one episode of ``mission`` with fresh environment and policies.

    Args:
        mission: The mission to play.
        policies: Policy specs; assigned to agents by weight, deterministically from the seed.
        seed: The run's base seed.
        episode_index: Which episode of the mission this is (it selects the derived seeds).
    """
    runner = EpisodeRunner()
    try:
        return runner.run(EpisodeTask(mission, tuple(policies), seed, episode_index))
    finally:
        runner.close()


def _play(
    env: ParallelEnv,
    policies: dict[Any, Policy],
    obs: dict[Any, Any],
    totals: dict[Any, float],
    max_steps: int,
    progress: _Progress,
) -> None:
    steps_fns = {agent_id: policy.step for agent_id, policy in policies.items()}
    steps = 0
    while env.agents and steps < max_steps:
        actions = {}
        agent_id = None
        try:
            for agent_id in env.agents:
                actions[agent_id] = steps_fns[agent_id](obs[agent_id])
        except Exception as exc:
            raise _PolicyFailure(agent_id, "policy") from exc
        obs, rewards, _, _, _ = env.step(actions)
        for agent_id, reward in rewards.items():
            totals[agent_id] += reward
        steps += 1
        progress.steps = steps


def _error_info(exc: BaseException, agent: Any, phase: str) -> ErrorInfo:
    formatted = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return ErrorInfo(
        type=type(exc).__name__,
        message=str(exc),
        traceback=formatted,
        agent=None if agent is None else str(agent),
        phase=phase,
    )


def _stats(env: ParallelEnv | None) -> dict[str, float]:
    stats_fn = getattr(env, "episode_stats", None)
    if stats_fn is None:
        return {}
    return {str(k): float(v) for k, v in stats_fn().items()}


def _task(env: ParallelEnv | None) -> dict[str, Any] | None:
    task = getattr(env, "task", None)
    return dict(task) if isinstance(task, dict) else None
