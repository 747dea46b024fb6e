"""``parcat sim`` configuration: ``configs/sim.yaml`` and the files it names.

```yaml
environment:
  mission: evade            # a mission name or a mission YAML path
  config: sim/evade.yaml    # optional: mission parameter overrides (paths: from this file)
  params: {pursuers: 2}     # optional: more overrides (win over the file's)
  period: 0.01              # seconds per environment step (required)
agents:                     # each entry runs in its own process in parallel mode
  - agent: evader           # optional: the env's agent id (default: the next unlisted one)
    policy: greedy          # a policy spec: built-in, module:Class, checkpoint directory
    args: {wall_weight: 1}  # optional: keyword arguments added to the spec
    cycle_time: 0.03        # seconds between two actions (required)
  - config: sim/slow.yaml   # keys from a file; keys written here win over the file's
default_policy: greedy      # plays, in lockstep inside the env's process, every agent not listed
iters: 500                  # environment steps
render: false               # live terminal line and an SVG of the trajectories
debug: {render_traj: false, log_agent_state: false}
seed: 0
output: runs/sim            # record.npz + summary.json (+ trajectories.svg); null: no files
```

Everything is checked here, before any process starts (sizes: :mod:`parcat.sim.limits`); an
error is one line naming the file and the key, never echoing what a file holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError, MissionError, PolicyError, WorkerError, did_you_mean
from parcat.envs.missions import Mission, load_mission
from parcat.policies.base import AgentSpec
from parcat.policies.specs import PolicySpec, check_builds, parse_policy_spec
from parcat.sim import limits
from parcat.sim.checks import (
    COMMAND_LINE,
    check_bool,
    check_int,
    check_keys,
    check_parameters,
    check_seconds,
    describe,
    read_mapping,
    redact,
    resolve_file,
    show_path,
    spec_parts,
)

TOP_KEYS = ("environment", "agents", "default_policy", "iters", "render", "debug", "seed",
            "output")
ENV_KEYS = ("mission", "config", "params", "period")
AGENT_KEYS = ("agent", "policy", "args", "cycle_time", "config")
DEBUG_KEYS = ("render_traj", "log_agent_state")
FLAG_KEYS = ("iters", "seed", "render", "output")
"""The top-level keys a flag of the same name overrides (``--output ''``: no files)."""
DEFAULT_ITERS = 1000
DEFAULT_OUTPUT = "runs/sim"


@dataclass(frozen=True)
class AgentConfig:
    """One agent of the simulation and how it acts."""

    spec: AgentSpec
    policy: PolicySpec
    cycle_time: float
    """Seconds between the starts of two of its action computations."""
    lockstep: bool = False
    """Computed in the environment's process every step (agents the config does not list)."""
    source: str = ""
    """The file that configured it."""

    @property
    def agent_id(self) -> Any:
        """The environment's id of the agent."""
        return self.spec.agent_id

    @property
    def cycle_ns(self) -> int:
        """``cycle_time`` in integer nanoseconds (schedules are computed on integers)."""
        return max(1, round(self.cycle_time * 1e9))


@dataclass(frozen=True)
class DebugConfig:
    """Extra output for debugging a run."""

    render_traj: bool = False
    """Write ``trajectories.svg`` (also written when ``render`` is on)."""
    log_agent_state: bool = False
    """Record every agent's observation at every step (``obs_<i>`` arrays in the record)."""


@dataclass(frozen=True)
class SimConfig:
    """A validated simulation: the mission, its agents and the run's length and outputs."""

    mission: Mission
    """The mission, with the environment config's overrides applied."""
    period: float
    """Seconds per environment step."""
    agents: tuple[AgentConfig, ...]
    """Every agent of the environment, in ``possible_agents`` order."""
    iters: int = DEFAULT_ITERS
    """Environment steps to run (episodes that end are reset, seeded, and continued)."""
    seed: int = 0
    render: bool = False
    """Live terminal line during the run (CLI) and ``trajectories.svg`` at the end."""
    debug: DebugConfig = DebugConfig()
    output: str | None = DEFAULT_OUTPUT
    """Folder for ``record.npz``, ``summary.json`` and the SVG; ``None`` writes nothing."""
    source: str = ""
    """The YAML file this came from."""

    @property
    def period_ns(self) -> int:
        """``period`` in integer nanoseconds."""
        return max(1, round(self.period * 1e9))

    @property
    def process_agents(self) -> tuple[AgentConfig, ...]:
        """The agents that run in their own process in parallel mode."""
        return tuple(a for a in self.agents if not a.lockstep)


def load_sim_config(path: str | Path, overrides: Mapping[str, Any] | None = None,
                    trust_code: bool = False, flags: Mapping[str, Any] | None = None
                    ) -> SimConfig:
    """Read and validate a sim YAML file and every file it names (``overrides``: ``--set``,
    applied last; ``trust_code``: a checkpoint may name a policy class from outside parcat;
    ``flags``: the flags given among :data:`FLAG_KEYS`, on top of the file's keys).

    Raises:
        ConfigError: a missing or malformed file, an unknown key, a bad value (named).
    """
    return parse_sim_config(read_mapping(Path(path), "sim config"), source=str(path),
                            base_dir=Path(path).parent, overrides=overrides,
                            trust_code=trust_code, flags=flags)


