"""Missions: YAML files naming an environment factory, its parameters and a heuristic, found
by name in ``./missions/`` and then among the built-in ones, or given as a path."""

from __future__ import annotations

import contextlib
import functools
import pickle
import re
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium

from parcat.core.errors import MissionError, NoteWarning, brief, clip, did_you_mean
from parcat.core.imports import import_module, import_reference
from parcat.core.limits import MAX_EPISODE_STEPS, MAX_NAME_LENGTH, MAX_PATH_LENGTH
from parcat.core.settings import OWN_KEYS, OWN_PREFIX, split_own_settings
from parcat.core.yamlfile import read_yaml_mapping
from parcat.envs.adapters import make_gymnasium_env
from parcat.envs.base import AgentSpec, ParallelEnv
from parcat.envs.turns import is_turn_based
from parcat.ipc.process import SetupFailedError, call_in_worker, in_worker, mark_acting, preload

BUILTIN_DIR = Path(__file__).parents[1] / "missions"
GYMNASIUM_PREFIX = "gymnasium:"
DEFAULT_MAX_STEPS = 1000
_KEYS = {"name", "description", "env", "heuristic", "params", "max_steps", "default_action",
         "fresh_env"}


@dataclass(frozen=True)
class Mission:
    """A validated mission: everything needed to build its environment anywhere."""

    name: str
    """Short name, used in results and to derive seeds."""
    env: str
    """Environment factory: ``module:callable`` or ``gymnasium:ENV_ID``."""
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Keyword arguments of the factory (after ``--set`` overrides)."""
    description: str = ""
    heuristic: str | None = None
    """``module:Class`` of the mission's scripted policy (the built-in ``greedy``)."""
    max_steps: int = DEFAULT_MAX_STEPS
    """Step limit that ``run_episode`` enforces even if the environment never ends."""
    source: str = ""
    """Where the mission was loaded from."""
    fresh_env: bool | None = None
    """A new environment every episode (``True``), one reused (``False``), or ``None``: a new
    one when the start-of-run check saw reset carry state from one episode into the next."""

    @property
    def key(self) -> int:
        """A stable number for the name, to derive seeds from."""
        return zlib.crc32(self.name.encode())

    def make_env(self) -> ParallelEnv:
        """Build a fresh environment for this mission."""
        return make_env(self.env, self.params, self.name)

    def agents(self) -> tuple[AgentSpec, ...]:
        """Every agent's spec, read once from a throwaway environment (cached per mission)."""
        return _facts_of(self)[0]

    @property
    def turn_based(self) -> bool:
        """Whether the environment is a turn-based (PettingZoo AEC) one."""
        return _facts_of(self)[1]

    @contextlib.contextmanager
    def open_env(self) -> Iterator[ParallelEnv]:
        """A fresh environment, closed when the block ends."""
        env = self.make_env()
        try:
            yield env
        finally:
            close_env(env)

    def agent_specs(self, env: ParallelEnv) -> list[AgentSpec]:
        """What a policy is told about each agent of ``env``, in ``possible_agents`` order."""
        return [AgentSpec(mission=self.name, agent_id=agent_id, agent_index=index,
                          observation_space=env.observation_space(agent_id),
                          action_space=env.action_space(agent_id), params=dict(self.params))
                for index, agent_id in enumerate(env.possible_agents)]

    def with_overrides(self, overrides: Mapping[str, Any]) -> Mission:
        """Return this mission with some parameters replaced (validated); ``mission.KEY``
        sets parcat's own ``max_steps`` or ``fresh_env`` rather than a parameter."""
        overrides, own = split_own_settings(overrides)
        unknown = sorted(set(overrides) - set(self.params) - {"max_steps"})
        if unknown:
            known = sorted(set(self.params) | {"max_steps"})
            raise MissionError(f"mission '{self.name}' has no parameter '{clip(unknown[0])}'"
                               f"{did_you_mean(unknown[0], known)}; known: {', '.join(known)}")
        params = {**self.params, **overrides}
        max_steps = own.get("max_steps", params.get("max_steps", self.max_steps))
        _check_step_limit(f"mission '{self.name}'", "max_steps", max_steps)
        if "max_steps" not in self.params:
            params.pop("max_steps", None)
        mission = replace(self, params=params, max_steps=max_steps,
                          fresh_env=own.get("fresh_env", self.fresh_env))
        validate_env(mission)
        return mission


