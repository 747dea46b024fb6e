"""``KEY=VALUE`` settings from the command line, parsed one way everywhere.

``--set agents=8`` (eval, plan, train, sim) and a policy spec's ``mlp,width=256`` both read a
value as a YAML scalar: ``8`` is an int, ``0.5`` a float, ``true`` a bool, ``[1, 2]`` a list,
and text that is not valid YAML stays text; ``1e-4`` is a float, as in YAML 1.2 and in files
(:mod:`parcat.core.yamlfile`); quoted, ``'1e3'`` stays text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from parcat.core.errors import ConfigError, MissionError, ParcatError, brief, clip
from parcat.core.yamlfile import load_yaml


def parse_settings(items: Iterable[str], error: Callable[[str], ParcatError]) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` items into a mapping; a later key wins over an earlier one.
    ``error(item)`` makes the error raised for an item with no ``=`` or an empty key."""
    settings: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise error(item)
        settings[key.strip()] = parse_value(value)
    return settings


def parse_value(text: str) -> Any:
    """A setting's value as a YAML scalar, or the text itself when it is not valid YAML (or
    past a limit of :func:`parcat.core.yamlfile.load_yaml`: deeper, longer numbers)."""
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Parse ``--set KEY=VALUE`` mission parameter overrides (:class:`MissionError`)."""
    return parse_settings(
        items,
        lambda item: MissionError(f"--set expects KEY=VALUE (e.g. --set agents=8), got '{item}'"),
    )


def merge_settings(base: Mapping[str, Any], top: Mapping[str, Any],
                   nested: Iterable[str] = ()) -> dict[str, Any]:
    """The one precedence rule: ``top`` wins over ``base``, key by key (defaults < a YAML
    file < flags). A key in ``nested`` whose values are mappings on both sides is merged key
    by key (``--set learner.lr=0.01`` keeps the file's other ``learner`` keys)."""
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        if key in nested and isinstance(below, Mapping) and isinstance(value, Mapping):
            merged[key] = merge_settings(below, value)
        else:
            merged[key] = value
    return merged


OWN_PREFIX = "mission."
OWN_KEYS = ("max_steps", "fresh_env")
"""What ``--set mission.KEY=VALUE`` sets: parcat's step limit and whether every episode gets
a fresh environment, as a mission file's top-level keys do (never the env's parameters)."""


def split_own_settings(overrides: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` mission overrides split into (the environment's parameters, parcat's own
    keys without their ``mission.``); the step limit is checked where it is used."""
    params: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in overrides.items():
        if not key.startswith(OWN_PREFIX):
            params[key] = value
        elif key.removeprefix(OWN_PREFIX) in OWN_KEYS:
            own[key.removeprefix(OWN_PREFIX)] = value
        else:
            raise MissionError(f"--set {clip(key)}: parcat's own mission keys are "
                               f"{', '.join(OWN_PREFIX + k for k in OWN_KEYS)}")
    if not isinstance(own.get("fresh_env", False), bool):
        raise MissionError("--set mission.fresh_env must be true or false, got "
                           f"{brief(own['fresh_env'])}")
    return params, own


LEARNER_PREFIX = "learner."


def split_learner_settings(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` settings split into (mission parameters, learner settings): ``learner.lr``
    is the learner's ``lr``; ``learner.`` with no key after it is a :class:`ConfigError`."""
    mission: dict[str, Any] = {}
    learner: dict[str, Any] = {}
    for key, value in settings.items():
        if key.startswith(LEARNER_PREFIX):
            name = key.removeprefix(LEARNER_PREFIX)
            if not name:
                raise ConfigError("--set learner.KEY=VALUE needs a key after 'learner.' "
                                  "(e.g. --set learner.lr=0.01)")
            learner[name] = value
        else:
            mission[key] = value
    return mission, learner
