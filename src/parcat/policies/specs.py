"""Policy specs from the command line, the built-in registry, and building policies.

A spec is ``TARGET[,KEY=VALUE...][@WEIGHT]``: a built-in name, ``module:Class``, a
checkpoint directory or ``http://HOST:PORT[/AGENT]`` (a policy ``parcat serve`` serves);
keyword arguments as YAML scalars; the policy's share of the agents.
Examples: ``greedy``, ``mlp,width=256,depth=3@2``, ``my_pkg.agents:Chaser,speed=0.5``.
"""

from __future__ import annotations

import inspect
import math
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parcat.core.errors import CheckpointError, PolicyError, clip, did_you_mean
from parcat.core.imports import import_reference, is_reference, require_trusted
from parcat.core.settings import parse_settings
from parcat.envs.missions import Mission
from parcat.ipc.process import SetupFailedError, call_in_worker, in_worker, mark_acting
from parcat.policies import checkpoint
from parcat.policies.base import AgentSpec, Policy, close_policies
from parcat.policies.remote import is_url

BUILTINS: dict[str, tuple[str | None, str]] = {
    "random": ("parcat.policies.builtin:RandomPolicy", "uniformly random actions (seeded)"),
    "noop": ("parcat.policies.builtin:NoopPolicy", "always the neutral action"),
    "greedy": (None, "the mission's scripted heuristic"),
    "mlp": (
        "parcat.policies.builtin:MLPPolicy",
        "numpy MLP with random weights (width=64, depth=2, init_seed=0); CPU-heavy reference",
    ),
}

REMOTE_POLICY = "parcat.policies.remote:RemotePolicy"
"""The client of a served policy (``-p http://...``)."""

BUILTIN_CLASSES = frozenset(reference for reference, _ in BUILTINS.values() if reference)
"""The policy classes a checkpoint may name without ``--trust-code``: parcat's own."""


@dataclass(frozen=True)
class PolicySpec:
    """A parsed ``-p`` value."""

    target: str
    """Built-in name, ``module:Class`` or checkpoint path."""
    kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Keyword arguments for the policy's constructor."""
    weight: float = 1.0
    """Share of the agents this policy plays."""
    trust_code: bool = False
    """A checkpoint may name a policy class outside :data:`BUILTIN_CLASSES`."""

    @property
    def name(self) -> str:
        """How results name this policy: the spec without its weight."""
        args = "".join(f",{k}={v}" for k, v in self.kwargs.items())
        return f"{self.target}{args}"


def parse_policy_spec(text: str, trust_code: bool = False) -> PolicySpec:
    """Parse ``TARGET[,KEY=VALUE...][@WEIGHT]`` (``PolicyError`` if malformed)."""
    body, at, weight_text = text.rpartition("@") if "@" in text else (text, "", "")
    weight = 1.0
    if at:
        try:
            weight = float(weight_text)
        except ValueError:
            weight = -1.0
        if not weight > 0 or weight == float("inf"):
            raise PolicyError(
                f"policy '{text}': weight after '@' must be a positive number, got '{weight_text}'"
            )
    target, *pairs = body.split(",")
    if not target.strip():
        raise PolicyError(f"policy '{text}': expected NAME[,KEY=VALUE...][@WEIGHT]")

    def malformed(pair: str) -> PolicyError:
        return PolicyError(f"policy '{text}': expected KEY=VALUE after ',', got '{pair}'")

    return PolicySpec(target.strip(), parse_settings(pairs, malformed), weight, trust_code)


def check_weights(specs: Sequence[PolicySpec]) -> None:
    """Refuse (``PolicyError``) weights whose sum overflows: no shares can be computed."""
    if not math.isfinite(sum(spec.weight for spec in specs)):
        shown = ", ".join(f"@{spec.weight:g}" for spec in specs[:4])
        raise PolicyError(f"the policies' weights ({shown}) add up to more than a number can "
                          "hold; weights are shares: give smaller ones, e.g. @2 and @1 for "
                          "two thirds and one third")