@functools.cache
def builtin_code() -> tuple[frozenset[str], frozenset[str]]:
    """The env factories and heuristics of the built-in missions: the only code a file (a
    replay, a run's manifest) may name without the user's leave (``require_trusted``)."""
    missions = [read_mission(path) for path in sorted(BUILTIN_DIR.glob("*.yaml"))]
    return (frozenset(m.env for m in missions),
            frozenset(m.heuristic for m in missions if m.heuristic))


def make_env(reference: str, params: Mapping[str, Any], mission_name: str = "?") -> ParallelEnv:
    """Build an environment from a factory reference and parameters; a factory that cannot
    be found, fails or returns no environment is a :class:`MissionError`."""
    module, _, target = reference.partition(":")
    try:
        if module == "gymnasium":
            return make_gymnasium_env(target, **params)
        factory = import_reference(reference)
        if module.startswith("parcat."):
            preload(module)  # parcat's own: workers fork with it imported
    except MissionError:
        raise
    except (ImportError, AttributeError, ValueError) as exc:
        raise MissionError(f"mission '{mission_name}': cannot load env '{clip(reference)}': "
                           f"{clip(str(exc), 200)}") from exc
    except Exception as exc:
        raise MissionError(f"mission '{mission_name}': env '{clip(reference)}' failed: "
                           f"{clip(str(exc), 200)}") from exc
    if not callable(factory):
        raise MissionError(f"mission '{mission_name}': env '{clip(reference)}' is a "
                           f"{type(factory).__name__}, not an environment factory")
    try:
        env: ParallelEnv = factory(**params)
    except MissionError:
        raise
    except TypeError as exc:
        own = [key for key in OWN_KEYS if key in params and repr(key) in str(exc)]
        hint = f" (parcat's own {own[0]} is --set {OWN_PREFIX}{own[0]}=VALUE)" if own else ""
        raise MissionError(f"mission '{mission_name}': env '{clip(reference)}' rejected: "
                           f"{clip(str(exc), 200)}{hint}") from exc
    except Exception as exc:  # whatever the factory raises is the mission's problem
        raise MissionError(f"mission '{mission_name}': env '{clip(reference)}' raised "
                           f"{type(exc).__name__}: {clip(str(exc), 200)} while being built"
                           ) from exc
    check_is_env(env, f"mission '{mission_name}': env '{clip(reference)}'")
    return env


def check_is_env(env: Any, label: str) -> None:
    """Raise a :class:`MissionError` naming ``label`` unless ``env`` has the environment API
    (a turn-based game's too) and a non-empty ``possible_agents``."""
    methods = ["reset", "observation_space", "action_space"]
    methods += ["agent_iter", "last", "step"] if is_turn_based(env) else ["step"]
    missing = [m for m in methods if not callable(getattr(env, m, None))]
    try:
        agents = env.possible_agents
        count = len(agents) if isinstance(agents, list | tuple) else None
    except Exception:  # a property that raises: the same as none
        count = None
    if missing or not count:
        what = (f"no {missing[0]}() method" if missing else
                "no agents in possible_agents" if count == 0 else "no possible_agents list")
        raise MissionError(f"{label} returned a '{clip(type(env).__name__)}' object with "
                           f"{what}, not an environment; a factory must return a "
                           "PettingZoo-style parallel (or turn-based) environment")


def close_env(env: Any) -> None:
    """Close an environment if it can be closed (the API makes ``close`` optional)."""
    close = getattr(env, "close", None)
    if close is not None:
        close()


Facts = tuple[tuple[AgentSpec, ...], bool, int | None]
"""A mission's agents, whether turn-based, and the episode length the env keeps itself to."""
_FACTS: dict[Mission, Facts] = {}
_MAX_FACTS = 64


def _facts_of(mission: Mission) -> Facts:
    return _FACTS.get(mission) or _remember(mission, _read_facts(mission))


def _remember(mission: Mission, facts: Facts) -> Facts:
    if len(_FACTS) >= _MAX_FACTS:
        del _FACTS[next(iter(_FACTS))]
    _FACTS[mission] = facts
    return facts


