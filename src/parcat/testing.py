"""Conformance checkers, public API: does an environment or policy keep parcat's contract?

Use them in your own tests the way PettingZoo's ``parallel_api_test`` is used::

    from parcat.testing import check_env, check_policy
    check_env(MyEnv())
    check_policy(MyPolicy(agent_spec), agent_spec)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Hashable
from typing import Any

import gymnasium
import numpy as np

from parcat.errors import ConformanceError
from parcat.policies.base import AgentSpec, Policy


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def check_env(env: Any, seed: int = 0, num_steps: int = 50) -> None:
    """Check the PettingZoo Parallel API and determinism of ``env``.

    Raises:
        ConformanceError: naming the first broken rule.
    """
    _require(
        not (callable(getattr(env, "agent_iter", None)) and callable(getattr(env, "last", None))),
        f"{type(env).__name__} is a PettingZoo AEC (turn-based) environment, not a parallel "
        "one; wrap it with pettingzoo.utils.conversions.aec_to_parallel(env)",
    )
    agents = list(getattr(env, "possible_agents", None) or [])
    _require(bool(agents), "env.possible_agents must be a non-empty list")
    _require(all(isinstance(a, Hashable) for a in agents), "agent ids must be hashable")
    _require(len(set(agents)) == len(agents), "env.possible_agents has duplicate ids")
    for agent in agents:
        for name in ("observation_space", "action_space"):
            space = _call(f"{name}({agent!r})", getattr(env, name, None), agent)
            _require(
                isinstance(space, gymnasium.spaces.Space),
                f"env.{name}({agent!r}) must return a gymnasium space, got {type(space).__name__}",
            )
    first = _rollout(env, seed, num_steps)
    second = _rollout(env, seed, num_steps)
    _require(
        _same(first, second),
        f"env is not deterministic: two runs with reset(seed={seed}) and the same actions differ",
    )


def _call(what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)``; whatever it raises becomes a ConformanceError naming it."""
    _require(callable(method), f"env.{what.split('(')[0]} must be a method")
    try:
        return method(*args, **kwargs)
    except ConformanceError:
        raise
    except Exception as exc:
        raise ConformanceError(f"env.{what} raised {type(exc).__name__}: {exc}") from exc


def _returned(what: str, result: Any, size: int) -> tuple[Any, ...]:
    _require(isinstance(result, tuple) and len(result) == size,
             f"env.{what} must return a tuple of {size}, got {type(result).__name__}"
             + (f" of {len(result)}" if isinstance(result, tuple) else ""))
    return tuple(result)


def _rollout(env: Any, seed: int, num_steps: int) -> list[Any]:
    what = f"reset(seed={seed})"
    obs, infos = _returned(what, _call(what, getattr(env, "reset", None), seed=seed), 2)
    _check_dicts(env, "reset", obs=obs, infos=infos)
    action_spaces = {a: copy.deepcopy(env.action_space(a)) for a in env.possible_agents}
    for i, space in enumerate(action_spaces.values()):
        space.seed(seed + i)
    trace: list[Any] = [obs]
    for _ in range(num_steps):
        if not env.agents:
            break
        actions = {a: action_spaces[a].sample() for a in env.agents}
        live = list(env.agents)
        obs, rewards, terms, truncs, infos = _returned(
            "step(actions)", _call("step(actions)", getattr(env, "step", None), actions), 5)
        for name, value in (("obs", obs), ("rewards", rewards), ("terminations", terms),
                            ("truncations", truncs), ("infos", infos)):
            _require(isinstance(value, dict), f"step() must return a dict of {name}")
            _require(set(value) <= set(live), f"step() returned {name} for agents not stepped")
        _require(set(rewards) == set(live), "step() must return a reward for each stepped agent")
        for agent, reward in rewards.items():
            _require(
                isinstance(reward, int | float | np.number) and math.isfinite(float(reward)),
                f"reward of {agent!r} must be a finite number, got {reward!r}",
            )
        for agent in live:
            _require(isinstance(terms.get(agent), bool | np.bool_), "terminations must be bools")
            _require(isinstance(truncs.get(agent), bool | np.bool_), "truncations must be bools")
            if terms[agent] or truncs[agent]:
                _require(agent not in env.agents, f"agent {agent!r} is done but still in agents")
        _check_obs(env, obs)
        trace.append((obs, rewards, terms, truncs))
    return trace


def _check_dicts(env: Any, where: str, obs: Any, infos: Any) -> None:
    _require(isinstance(obs, dict), f"{where}() must return a dict of observations")
    _require(isinstance(infos, dict), f"{where}() must return a dict of infos")
    _require(
        set(obs) == set(env.agents),
        f"{where}() returned observations for {sorted(map(str, obs))}, "
        f"but env.agents is {sorted(map(str, env.agents))}",
    )
    _check_obs(env, obs)


def _check_obs(env: Any, obs: dict[Any, Any]) -> None:
    for agent, value in obs.items():
        space = env.observation_space(agent)
        _require(space.contains(value), f"observation of {agent!r} is outside {space}")


def check_policy(policy: Policy, spec: AgentSpec, seed: int = 0, num_steps: int = 20) -> None:
    """Check that ``policy`` acts inside the action space and is deterministic per seed.

    Raises:
        ConformanceError: naming the first broken rule.
    """
    for method in ("reset", "step"):
        _require(callable(getattr(policy, method, None)), f"policy has no {method}() method")
    obs_space = copy.deepcopy(spec.observation_space)
    obs_space.seed(seed)
    observations = [obs_space.sample() for _ in range(num_steps)]
    runs = []
    for _ in range(2):
        policy.reset(seed)
        actions = [policy.step(o) for o in observations]
        for action in actions:
            _require(
                spec.action_space.contains(action),
                f"policy action {action!r} is outside {spec.action_space}",
            )
        runs.append(actions)
    _require(_same(runs[0], runs[1]), f"policy is not deterministic for reset({seed})")
    step_batch = getattr(policy, "step_batch", None)
    if callable(step_batch):
        policy.reset(seed)
        batched = list(step_batch(observations))
        _require(len(batched) == len(observations), "step_batch must return one action per obs")
        for action in batched:
            _require(
                spec.action_space.contains(action),
                f"step_batch action {action!r} is outside {spec.action_space}",
            )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return bool(a == b)
