"""Is an environment reproducible? A cheap check at the start of a run.

Two fresh environments reset with one seed play a few dozen seeded steps, and then each
again after an episode of another length, compared bit for bit. One that ignores its seed
makes results carry ``"reproducible": false`` and a warning; one whose ``reset(seed)`` keeps
state from earlier episodes (a leak) gets a fresh environment for every episode.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from parcat.core.errors import USER_CODE_ERRORS, ParcatError
from parcat.envs.missions import Mission, close_env
from parcat.envs.turns import is_turn_based, sample_legal
from parcat.ipc.process import SetupFailedError, call_in_worker

PROBE_SEED = 20_261_126
PROBE_STEPS = 32
"""Long enough for state kept across resets to show (KAZ's zombie timer shows at step 8-12
after the probe's first episode), and short enough that four plays cost well under a second."""
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class EnvCheck:
    """What the start-of-run check found about one mission's environment."""

    reproducible: bool | None
    """Two fresh environments, one seed, the same episode (``None``: could not tell)."""
    leaks_state: bool
    """``reset(seed)`` kept state from the episode before (so episodes get fresh ones)."""
    note: str
    """Why, in one sentence (empty when all is well)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"reproducible": self.reproducible, "leaks_state": self.leaks_state,
                "note": self.note}


def check_mission(mission: Mission) -> EnvCheck:
    """Play the probe episode on two fresh environments, then again on each after an episode
    of another length: a kept counter that a full episode's length happens to wrap shows
    after the other one."""
    first = second = None
    steps = min(PROBE_STEPS, mission.max_steps)
    try:
        first, second = mission.make_env(), mission.make_env()
        fresh = _play(first, steps)
        other = _play(second, steps // 2 + 1)
        again = _play(first, steps)
        again_after_short = _play(second, steps)
    except USER_CODE_ERRORS as exc:
        return EnvCheck(None, False, f"the check could not run ({type(exc).__name__}: {exc})")
    finally:
        for env in (first, second):
            if env is not None:
                close_env(env)
    if fresh[:len(other)] != other:
        return EnvCheck(False, False, "two fresh environments reset with the same seed "
                        "played different episodes: the environment ignores its seed")
    if not fresh == again == again_after_short:
        return EnvCheck(True, True, "reset(seed) keeps state from the episode before (a "
                        "leak): every episode gets a fresh environment")
    return EnvCheck(True, False, "")


_CHECKED: dict[Mission, EnvCheck] = {}
_MAX_CHECKED = 64


def check_in_a_worker(mission: Mission, start_method: str | None = None,
                      timeout_s: float | None = None) -> EnvCheck:
    """:func:`check_mission` in a worker process, given up after ``timeout_s``; here when
    the mission cannot reach one (built in Python: its episodes run here too). A verdict is
    kept for the process, so ``--each`` and ``--cross`` check each mission once."""
    if mission in _CHECKED:
        return _CHECKED[mission]
    timeout_s = PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        check = cast(EnvCheck, call_in_worker(check_mission, (mission,), "parcat-env-check",
                                              timeout_s, start_method))
    except (AttributeError, TypeError, pickle.PicklingError):
        check = check_mission(mission)
    except (SetupFailedError, ParcatError) as exc:
        return EnvCheck(None, False, f"the check could not run (it {exc})")
    if len(_CHECKED) >= _MAX_CHECKED:
        del _CHECKED[next(iter(_CHECKED))]
    _CHECKED[mission] = check
    return check


def _play(env: Any, steps: int) -> list[bytes]:
    if is_turn_based(env):
        return _play_turns(env, steps)
    obs, _ = env.reset(seed=PROBE_SEED)
    trace = [_digest(obs)]
    for step in range(steps):
        if not env.agents:
            break
        actions = {}
        for index, agent in enumerate(env.agents):
            space = env.action_space(agent)
            space.seed(PROBE_SEED + 1000 * step + index)
            actions[agent] = space.sample()
        obs, rewards, _, _, _ = env.step(actions)
        trace += [_digest(obs), _digest(rewards)]
    return trace


def _play_turns(env: Any, moves: int) -> list[bytes]:
    env.reset(seed=PROBE_SEED)
    trace: list[bytes] = []
    for move, agent in enumerate(env.agent_iter(moves)):
        obs, reward, terminated, truncated, _ = env.last()
        trace += [_digest(obs), _digest(reward)]
        env.step(None if terminated or truncated
                 else sample_legal(env.action_space(agent), obs, PROBE_SEED + move))
    return trace


def _digest(value: Any) -> bytes:
    """Bytes that are equal exactly when two observations (or rewards) are."""
    if isinstance(value, dict):
        return b"{" + b",".join(repr(k).encode() + b":" + _digest(value[k])
                               for k in sorted(value, key=repr)) + b"}"
    if isinstance(value, list | tuple):
        return b"(" + b",".join(_digest(v) for v in value) + b")"
    array = np.asarray(value)
    if array.dtype == object:
        return repr(value).encode()
    return str(array.dtype).encode() + str(array.shape).encode() + array.tobytes()
