"""What the built-in learners share: building their options from a mapping that names
unknown keys, the range checks of integer and number fields, and the protocol members that
come from those options (:class:`MLPLearner`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, TypeVar

from parcat.core.errors import ConfigError, brief, clip

T = TypeVar("T")


def from_mapping(cls: type[T], values: Mapping[str, Any], learner: str) -> T:
    """``cls(**values)`` (a frozen dataclass of options), naming an unknown key first.

    Raises:
        ConfigError: an unknown key (with the known ones) or what ``cls`` refuses.
    """
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(str(key) for key in values if key not in known)
    if unknown:
        raise ConfigError(f"{learner}: unknown option '{clip(unknown[0])}'; known: "
                          f"{', '.join(known)}")
    return cls(**values)


def check_int_ranges(config: Any, ranges: Mapping[str, tuple[int, int | None]],
                     learner: str) -> None:
    """Each named field an integer within its (lowest, highest or ``None``) range.

    Raises:
        ConfigError: naming the first field out of range.
    """
    for name, (low, high) in ranges.items():
        value = getattr(config, name)
        if not is_int(value) or value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"between {low} and {high:,}"
            raise ConfigError(f"{learner}: '{name}' must be an integer {bounds}, "
                              f"got {brief(value)}")


def is_int(value: Any) -> bool:
    """An ``int`` and not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite ``int`` or ``float`` and not a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class MLPLearner:
    """The ``Learner`` protocol members parcat's numpy learners share: their options are a
    dataclass (``options_class``, held as ``settings``) and their greedy network is the
    ``mlp`` policy's."""

    options_class: ClassVar[Any]
    """The options dataclass (with a ``from_mapping`` that names unknown keys)."""
    settings: Any
    """The learner's options, an ``options_class``."""
    policy = "parcat.policies.builtin:MLPPolicy"
    """The evaluation policy its :meth:`policy_arrays` load into."""

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        """Refuse an unknown option or a bad value (:class:`ConfigError`), before a run."""
        cls.options_class.from_mapping(options)

    @property
    def config(self) -> dict[str, Any]:
        """The hyperparameters as a JSON-able mapping (the run manifest's ``learner``)."""
        return dataclasses.asdict(self.settings)

    @property
    def policy_kwargs(self) -> dict[str, int]:
        """Arguments of ``MLPPolicy`` whose ``load_state_dict`` takes the policy arrays."""
        return {"width": self.settings.width, "depth": self.settings.depth}
