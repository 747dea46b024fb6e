"""Conformance checkers: does an environment, policy or learner keep parcat's contract?

Use them in your own tests (``check_env(MyEnv())``,
``check_policy(MyPolicy(agent_spec), agent_spec)``,
``check_learner(MyLearner, agent_spec, {"lr": 0.01})``), as PettingZoo's ``parallel_api_test``.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

import gymnasium
import numpy as np

from parcat.core.errors import ConformanceError
from parcat.policies.base import AgentSpec, Policy
from parcat.stepping.calls import blocking


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def check_env(env: Any, seed: int = 0, num_steps: int = 50) -> None:
    """Check the PettingZoo Parallel API and determinism of ``env``; a ``ConformanceError``
    names the first broken rule: one that ignores its seed is "not deterministic", one whose
    ``reset(seed)`` keeps state from the episode before (PettingZoo's KAZ) "leaks state"."""
    _require(
        not (callable(getattr(env, "agent_iter", None)) and callable(getattr(env, "last", None))),
        f"{type(env).__name__} is a PettingZoo AEC (turn-based) environment, not a parallel "
        "one; wrap it with pettingzoo.utils.conversions.aec_to_parallel(env)")
    agents = list(getattr(env, "possible_agents", None) or [])
    _require(bool(agents), "env.possible_agents must be a non-empty list")
    _require(all(isinstance(a, Hashable) for a in agents), "agent ids must be hashable")
    _require(len(set(agents)) == len(agents), "env.possible_agents has duplicate ids")
    for agent in agents:
        for name in ("observation_space", "action_space"):
            space = _call(f"{name}({agent!r})", getattr(env, name, None), agent)
            _require(isinstance(space, gymnasium.spaces.Space), f"env.{name}({agent!r}) must "
                     f"return a gymnasium space, got {type(space).__name__}")
    fresh = _copy_of(env)
    first = _rollout(env, seed, num_steps)
    if _same(first, _rollout(env, seed, num_steps)):
        return
    runs = f"two runs with reset(seed={seed}) and the same actions differ"
    _require(fresh is not None, f"env is not deterministic or leaks state across resets: "
             f"{runs} (it cannot be copied, so the check cannot tell which)")
    _require(not _same(first, _rollout(fresh, seed, num_steps)),
             f"env leaks state across resets: {runs}, and a copy made before the first "
             "plays the first again, so reset() keeps state from the episode before (parcat "
             "gives such an env a fresh instance every episode)")
    raise ConformanceError(f"env is not deterministic: {runs}, and so does a copy made "
                           "before the first: it ignores its seed")


def _copy_of(env: Any) -> Any:
    """A copy of ``env`` as given, or ``None`` when it cannot be copied."""
    try:
        return copy.deepcopy(env)
    except Exception:  # any env's state may refuse (sockets, windows, C handles)
        return None


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
                f"reward of {agent!r} must be a finite number, got {reward!r}")
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
    _require(set(obs) == set(env.agents),
             f"{where}() returned observations for {sorted(map(str, obs))}, "
             f"but env.agents is {sorted(map(str, env.agents))}")
    _check_obs(env, obs)


def _check_obs(env: Any, obs: dict[Any, Any]) -> None:
    for agent, value in obs.items():
        space = env.observation_space(agent)
        _require(space.contains(value), f"observation of {agent!r} is outside {space}")


def check_policy(policy: Policy, spec: AgentSpec, seed: int = 0, num_steps: int = 20) -> None:
    """Check that ``policy`` acts inside the action space and is deterministic per seed; a
    ``ConformanceError`` names the first broken rule."""
    for method in ("reset", "step"):
        _require(callable(getattr(policy, method, None)), f"policy has no {method}() method")
    obs_space = copy.deepcopy(spec.observation_space)
    obs_space.seed(seed)
    observations = [obs_space.sample() for _ in range(num_steps)]
    runs = []
    step = blocking(policy.step)  # an async policy's too
    for _ in range(2):
        policy.reset(seed)
        actions = [step(o) for o in observations]
        for action in actions:
            _require(spec.action_space.contains(action),
                     f"policy action {action!r} is outside {spec.action_space}")
        runs.append(actions)
    _require(_same(runs[0], runs[1]), f"policy is not deterministic for reset({seed})")
    step_batch = getattr(policy, "step_batch", None)
    if callable(step_batch):
        policy.reset(seed)
        batched = list(blocking(step_batch)(observations))
        _require(len(batched) == len(observations), "step_batch must return one action per obs")
        for action in batched:
            _require(spec.action_space.contains(action),
                     f"step_batch action {action!r} is outside {spec.action_space}")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return bool(a == b)


LEARNER_METHODS = ("act", "observe", "train_step", "state_dict", "load_state_dict",
                   "policy_arrays", "load_policy_arrays")
LEARNER_ATTRIBUTES = ("policy", "policy_kwargs", "config", "num_observed")


def check_learner(learner: Any, spec: AgentSpec, options: Mapping[str, Any] | None = None,
                  seed: int = 0, num_rows: int = 8) -> None:
    """Check that a learner keeps :class:`parcat.train.learner.Learner`'s contract; a
    ``ConformanceError`` names every broken rule found, ``; ``-separated.

    Args:
        learner: A learner, or its class (built as ``parcat train`` does, from ``spec``'s
            spaces, ``options`` and ``seed``; its state is then also loaded into a second
            instance built with another seed).
        options: The class's options (the train YAML's ``learner`` without ``class``).
    """
    from parcat.train.recipes import LearnerRecipe
    recipe = None
    if isinstance(learner, type):
        recipe = LearnerRecipe(learner, spec.observation_space,  # type: ignore[arg-type]
                               spec.action_space, dict(options or {}), seed)
        learner = recipe.build()
    problems = _missing_members(learner)
    if not problems:
        problems = _LearnerCheck(learner, spec, seed, num_rows).run(recipe)
    _require(not problems, "; ".join(problems))