def parse_sim_config(data: Mapping[str, Any], source: str = "sim config",
                     base_dir: str | Path = ".", overrides: Mapping[str, Any] | None = None,
                     trust_code: bool = False, flags: Mapping[str, Any] | None = None
                     ) -> SimConfig:
    """Validate a sim configuration given as the YAML file's mapping (as
    :func:`load_sim_config`; ``source`` names it in errors, relative ``config`` paths start
    from ``base_dir``).

    Raises:
        ConfigError: an unknown key, a missing required key or a bad value (named).
    """
    base = Path(base_dir)
    check_keys(data, TOP_KEYS, source, "")
    mission, period = _environment(data, source, base, overrides or {})
    agents = _agents(data, mission, period, source, base, trust_code)
    debug = data.get("debug") or {}
    if not isinstance(debug, Mapping):
        raise ConfigError(f"{source}: 'debug' must be a mapping with keys {', '.join(DEBUG_KEYS)}")
    check_keys(debug, DEBUG_KEYS, source, "debug.")
    given = {k: (v, COMMAND_LINE, f"--{k}") for k, v in (flags or {}).items()}

    def value(key: str, default: Any) -> tuple[Any, str, str]:  # a flag given wins
        return given.get(key) or (data.get(key, default), source, key)

    output, where, _ = value("output", DEFAULT_OUTPUT)
    if output is not None and not isinstance(output, str):
        raise ConfigError(f"{where}: 'output' must be a folder path or null, "
                          f"got {describe(output)}")
    iters, seed = value("iters", DEFAULT_ITERS), value("seed", 0)
    config = SimConfig(
        mission=mission, period=period, agents=agents,
        iters=check_int(*iters, 1, limits.MAX_ITERS),
        seed=check_int(*seed, 0, limits.MAX_SEED), render=check_bool(*value("render", False)),
        debug=DebugConfig(*(check_bool(debug.get(key, False), source, f"debug.{key}")
                            for key in DEBUG_KEYS)),
        output=output or None, source=source,
    )
    limits.check_size(config, iters[1], "--iters" if "iters" in given else "'iters'")
    return config


def _environment(data: Mapping[str, Any], source: str, base: Path,
                 overrides: Mapping[str, Any]) -> tuple[Mission, float]:
    env = data.get("environment")
    if env is None:
        raise ConfigError(
            f"{source}: missing key 'environment' (a mapping with 'mission' and 'period')")
    if not isinstance(env, Mapping):
        raise ConfigError(f"{source}: 'environment' must be a mapping with 'mission' and 'period'")
    check_keys(env, ENV_KEYS, source, "environment.")
    name = env.get("mission")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{source}: 'environment' has no 'mission' (a mission name or YAML "
                          "path)")
    if "period" not in env:
        raise ConfigError(f"{source}: 'environment' has no 'period' (seconds per environment "
                          "step, e.g. period: 0.01)")
    period = check_seconds(env["period"], source, "environment.period", limits.MIN_SECONDS,
                           limits.MAX_SECONDS)
    params = env.get("params") or {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"{source}: 'environment.params' must be a mapping of parameters")
    local = base / name
    reference = str(local) if name.endswith((".yaml", ".yml")) and local.is_file() else name
    try:
        mission = load_mission(reference)
    except MissionError as exc:
        raise ConfigError(f"{source}: 'environment.mission': {redact(str(exc), [name])}") \
            from exc
    except WorkerError as exc:  # its code ended the process that built it
        raise WorkerError(f"{source}: 'environment.mission': {redact(str(exc), [name])}") \
            from None
    layers: list[tuple[Mapping[str, Any], str]] = []
    if env.get("config") is not None:
        file = resolve_file(env["config"], base, source, "environment.config")
        layers.append((read_mapping(file, "environment config"), show_path(file)))
    layers.append((params, source))
    for layer, where in layers:  # each layer's errors name the file it came from
        check_parameters(layer, (*mission.params, "max_steps"), where, mission.name)
        try:
            mission = mission.with_overrides(layer) if layer else mission
        except MissionError as exc:
            raise ConfigError(f"{where}: {redact(str(exc), [layer])}") from exc
    try:
        return (mission.with_overrides(overrides) if overrides else mission), period
    except MissionError as exc:
        raise ConfigError(f"--set: {exc}") from exc