def _read_facts(mission: Mission) -> Facts:
    with mission.open_env() as env:
        try:
            env.reset(seed=0)
        except Exception as exc:  # whatever the env raises is the mission's problem
            raise MissionError(f"mission '{clip(mission.name)}': env '{clip(mission.env)}' "
                               f"raised {type(exc).__name__}: {clip(str(exc), 200)} while "
                               "being reset") from exc
        if not env.possible_agents:
            raise MissionError(f"mission '{mission.name}': the environment has no agents")
        facts = tuple(mission.agent_specs(env)), is_turn_based(env), _own_limit(env)
        mark_acting(_CLOSING)  # close() runs as the block ends: a failure names it
    mark_acting(None)
    return facts


def _own_limit(env: Any) -> int | None:
    """The step limit a parallel env keeps itself to (PettingZoo's ``max_cycles``), if any:
    a turn-based game's counts rounds of every agent, not moves."""
    limit = getattr(getattr(env, "unwrapped", env), "max_cycles", None)
    if is_turn_based(env) or not isinstance(limit, int) or isinstance(limit, bool):
        return None
    return min(max(limit, 1), MAX_EPISODE_STEPS)


_CLOSING = 0  # what _read_facts marks acting (in a worker) while the env is closed


def agent_role(agent_id: str) -> str:
    """An agent's role: its id without a trailing number (``pursuer`` for ``pursuer_2``)."""
    return re.sub(r"[_\-]?\d+$", "", agent_id)


def sides(agent_ids: Iterable[str]) -> dict[str, list[str]]:
    """The agents of each role, by role, where the agents have several (evade's
    ``pursuer`` and ``evader``); empty where they share one (``player_0``, ``player_1``)."""
    found: dict[str, list[str]] = {}
    for agent in agent_ids:
        found.setdefault(agent_role(agent), []).append(agent)
    return found if len(found) > 1 else {}


def is_foreign(mission: Mission) -> bool:
    """Whether the mission's environment is code from outside parcat (which may exit, crash
    or hang its process)."""
    return not mission.env.startswith("parcat.")


def validate_env(mission: Mission) -> None:
    """Build the mission's environment once so bad parameters fail before any run.

    One from outside parcat is built and reset in a worker process, so its exit, crash or
    hang is one line here; what it read is kept for :meth:`Mission.agents`.

    Raises:
        MissionError: bad parameters, or the environment's code raised (exit code 2).
        WorkerError: its code ended its process, crashed or hung (exit code 1).
    """
    if not is_foreign(mission) or in_worker():
        _facts_of(mission)
        return
    try:
        facts = call_in_worker(_read_facts, (mission,), "parcat-env-setup")
    except (TypeError, AttributeError, pickle.PicklingError):
        _facts_of(mission)  # built in Python and cannot reach a worker: as inline runs do
        return
    except SetupFailedError as exc:
        named = "" if mission.env == mission.name else f" (env '{clip(mission.env)}')"
        when = "while being closed" if exc.acting == _CLOSING else "while being built and reset"
        raise exc.as_error(f"mission '{clip(mission.name)}'{named}", when, MissionError) from None
    _remember(mission, facts)


def mission_dirs() -> list[Path]:
    """Folders searched for missions by name, first match wins."""
    unique: list[Path] = []
    for d in (Path.cwd() / "missions", BUILTIN_DIR):
        if d.is_dir() and all(d.resolve() != u.resolve() for u in unique):
            unique.append(d)
    return unique


def mission_files() -> dict[str, Path]:
    """Every mission reachable by name, mapped to its file."""
    return {path.stem: path for d in reversed(mission_dirs()) for path in d.glob("*.yaml")}


def shadows_builtin(path: Path) -> bool:
    """Whether a mission file found by name is a ``./missions/`` one hiding a built-in one."""
    builtin = BUILTIN_DIR / path.name
    return builtin.exists() and path.parent.resolve() != BUILTIN_DIR.resolve()


def shadow_note(name: str, path: Path) -> str:
    """The note shown when ``./missions/`` has a file of a built-in mission's name."""
    shown = str(path)
    with contextlib.suppress(ValueError):
        shown = f"./{path.relative_to(Path.cwd())}"
    return f"mission '{clip(name)}' is {shown}, not the built-in one"