def _missing_members(learner: Any) -> list[str]:
    problems = [f"learner has no {name}() method" for name in LEARNER_METHODS
                if not callable(getattr(learner, name, None))]
    problems += [f"learner has no '{name}' attribute" for name in LEARNER_ATTRIBUTES
                 if not hasattr(learner, name)]
    if problems:
        return problems
    if not isinstance(learner.policy, str) or ":" not in learner.policy:
        problems.append(f"learner.policy must be a 'module:Class' string, got {learner.policy!r}")
    for name in ("policy_kwargs", "config"):
        value = getattr(learner, name)
        try:
            json.dumps(dict(value))
        except (TypeError, ValueError) as exc:
            problems.append(f"learner.{name} must be a JSON-able mapping: {exc}")
    return problems


class _LearnerCheck:
    """One learner's behaviour checks; each adds what it finds to :attr:`problems`."""

    def __init__(self, learner: Any, spec: AgentSpec, seed: int, num_rows: int) -> None:
        self.learner, self.spec = learner, spec
        space = copy.deepcopy(spec.observation_space)
        space.seed(seed)
        self.obs = np.stack([np.asarray(space.sample(), np.float32).reshape(-1)
                             for _ in range(num_rows)])
        self.problems: list[str] = []

    def run(self, recipe: Any) -> list[str]:
        actions = self.actions(explore=True)
        if actions is not None and not self.problems:
            self.observe_and_train(actions)
        self.finite("policy_arrays", self.learner.policy_arrays())
        state = self.learner.state_dict()
        self.finite("state_dict", state, skip="buffer.")
        self.round_trip(state, self.learner, "itself")
        if recipe is not None:
            other = replace(recipe, seed=recipe.seed + 1).build()
            self.round_trip(state, other, "a new instance")
        self.loads_into_policy()
        return self.problems

    def actions(self, explore: bool) -> np.ndarray | None:
        acts = np.asarray(self.learner.act(self.obs, explore=explore))
        space, n = self.spec.action_space, len(self.obs)
        if isinstance(space, gymnasium.spaces.Discrete):
            ok = acts.shape == (n,) and np.issubdtype(acts.dtype, np.integer)
            expected = f"int64 ({n},)"
        else:
            ok = acts.shape == (n, *(space.shape or ())) and np.issubdtype(acts.dtype,
                                                                            np.floating)
            expected = f"float {(n, *(space.shape or ()))}"
        if not ok:
            self.problems.append(f"act(explore={explore}) must return {expected} actions, got "
                                 f"{acts.dtype} {acts.shape}")
            return None
        outside = [a for a in acts if not space.contains(np.asarray(a, dtype=space.dtype))]
        if outside:
            self.problems.append(f"act(explore={explore}) returned {outside[0]!r}, "
                                 f"outside {space}")
        return acts

    def observe_and_train(self, actions: np.ndarray) -> None:
        from parcat.train.learner import Transitions
        n = len(self.obs)
        before = int(self.learner.num_observed)
        rewards = np.linspace(-1, 1, n, dtype=np.float32)
        ends = np.arange(n) % 4 == 3
        for _ in range(4):
            self.learner.observe(Transitions(self.obs, actions, rewards, self.obs[::-1].copy(),
                                             ends, np.zeros(n, bool), np.arange(n)))
        if int(self.learner.num_observed) != before + 4 * n:
            self.problems.append(f"observe() of {4 * n} transitions moved num_observed from "
                                 f"{before} to {self.learner.num_observed}")
        metrics = self.learner.train_step()
        if not isinstance(metrics, Mapping) or not all(
                isinstance(v, int | float) and math.isfinite(v) for v in metrics.values()):
            self.problems.append(f"train_step() must return a mapping of finite numbers, "
                                 f"got {metrics!r}")

    def finite(self, what: str, arrays: Any, skip: str = "") -> None:
        for key, value in dict(arrays).items():
            if not isinstance(value, np.ndarray):
                self.problems.append(f"{what}()['{key}'] is a {type(value).__name__}, "
                                     "not a numpy array")
            elif not key.startswith(skip or "\0") and value.dtype.kind in "fc" and \
                    not np.all(np.isfinite(value)):
                self.problems.append(f"{what}()['{key}'] holds non-finite values")

    def round_trip(self, state: dict[str, np.ndarray], target: Any, into: str) -> None:
        greedy = np.asarray(self.learner.act(self.obs, explore=False))
        target.load_state_dict(state)
        again = target.state_dict()
        if state.keys() != again.keys() or not all(_same(state[k], again[k]) for k in state):
            self.problems.append(f"state_dict() loaded into {into} does not round-trip")
        elif not _same(greedy, np.asarray(target.act(self.obs, explore=False))):
            self.problems.append(f"after load_state_dict() {into} acts differently")

    def loads_into_policy(self) -> None:
        from parcat.core.imports import import_reference
        try:
            policy = import_reference(self.learner.policy)(self.spec,
                                                           **dict(self.learner.policy_kwargs))
            policy.load_state_dict(self.learner.policy_arrays())
        except Exception as exc:  # any failure is what we report
            self.problems.append(f"policy_arrays() do not load into {self.learner.policy}: "
                                 f"{type(exc).__name__}: {exc}")
            return
        acts = [policy.step(o) for o in self.obs]
        greedy = self.learner.act(self.obs, explore=False)
        if not np.allclose(np.asarray(acts, np.float64), np.asarray(greedy, np.float64),
                           atol=1e-5):
            self.problems.append(f"{self.learner.policy} loaded with policy_arrays() acts "
                                 "otherwise than act(explore=False)")
