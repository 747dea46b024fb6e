"""A Gymnasium environment as a one-agent parallel environment (``-m gymnasium:ID``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium


class GymnasiumParallelEnv:
    """A single-agent Gymnasium environment seen as a one-agent parallel environment; it is
    closed with the adapter."""

    metadata: dict[str, Any] = {"name": "gymnasium", "render_modes": []}

    def __init__(self, env: gymnasium.Env[Any, Any], agent_id: str = "agent_0") -> None:
        self.env = env
        self.render_mode = env.render_mode
        self.metadata = {**self.metadata,
                         "render_modes": list(env.metadata.get("render_modes", []))}
        self.agent_id = agent_id
        self.possible_agents = [agent_id]
        self.agents: list[str] = []
        self._return = 0.0
        self._steps = 0

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Reset the wrapped environment."""
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = [self.agent_id]
        self._return = 0.0
        self._steps = 0
        return {self.agent_id: obs}, {self.agent_id: dict(info)}

    def step(self, actions: Mapping[str, Any]) -> tuple[
        dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, Any]
    ]:
        """Step the wrapped environment with the one agent's action."""
        obs, reward, terminated, truncated, info = self.env.step(actions[self.agent_id])
        self._return += float(reward)
        self._steps += 1
        if terminated or truncated:
            self.agents = []
        a = self.agent_id
        return ({a: obs}, {a: float(reward)}, {a: bool(terminated)}, {a: bool(truncated)},
                {a: dict(info)})

    @property
    def unwrapped(self) -> GymnasiumParallelEnv:
        """The adapter itself, the innermost parallel env (PettingZoo's API and
        ``parallel_api_test`` ask for it; the Gymnasium env is :attr:`env`)."""
        return self

    def observation_space(self, agent: Any) -> gymnasium.spaces.Space[Any]:
        """The wrapped environment's observation space."""
        return self.env.observation_space

    def action_space(self, agent: Any) -> gymnasium.spaces.Space[Any]:
        """The wrapped environment's action space."""
        return self.env.action_space

    def render(self) -> Any:
        """What the wrapped environment draws in its ``render_mode`` (``None`` if none)."""
        return self.env.render()

    def episode_stats(self) -> dict[str, float]:
        """Length and return of the episode so far."""
        return {"length": float(self._steps), "return": self._return}

    def close(self) -> None:
        """Close the wrapped environment."""
        self.env.close()


def make_gymnasium_env(env_id: str, **kwargs: Any) -> GymnasiumParallelEnv:
    """Make ``gymnasium.make(env_id, **kwargs)`` and wrap it as a one-agent parallel env."""
    return GymnasiumParallelEnv(gymnasium.make(env_id, **kwargs))