def foreign_code(spec: PolicySpec, mission: Mission) -> str | None:
    """The reference of the code from outside parcat that ``spec`` runs, if any (such
    code may exit, crash or hang its process, so runs isolate it). A served policy is
    none: parcat's own client plays it, and the served code runs in the server's process."""
    target = spec.target
    if is_url(target):
        return None
    if target in BUILTINS:
        reference = BUILTINS[target][0] or mission.heuristic or ""
    elif Path(target).is_dir():
        reference = _checkpoint_policy(Path(target))
    else:
        reference = target
    return None if reference.startswith("parcat.") else reference


def has_batch_form(spec: PolicySpec) -> bool:
    """Whether ``spec`` builds one of parcat's own policies that can act for many agents in
    one call (``stateless = True`` and ``step_batch``: the ``mlp``, ``noop``, and checkpoints
    of the mlp). Code from outside parcat is not imported here to find out: it may only be
    built in a worker."""
    target = spec.target
    if is_url(target):  # parcat's own client: a stateless served policy batches
        return True
    reference = BUILTINS[target][0] if target in BUILTINS else (
        _checkpoint_policy(Path(target)) if Path(target).is_dir() else None)
    if not reference or not reference.startswith("parcat."):
        return False
    policy_class = import_reference(reference)
    return bool(getattr(policy_class, "stateless", False)) and \
        callable(getattr(policy_class, "step_batch", None))


def _checkpoint_policy(path: Path) -> str:
    """The policy class a checkpoint directory names ("" if it cannot be read)."""
    try:
        manifest = checkpoint.read_manifest(path)
        if manifest["format"] == checkpoint.RUN_FORMAT:
            path = path / next(iter(manifest["agents"].values()))
        return str(checkpoint.read_manifest(path).get("policy", ""))
    except (CheckpointError, KeyError, StopIteration, TypeError, AttributeError):
        return ""


def check_builds(builds: Sequence[tuple[PolicySpec, Mission, AgentSpec]]) -> None:
    """Build (and close) each policy once, so a bad spec fails before any run; in a worker
    process when any is code from outside parcat, where an exit, crash or hang is one line.

    Raises:
        PolicyError: a spec is unknown or bad, or a constructor raised (exit code 2).
        WorkerError: a constructor ended its process, crashed or hung (exit code 1).
    """
    if in_worker() or not any(foreign_code(spec, mission) for spec, mission, _ in builds):
        _build_each(builds)
        return
    try:
        call_in_worker(_build_each, (list(builds),), "parcat-policy-setup")
    except (TypeError, AttributeError, pickle.PicklingError):
        _build_each(builds)  # built in Python and cannot reach a worker: as inline runs do
    except SetupFailedError as exc:
        spec, mission, agent = builds[exc.acting or 0]
        raise exc.as_error(
            f"policy '{clip(spec.name, 200)}' for agent '{clip(str(agent.agent_id))}' of "
            f"mission '{mission.name}'", "while being built", PolicyError) from None


def _build_each(builds: Sequence[tuple[PolicySpec, Mission, AgentSpec]]) -> None:
    for index, (spec, mission, agent) in enumerate(builds):
        mark_acting(index)
        close_policies([make_policy(spec, mission, agent)])
    mark_acting(None)


def make_policy(spec: PolicySpec, mission: Mission, agent: AgentSpec) -> Policy:
    """Build the policy that ``spec`` names for one agent of ``mission`` (else ``PolicyError``)."""
    target = spec.target
    if is_url(target):
        return _construct(REMOTE_POLICY, spec, agent, {"url": target, **spec.kwargs})
    if target in BUILTINS:
        reference = BUILTINS[target][0] or mission.heuristic
        if reference is None:
            raise PolicyError(f"mission '{mission.name}' has no heuristic, so 'greedy' is unknown")
        return _construct(reference, spec, agent, dict(spec.kwargs))
    if Path(target).is_dir():
        return _from_checkpoint(Path(target), spec, agent)
    if is_reference(target):
        return _construct(target, spec, agent, dict(spec.kwargs))
    raise PolicyError(f"policy '{target}' is not a built-in, a module:Class or a checkpoint "
                      f"directory{did_you_mean(target, BUILTINS)}; built-ins: "
                      f"{', '.join(BUILTINS)}")


