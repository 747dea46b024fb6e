"""Episodes in flight: what a checkpoint keeps of the environments between two epochs.

Environments run on across epochs, so a checkpoint is written while episodes are under
way. Instead of the environments' own state (which parcat cannot read), it keeps per
environment the episode it is running and the actions taken in it so far: resuming resets
each environment to that episode (the same seed and task) and replays the actions, which
rebuilds its state and its running return and length. :class:`EpisodeHistory` records the
actions as collection goes; :class:`InFlight` is what is saved (``envs.npz`` in the run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from parcat.core.errors import CheckpointError
from parcat.train.envslice import AgentLayout

FILE = "envs.npz"
"""The file in the run directory (see :func:`parcat.policies.checkpoint.save_run`)."""


@dataclass(frozen=True)
class InFlight:
    """The episodes running in every environment, as a checkpoint saves them."""

    episodes: np.ndarray
    """``(num_envs,)``: the number of the episode each environment runs."""
    lengths: np.ndarray
    """``(num_envs,)``: steps taken in it so far."""
    actions: list[np.ndarray]
    """Per agent ``(lengths.sum(), *action_shape)``: the actions taken, environment after
    environment."""
    obs: list[np.ndarray]
    """Per agent ``(num_envs, *observation_shape)``: the last observations, to tell a replay
    that took another course."""
    returns: np.ndarray
    """``(num_envs, num_agents)``: each agent's return so far, for the same check."""

    @property
    def num_envs(self) -> int:
        """Environments saved."""
        return len(self.episodes)

    def actions_at(self, t: int) -> list[np.ndarray]:
        """Per agent, every environment's ``t``-th action (zero where its episode is shorter)."""
        starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        rows = starts + t
        taken = self.lengths > t
        columns = []
        for actions in self.actions:
            column = np.zeros((self.num_envs, *actions.shape[1:]), actions.dtype)
            column[taken] = actions[rows[taken]]
            columns.append(column)
        return columns

    def to_arrays(self) -> dict[str, np.ndarray]:
        """For :func:`parcat.policies.checkpoint.save_run`."""
        arrays = {"episodes": self.episodes, "lengths": self.lengths, "returns": self.returns}
        for i, (actions, obs) in enumerate(zip(self.actions, self.obs, strict=True)):
            arrays[f"act{i}"], arrays[f"obs{i}"] = actions, obs
        return arrays

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], layouts: Sequence[AgentLayout],
                    where: str) -> InFlight:
        """Read back :meth:`to_arrays`, checked against the mission's agents.

        Raises:
            CheckpointError: a key missing or an array of another shape, naming ``where``.
        """
        def get(key: str, shape: tuple[int, ...], kind: str) -> np.ndarray:
            array = arrays.get(key)
            if array is None or array.shape != shape or array.dtype.kind not in kind:
                raise CheckpointError(
                    f"--resume: '{where}': expected array '{key}' of shape {shape}, found "
                    f"{'none' if array is None else array.shape}; the file belongs to another "
                    "mission or is damaged: delete it to start new episodes"
                )
            return array

        lengths = arrays.get("lengths")
        num_envs = len(lengths) if lengths is not None and lengths.ndim == 1 else 0
        lengths = get("lengths", (num_envs,), "iu")
        if (lengths < 0).any():
            raise CheckpointError(f"--resume: '{where}': a negative episode length")
        total = int(lengths.sum())
        return cls(
            episodes=get("episodes", (num_envs,), "iu"), lengths=lengths,
            actions=[get(f"act{i}", (total, *lay.act_shape), "iuf")
                     for i, lay in enumerate(layouts)],
            obs=[get(f"obs{i}", (num_envs, *lay.obs_shape), "iufb")
                 for i, lay in enumerate(layouts)],
            returns=get("returns", (num_envs, len(layouts)), "f"),
        )


class EpisodeHistory:
    """The actions of every environment's current episode, recorded step by step.

    Steps are kept from the oldest episode still running on; older ones are dropped.

    Args:
        num_envs: Environments.
        layouts: The agents' array layouts.
    """

    def __init__(self, num_envs: int, layouts: Sequence[AgentLayout]) -> None:
        self.layouts = list(layouts)
        self.steps: list[list[np.ndarray]] = []
        """Per step, per agent: every environment's action."""
        self.first = 0
        """The step number of ``steps[0]``."""
        self.now = 0
        """Steps recorded."""
        self.start = np.zeros(num_envs, np.int64)
        """The step each environment's current episode began at."""

    def record(self, columns: list[np.ndarray], began: np.ndarray) -> None:
        """Add one step's actions; ``began`` marks environments a new episode began in."""
        self.steps.append(columns)
        self.now += 1
        self.restart(began)

    def restart(self, began: np.ndarray) -> None:
        """Forget the actions of the marked environments (a new episode began there)."""
        self.start[began] = self.now
        oldest = int(self.start.min())
        if oldest > self.first:
            del self.steps[: oldest - self.first]
            self.first = oldest

    def snapshot(self, episodes: np.ndarray, obs: list[np.ndarray],
                 returns: np.ndarray) -> InFlight:
        """What a checkpoint keeps now."""
        lengths = self.now - self.start
        actions = []
        for i, lay in enumerate(self.layouts):
            if not self.steps:
                actions.append(np.zeros((0, *lay.act_shape), lay.act_dtype))
                continue
            stacked = np.stack([step[i] for step in self.steps])  # (steps, envs, ...)
            actions.append(np.concatenate(
                [stacked[s - self.first :, e] for e, s in enumerate(self.start)]))
        return InFlight(episodes.astype(np.int64), lengths.astype(np.int64), actions,
                        [o.copy() for o in obs], returns.astype(np.float64))

    def load(self, state: InFlight, lost: np.ndarray) -> None:
        """Continue from a replayed ``state``; ``lost`` marks environments whose replay
        ended their episode (they run a new one)."""
        longest = int(state.lengths.max(initial=0))
        self.steps = [state.actions_at(t) for t in range(longest)]
        self.first, self.now = 0, longest
        self.start = (longest - state.lengths).astype(np.int64)
        self.restart(lost)