def _agents(data: Mapping[str, Any], mission: Mission, period: float, source: str,
            base: Path, trust_code: bool) -> tuple[AgentConfig, ...]:
    entries = data.get("agents") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: 'agents' must be a list of agent entries")
    specs = list(mission.agents())
    ids = [s.agent_id for s in specs]
    limits.check_agents(len(ids), len(entries), source, mission.name)
    if len(entries) > len(ids):
        raise ConfigError(f"{source}: {len(entries)} agent entries but mission "
                          f"'{mission.name}' has {len(ids)} agent(s): "
                          f"{', '.join(str(a) for a in ids)}")
    merged = [_merge_entry(e, i, source, base) for i, e in enumerate(entries)]
    chosen = {index: _agent(entry, specs[index], mission, where, trust_code)
              for (entry, where), index in zip(merged, _assign_ids(merged, ids, mission, source),
                                               strict=True)}
    default = _default_policy(data, mission, source, trust_code)
    agents = []
    for index, spec in enumerate(specs):
        if index not in chosen:
            _validate_policy(default, mission, spec, f"{source}: 'default_policy'",
                             spec_parts(str(data.get("default_policy") or "")))
        agents.append(chosen.get(index) or AgentConfig(spec, default, period, lockstep=True,
                                                       source=source))
    return tuple(agents)


def _merge_entry(entry: Any, position: int, source: str,
                 base: Path) -> tuple[dict[str, Any], str]:
    """An agent entry with its config file's keys under it, and the file to name in errors."""
    label = f"agents[{position}]"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{source}: {label} must be a mapping with keys policy, cycle_time "
                          "(and agent, args, config)")
    check_keys(entry, AGENT_KEYS, source, f"{label}.")
    if entry.get("config") is None:
        return dict(entry), source
    file = resolve_file(entry["config"], base, source, f"{label}.config")
    from_file = read_mapping(file, "agent config")
    check_keys(from_file, AGENT_KEYS[:-1], show_path(file), "")
    return {**from_file, **{k: v for k, v in entry.items() if k != "config"}}, show_path(file)


def _assign_ids(merged: list[tuple[dict[str, Any], str]], ids: list[Any], mission: Mission,
                source: str) -> list[int]:
    """The agent index of every entry: named ones first, the rest in ``possible_agents`` order."""
    names = [str(a) for a in ids]
    indices: list[int | None] = []
    for position, (entry, where) in enumerate(merged):
        if entry.get("agent") is None:
            indices.append(None)
            continue
        wanted = str(entry["agent"])
        if wanted not in names:
            raise ConfigError(f"{where}: 'agents[{position}].agent' is no agent of mission "
                              f"'{mission.name}'{did_you_mean(wanted, names)}; its agents: "
                              f"{', '.join(names)}")
        if names.index(wanted) in indices:
            raise ConfigError(f"{where}: agent '{wanted}' is listed twice")
        indices.append(names.index(wanted))
    # fewer entries than agents (checked before), so every unnamed one finds a free agent
    free = iter([i for i in range(len(ids)) if i not in indices])
    return [next(free) if i is None else i for i in indices]


def _agent(entry: Mapping[str, Any], spec: AgentSpec, mission: Mission,
           where: str, trust_code: bool) -> AgentConfig:
    name = str(spec.agent_id)
    if "cycle_time" not in entry:
        raise ConfigError(f"{where}: agent '{name}' has no 'cycle_time' (seconds between its "
                          "actions, e.g. cycle_time: 0.05)")
    cycle_time = check_seconds(entry["cycle_time"], where, f"agent '{name}': 'cycle_time'",
                               limits.MIN_SECONDS, limits.MAX_SECONDS)
    text = entry.get("policy")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: agent '{name}' has no 'policy' (a built-in name, "
                          "module:Class or checkpoint directory)")
    args = entry.get("args") or {}
    if not isinstance(args, Mapping):
        raise ConfigError(f"{where}: agent '{name}': 'args' must be a mapping of keyword arguments")
    label = f"{where}: agent '{name}'"
    secrets = [*spec_parts(text), args]
    try:
        policy = parse_policy_spec(text, trust_code)
    except PolicyError as exc:
        raise ConfigError(f"{label}: {redact(str(exc), secrets)}") from exc
    policy = replace(policy, kwargs={**policy.kwargs, **args}, weight=1.0)
    _validate_policy(policy, mission, spec, label, secrets)
    return AgentConfig(spec, policy, cycle_time, source=where)


def _default_policy(data: Mapping[str, Any], mission: Mission, source: str,
                    trust_code: bool) -> PolicySpec:
    text = data.get("default_policy")
    if text is None:
        text = "greedy" if mission.heuristic else "noop"
    if not isinstance(text, str):
        raise ConfigError(f"{source}: 'default_policy' must be a policy spec, "
                          f"got {describe(text)}")
    try:
        return replace(parse_policy_spec(text, trust_code), weight=1.0)
    except PolicyError as exc:
        raise ConfigError(f"{source}: 'default_policy': {redact(str(exc), spec_parts(text))}") \
            from exc


def _validate_policy(policy: PolicySpec, mission: Mission, spec: AgentSpec, label: str,
                     secrets: list[Any]) -> None:
    """Build the policy once so a bad spec fails before any process starts (``secrets``:
    the file's values its message must not show)."""
    try:  # in a worker when the policy is from outside parcat
        check_builds([(policy, mission, spec)])
    except PolicyError as exc:
        raise ConfigError(f"{label}: {redact(str(exc), secrets)}") from exc
    except WorkerError as exc:
        raise WorkerError(f"{label}: {redact(str(exc), secrets)}") from None
