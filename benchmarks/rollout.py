"""Agent-steps per second through ``run_episode`` vs a bare loop calling ``env.step``.

harvest with 24 agents (size 32, 40 resources) and the random policy. Both variants use
the same environment and the same policy objects; the bare loop is what a user would write
by hand (a dict comprehension of ``policy.step`` and ``env.step``). Variants are
interleaved and the median of the repeats is reported, because per-core speed drifts here.

    python benchmarks/rollout.py [--episodes 10] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

from parcat.envs.missions import load_mission
from parcat.episode.rollout import EpisodeRunner, EpisodeTask
from parcat.policies.specs import parse_policy_spec
from parcat.stepping.base import InlineStepper

PARAMS = {"agents": 24, "size": 32, "resources": 40, "max_steps": 500}


def bare_loop(runner: EpisodeRunner, task: EpisodeTask) -> int:
    """The hand-written loop: same env and policies, no parcat bookkeeping."""
    mission = task.mission
    env = runner._env(mission)
    stepper = InlineStepper()
    stepper.start(mission, runner._seats(env, task))
    policies = {a: stepper.cache.get(mission, s) for a, s in zip(
        env.possible_agents, runner._seats(env, task), strict=True)}
    obs, _ = env.reset(seed=task.episode_index)
    steps = 0
    while env.agents:
        actions = {a: policies[a].step(obs[a]) for a in env.agents}
        obs, _rewards, _, _, _ = env.step(actions)
        steps += len(actions)
    return steps


def through_parcat(runner: EpisodeRunner, task: EpisodeTask) -> int:
    result = runner.run(task)
    assert result.ok, result.error
    return result.steps * len(result.agents)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    mission = load_mission("harvest", PARAMS)
    policies = (parse_policy_spec("random"),)
    runner = EpisodeRunner()
    rates: dict[str, list[float]] = {"bare loop": [], "run_episode": []}
    for repeat in range(args.repeats):
        for name, fn in (("bare loop", bare_loop), ("run_episode", through_parcat)):
            agent_steps = 0
            start = time.perf_counter()
            for i in range(args.episodes):
                agent_steps += fn(runner, EpisodeTask(mission, policies, repeat, i))
            rates[name].append(agent_steps / (time.perf_counter() - start))
    bare = statistics.median(rates["bare loop"])
    ours = statistics.median(rates["run_episode"])
    print(f"harvest {PARAMS}, random policy, {args.episodes} episodes x {args.repeats} repeats")
    print(f"bare loop     {bare:12,.0f} agent-steps/s")
    print(f"run_episode   {ours:12,.0f} agent-steps/s   (target >= 50,000)")
    print(f"ratio         {ours / bare:12.3f}                 (target >= 0.9)")


if __name__ == "__main__":
    main()