def _construct(reference: str, spec: PolicySpec, agent: AgentSpec, kwargs: dict[str, Any]) -> Any:
    try:
        factory = import_reference(reference)
    except Exception as exc:
        raise PolicyError(f"policy '{clip(spec.target)}': cannot import '{clip(reference)}': "
                          f"{clip(str(exc), 200)}") from exc
    if not callable(factory):
        raise PolicyError(f"policy '{spec.target}': '{reference}' is not callable")
    takes_spec = _takes_spec(factory)
    _check_keywords(spec, factory, takes_spec, kwargs)
    try:
        policy = factory(agent, **kwargs) if takes_spec else factory(**kwargs)
    except PolicyError:
        raise
    except Exception as exc:
        raise PolicyError(f"policy '{clip(spec.name, 200)}': {type(exc).__name__}: "
                          f"{clip(str(exc), 200)}") from exc
    for method in ("reset", "step"):
        if not callable(getattr(policy, method, None)):
            raise PolicyError(
                f"policy '{spec.name}': {type(policy).__name__} has no {method}() method; "
                "a policy needs reset(seed) and step(obs)"
            )
    return policy


def _check_keywords(spec: PolicySpec, factory: Any, takes_spec: bool,
                    kwargs: Mapping[str, Any]) -> None:
    """Refuse a keyword the policy's constructor does not take, naming the ones it does."""
    try:
        params = list(inspect.signature(factory).parameters.values())[int(takes_spec):]
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    valid = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in kwargs:
        if key not in valid:
            takes = f"'s keywords: {', '.join(valid)}" if valid else " takes no keywords"
            raise PolicyError(f"policy '{clip(spec.name, 200)}': no keyword '{clip(key)}'"
                              f"{did_you_mean(key, valid)}; {clip(spec.target)}{takes}")


def _takes_spec(factory: Any) -> bool:
    """Whether the agent spec goes to a first positional parameter without a default."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return True
    if not params:
        return False
    first = params[0]
    return first.kind == first.VAR_POSITIONAL or (
        first.kind in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD)
        and first.default is first.empty)


def _from_checkpoint(path: Path, spec: PolicySpec, agent: AgentSpec) -> Any:
    try:
        manifest = checkpoint.read_manifest(path)
        if manifest["format"] == checkpoint.RUN_FORMAT:
            dirs: dict[str, str] = manifest["agents"]
            key = str(agent.agent_id)
            if key not in dirs:
                raise CheckpointError(
                    f"checkpoint '{path}' has no agent '{key}'; it has: {', '.join(dirs)}"
                )
            path = path / dirs[key]
            saved = checkpoint.load_policy(path, key)
            group = dirs[key]
        else:
            saved, group = checkpoint.load_policy(path), ""
    except CheckpointError as exc:
        raise PolicyError(str(exc)) from exc
    require_trusted(saved.policy, BUILTIN_CLASSES, spec.trust_code, f"checkpoint '{path}'")
    policy = _construct(saved.policy, spec, agent, {**saved.kwargs, **spec.kwargs})
    load = getattr(policy, "load_state_dict", None)
    if load is None:
        raise PolicyError(f"checkpoint '{path}': {saved.policy} has no load_state_dict()")
    try:
        load(dict(saved.arrays))
    except PolicyError:
        raise
    except Exception as exc:  # arrays that do not fit the class, or the class's own bug
        raise PolicyError(
            f"checkpoint '{path}': {saved.policy}.load_state_dict() refused its arrays "
            f"({type(exc).__name__}); the checkpoint does not fit this policy class"
        ) from exc
    if group:  # a run's agents have weights of their own: only agents of one folder share
        policy.batch_group = group
    return policy
