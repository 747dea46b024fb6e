"""Caps on the sizes users ask for: one named constant per limit, and why it is there.

Every limit is far above real use and far below what exhausts memory or time, so a typo such
as ``size: 100000`` or ``mlp,depth=100000`` is one line naming the limit before anything is
allocated, instead of a ``MemoryError``, a swap storm or a hang. Checks that use them say
"must be an integer between LOW and LIMIT", so the valid range is always in the message.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from parcat.core.errors import ConfigError, UsageError, brief

# --- user files -------------------------------------------------------------------------------

MAX_YAML_BYTES = 256 * 1024
"""Largest mission, train or sim YAML file read (256 KiB; real ones are a few KiB). PyYAML
parses about 100 KiB a second in pure Python on a loaded machine, so any file under this cap
is read, or rejected, in a few seconds."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of lists and mappings in a YAML file, counted after aliases are expanded
(real files nest 3 or 4 deep). Deeper documents would overflow Python's recursion limit in
the YAML composer, and in ``repr`` or ``json`` later."""
MAX_YAML_NODES = 200_000
"""Most values (scalars, lists, mappings) in a YAML file once aliases are expanded. Every
file under :data:`MAX_YAML_BYTES` without aliases fits; an alias bomb ("billion laughs":
anchors that each repeat the previous one several times) does not."""
MAX_NUMBER_DIGITS = 100
"""Longest integer written in a YAML file or a ``KEY=VALUE``. Python refuses to read decimal
integers of more than 4,300 digits, and base-60 ones (``1:2:3``) take quadratic time."""
MAX_REPLAY_BYTES = 2**30
"""Largest replay file once unpacked (1 GiB; one episode's observations, actions and
rewards take a few MiB). Checked from the archive's directory before anything is unpacked,
so a damaged or hostile file cannot make ``parcat replay`` allocate without bound."""

# --- names ------------------------------------------------------------------------------------

MAX_PATH_LENGTH = 4096
"""Longest mission argument (``-m``, the ``mission`` key): a name or a path (Linux's
``PATH_MAX``)."""
MAX_NAME_LENGTH = 128
"""Longest mission name (its ``name`` key or its file's stem); names go into results, seeds
and the default run directory."""

# --- environments -----------------------------------------------------------------------------

MAX_AGENTS = 4096  # most agents in one built-in environment
MAX_GRID_SIDE = 1024
"""Largest side of a grid map (``harvest``'s ``size``): a million cells, a few MiB per layer."""
MAX_VIEW_RADIUS = 64
"""Largest observation window radius (``harvest``'s ``view``): windows of 129 x 129 cells."""
MAX_OBSERVATION_FLOATS = 2**24
"""Most numbers observed by all agents of an environment in one step (agents times the length
of one observation): 64 MiB of float32 a step. ``evade``'s observations grow with the square
of its agents, ``harvest``'s with the square of its view."""
MAX_EPISODE_STEPS = 10**8  # largest ``max_steps`` of a mission or a built-in environment
MAX_ENV_NUMBER = 1e9
"""Largest real-valued environment parameter (arena side, speeds, radii, time step); float32
observations of larger worlds lose their precision."""

# --- networks, learners, runs -----------------------------------------------------------------

MAX_NET_WIDTH = 8192  # most units in a hidden layer of the ``mlp`` policy or the DQN learner
MAX_NET_DEPTH = 64  # most hidden layers of the ``mlp`` policy or the DQN learner
MAX_NET_PARAMETERS = 2**24
"""Most weights and biases of one network (64 MiB of float32; a DQN learner keeps five
copies: online, target, gradient and two Adam moments)."""
MAX_EPISODE_PARAMETERS = 2**26
"""Network parameters of all of an episode's agents together (each agent gets its own
network): 256 MiB of float32 weights per episode worker."""
MAX_BATCH_SIZE = 65_536  # largest DQN minibatch
MAX_BUFFER_BYTES = 2**32
"""Largest replay buffer of one learner once full (4 GiB); it grows as it fills, so this
is checked from the capacity and the size of one transition."""
MAX_COUNT = 10**9
"""Largest count of episodes, epochs, steps or updates a user can ask for; more could never
finish (and a list of that many tasks would not fit in memory)."""
MAX_WORKERS = 1024
"""Most worker processes or threads one option asks for (``env_workers``, ``jobs``,
``train_threads``, ``--concurrency``)."""
MAX_LOCKSTEP = 1024
"""Most episodes one lane plays side by side (``--lockstep``): each holds an environment
and its policies."""
MAX_TRAIN_ENVS = 4096
"""Most environments one training run steps together (``env_workers`` times
``envs_per_worker``)."""


def require_int(label: str, value: Any, low: int = 1, high: int | None = MAX_COUNT) -> int:
    """``value`` if it is an integer (not a bool) from ``low`` to ``high`` (``None``: no
    upper bound), else a :class:`ConfigError` naming ``label`` (a flag) and the range."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high:,}"
        raise ConfigError(f"{label} must be an integer {bounds}, got {brief(value)}")
    return value


def network_parameters(sizes: Sequence[int]) -> int:
    """Weights and biases of a dense network whose layers have ``sizes`` units (in to out)."""
    return sum(fan_in * fan_out + fan_out for fan_in, fan_out in itertools.pairwise(sizes))


def dense_sizes(label: str, n_in: int, width: int, depth: int, n_out: int,
                error: type[UsageError]) -> list[int]:
    """The layer sizes of a dense network of ``depth`` hidden layers of ``width`` units;
    over :data:`MAX_NET_PARAMETERS` parameters, ``error`` names ``label`` and the limit."""
    sizes = [n_in, *([width] * depth), n_out]
    count = network_parameters(sizes)
    if count > MAX_NET_PARAMETERS:
        raise error(
            f"{label}: width {width} and depth {depth} on {n_in:,} inputs make {count:,} "
            f"parameters, more than the limit of {MAX_NET_PARAMETERS:,}; use a smaller width "
            "or depth"
        )
    return sizes