def list_missions(problems: list[str] | None = None) -> list[Mission]:
    """Load every mission reachable by name, sorted by name; with ``problems``, a file that
    cannot be read is left out and its message appended there (else raised)."""
    missions = []
    for _, path in sorted(mission_files().items()):
        try:
            missions.append(read_mission(path))
        except MissionError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
    return missions


def load_mission(name_or_path: str, overrides: Mapping[str, Any] | None = None,
                 check_code: Callable[[str], None] | None = None) -> Mission:
    """Find a mission by name or YAML path, apply ``--set`` overrides and validate it.

    Args:
        name_or_path: A mission name, YAML path, ``gymnasium:ID``, ``module:callable`` or
            module path.
        check_code: Called with every code reference the mission would import, before it
            is imported; raises to refuse it (``require_trusted``).

    Raises:
        MissionError: unknown name, unreadable or malformed file, bad parameters.
    """
    check = check_code or (lambda reference: None)
    if isinstance(name_or_path, str) and name_or_path.startswith(GYMNASIUM_PREFIX):
        check(name_or_path)
        return gymnasium_mission(name_or_path, overrides or {})
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or _is_file(name_or_path):
        if not _is_file(name_or_path):
            raise MissionError(f"mission file '{name_or_path}' does not exist")
    else:
        files = mission_files()
        if name_or_path not in files:
            if _FACTORY.fullmatch(name_or_path):
                check(name_or_path)
                return factory_mission(name_or_path, overrides or {})
            raise MissionError(unknown_mission_message(name_or_path, files))
        path = files[name_or_path]
        if shadows_builtin(path):
            warnings.warn(shadow_note(name_or_path, path), NoteWarning, stacklevel=2)
    mission = read_mission(path)
    for reference in (mission.env, mission.heuristic):
        if reference is not None:
            check(reference)
    return mission.with_overrides(overrides or {})


# module:callable, or a dotted module path (pettingzoo.classic.connect_four_v3)
_FACTORY = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*(:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*"
                      r"|\.[A-Za-z_][\w]*)")
MODULE_FACTORIES = ("parallel_env", "env")
"""What a module named as a mission provides, by preference (PettingZoo's names)."""


def factory_mission(name: str, overrides: Mapping[str, Any]) -> Mission:
    """``module:callable`` or a module path (its ``parallel_env``, else ``env``) as a mission
    without heuristic; every ``--set`` key but ``mission.KEY`` goes to the factory. The step
    limit is ``mission.max_steps``, else the env's own (PettingZoo's ``max_cycles``), else
    :data:`DEFAULT_MAX_STEPS`."""
    reference = name
    if ":" not in name:
        try:
            module = import_module(name)
        except ImportError as exc:
            raise MissionError(f"mission '{clip(name)}' is no mission file or name, and no "
                               f"module to import ({clip(str(exc), 200)})") from exc
        found = [f for f in MODULE_FACTORIES if callable(getattr(module, f, None))]
        if not found:
            raise MissionError(f"module '{clip(name)}' has neither parallel_env() nor env(); "
                               "name the factory as 'module:callable'")
        reference = f"{name}:{found[0]}"
    params, own = split_own_settings(overrides)
    mission = _direct_mission(name, reference, params, own, f"environment {reference}",
                              reference)
    facts = _facts_of(mission)
    if "max_steps" in own or facts[2] is None:
        return mission
    limited = replace(mission, max_steps=facts[2])
    _remember(limited, facts)  # the same env: not built again
    return limited


def gymnasium_mission(name: str, overrides: Mapping[str, Any]) -> Mission:
    """``gymnasium:ENV_ID`` as a one-agent mission without heuristic; every ``--set`` key but
    ``max_steps`` goes to ``gymnasium.make``, and the step limit defaults to the registered
    ``max_episode_steps``."""
    env_id = name.removeprefix(GYMNASIUM_PREFIX)
    try:
        spec = gymnasium.spec(env_id)
    except gymnasium.error.Error:
        raise MissionError(f"mission '{clip(name)}': gymnasium has no environment "
                           f"'{clip(env_id)}'; list the registered ids with: python -c "
                           "\"import gymnasium; print(*gymnasium.registry)\"") from None
    params, own = split_own_settings(overrides)
    registered = params.get("max_episode_steps", spec.max_episode_steps)
    own.setdefault("max_steps", params.pop("max_steps", registered or DEFAULT_MAX_STEPS))
    return _direct_mission(name, name, params, own, f"gymnasium environment {env_id}",
                           "gymnasium")


