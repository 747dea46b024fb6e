"""A torch policy with a batch form: with episodes in lockstep, one forward pass acts for
every agent of every episode of a lane, on a GPU when there is one::

    parcat eval -m harvest --set agents=24 -n 64 -p examples.torch_policy:TorchMLP,width=256

On a machine with a GPU, one process should own the device and the episode workers feed it:
serve the policy there and point the run at it (the server batches the requests that arrive
together into one ``step_batch``)::

    parcat serve -p examples.torch_policy:TorchMLP,width=256 -m harvest --port 8000
    parcat eval -m harvest -n 64 -p http://127.0.0.1:8000

Results are the same whatever the batch: each row's actions are computed with the same
shapes whichever rows share its forward pass (rows padded to a block, a bounded number of
rows per call; on a GPU every call has the same shape), so lockstep, ``--jobs`` and the
server change no action.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from parcat.policies.base import AgentSpec

ROW_BLOCK = 32
"""Rows are padded to a multiple of this, so one-at-a-time calls and batches share shapes."""
ROWS_PER_CALL = 256
"""Most rows a matmul takes (CPU); on a GPU every call is exactly this many rows."""


class TorchMLP:
    """A ReLU network on torch: argmax of its outputs (Discrete actions only).

    Args:
        spec: The agent it plays (its spaces).
        width, depth: Hidden layers' size and number.
        init_seed: Seed of the weights (torch's generator, on the CPU).
        device: ``auto`` (a GPU if torch sees one), ``cpu`` or ``cuda[:N]``.
    """

    stateless = True
    """One instance acts for any agent with the same spaces: parcat shares its calls."""

    def __init__(self, spec: AgentSpec, width: int = 64, depth: int = 2, init_seed: int = 0,
                 device: str = "auto") -> None:
        if not isinstance(spec.action_space, spaces.Discrete):
            raise TypeError(f"TorchMLP plays Discrete actions, not {spec.action_space}")
        self.first_action = int(spec.action_space.start)
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
        sizes = [spaces.flatdim(spec.observation_space), *[width] * depth,
                 int(spec.action_space.n)]
        generator = torch.Generator().manual_seed(init_seed)
        layers: list[torch.nn.Module] = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            linear = torch.nn.Linear(fan_in, fan_out)
            with torch.no_grad():
                linear.weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=generator)
                linear.bias.zero_()
            layers += [linear, torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*layers[:-1]).to(self.device).eval()
        self.fixed_shape = self.device.type == "cuda"
        """Every call exactly :data:`ROWS_PER_CALL` rows (a GPU's kernels are chosen by shape)."""

    def reset(self, seed: int) -> None:
        """Nothing to reset: the network keeps no state between steps."""

    def step(self, obs: Any) -> int:
        """Act on one observation."""
        return self.step_batch([obs])[0]

    @torch.inference_mode()
    def step_batch(self, obs_batch: Sequence[Any]) -> list[int]:
        """Act on many observations in one forward pass (a few, for a big batch)."""
        x = np.asarray(obs_batch, dtype=np.float32).reshape(len(obs_batch), -1)
        rows = len(x)
        block = ROWS_PER_CALL if self.fixed_shape else ROW_BLOCK
        padded = torch.zeros((rows + -rows % block, x.shape[1]), dtype=torch.float32)
        padded[:rows] = torch.from_numpy(x)
        padded = padded.to(self.device, non_blocking=True)
        out = torch.cat([self.net(padded[i:i + ROWS_PER_CALL])
                         for i in range(0, len(padded), ROWS_PER_CALL)])
        actions = out[:rows].argmax(dim=1).cpu().numpy()
        return (actions + self.first_action).tolist()


class TorchMLPOneByOne(TorchMLP):
    """The same network without a batch form: one forward pass per agent and step (what a
    policy without ``step_batch`` costs; for comparison)."""

    stateless = False

    def step(self, obs: Any) -> int:
        return TorchMLP.step_batch(self, [obs])[0]

    step_batch = None  # type: ignore[assignment]
