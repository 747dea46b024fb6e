"""What the built-in learners' option classes share: building from a mapping that names
unknown keys, and the range checks of their integer and number fields."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from parcat.errors import ConfigError, brief, clip

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