def _direct_mission(name: str, env: str, params: dict[str, Any], own: Mapping[str, Any],
                    description: str, source: str) -> Mission:
    """A mission named on the command line rather than in a file, validated; ``own`` holds
    parcat's own keys (``max_steps``, ``fresh_env``)."""
    max_steps = own.get("max_steps", DEFAULT_MAX_STEPS)
    _check_step_limit(f"mission '{clip(name)}'", "max_steps", max_steps)
    mission = Mission(name=name, env=env, params=params, max_steps=max_steps,
                      description=description, source=source,
                      fresh_env=own.get("fresh_env"))
    validate_env(mission)
    return mission


def _is_file(name_or_path: str) -> bool:
    """Whether a mission argument names a file; one line for what no file can be called."""
    shown = clip(name_or_path)
    if not isinstance(name_or_path, str):
        raise MissionError(f"a mission must be a name or a YAML path, got {brief(name_or_path)}")
    if "\0" in name_or_path:
        raise MissionError(f"mission '{shown}' contains a NUL character; give a mission name "
                           "or a YAML path")
    if len(name_or_path) > MAX_PATH_LENGTH:
        raise MissionError(f"mission '{shown}' is {len(name_or_path):,} characters long; a "
                           f"mission name or path has at most {MAX_PATH_LENGTH:,}")
    try:
        return Path(name_or_path).is_file()
    except OSError as exc:
        raise MissionError(f"mission '{shown}' cannot be a file name: {exc.strerror}; give a "
                           "mission name or a shorter YAML path") from None


def _check_step_limit(where: str, key: str, value: Any) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool)
            and 1 <= value <= MAX_EPISODE_STEPS):
        raise MissionError(f"{where}: {key} must be an integer between 1 and "
                           f"{MAX_EPISODE_STEPS:,}, got {brief(value)}")


def _mission_name(value: Any, path: Path) -> str:
    """The ``name`` key, or the file's stem; printable and at most ``MAX_NAME_LENGTH``."""
    name = str(value or path.stem)
    if len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise MissionError(f"mission file '{path}': 'name' must be printable text of at most "
                           f"{MAX_NAME_LENGTH} characters, got {brief(name)}")
    return name


def unknown_mission_message(name: str, files: Iterable[str]) -> str:
    """The one line shown for an unknown mission name."""
    known = sorted(files)
    hint = did_you_mean(name, known)
    where = ", ".join(str(d) for d in mission_dirs())
    return (f"mission '{clip(name)}' not found in {where}{hint}; known: {', '.join(known)}; "
            "or give a YAML path, gymnasium:ENV_ID, module:callable or a module path")


def read_mission(path: Path) -> Mission:
    """Parse and check one mission YAML file (without building its environment)."""
    data = read_yaml_mapping(path, f"mission file '{path}'", MissionError)
    unknown = sorted(str(key) for key in set(data) - _KEYS)
    if unknown:
        raise MissionError(f"mission file '{path}': unknown key '{clip(unknown[0])}'; valid: "
                           f"{', '.join(sorted(_KEYS))}")
    env = data.get("env")
    if not isinstance(env, str) or ":" not in env:
        raise MissionError(f"mission file '{path}': key 'env' must be 'module:callable' or "
                           f"'gymnasium:ID', got {brief(env)}")
    params = data.get("params") or {}
    if not isinstance(params, dict) or not all(isinstance(key, str) for key in params):
        raise MissionError(f"mission file '{path}': key 'params' must be a mapping of "
                           "parameter names to values")
    max_steps = params.get("max_steps", data.get("max_steps", DEFAULT_MAX_STEPS))
    _check_step_limit(f"mission file '{path}'", "'max_steps'", max_steps)
    fresh_env = data.get("fresh_env")
    if fresh_env is not None and not isinstance(fresh_env, bool):
        raise MissionError(f"mission file '{path}': 'fresh_env' must be true or false, "
                           f"got {brief(fresh_env)}")
    return Mission(name=_mission_name(data.get("name"), path), env=env, params=params,
                   description=str(data.get("description", "")), heuristic=data.get("heuristic"),
                   max_steps=max_steps, source=str(path), fresh_env=fresh_env)

