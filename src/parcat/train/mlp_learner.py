"""What the built-in learners share: their options' common fields and checks
(:class:`MLPOptions`, built from a mapping that names unknown keys) and the protocol members
that come from those options (:class:`MLPLearner`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from parcat.core.errors import ConfigError, brief, clip
from parcat.core.limits import MAX_NET_DEPTH, MAX_NET_WIDTH

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


OptionsT = TypeVar("OptionsT", bound="MLPOptions")


@dataclass(frozen=True)
class MLPOptions:
    """The options every learner on the ``mlp`` network has, checked on construction
    (integer ranges, ``lr``, the fields in [0, 1], then the subclass's :meth:`check`).

    Raises:
        ConfigError: a field is out of range; the message names it.
    """

    width: int = 64
    """Units per hidden layer of each network (the ``mlp`` policy's ``width``)."""
    depth: int = 2
    """Number of hidden layers of each network (the ``mlp`` policy's ``depth``)."""
    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor, in [0, 1]."""

    learner: ClassVar[str] = "mlp"
    """The learner's name, which begins every message."""
    int_ranges: ClassVar[Mapping[str, tuple[int, int | None]]] = {}
    """The smallest and largest value of each other integer field (``None``: no largest)."""
    unit_fields: ClassVar[tuple[str, ...]] = ()
    """Other fields that must be numbers in [0, 1]."""

    def __post_init__(self) -> None:
        ranges = {"width": (1, MAX_NET_WIDTH), "depth": (1, MAX_NET_DEPTH), **self.int_ranges}
        check_int_ranges(self, ranges, self.learner)
        if not is_number(self.lr) or self.lr <= 0:
            raise ConfigError(f"{self.learner}: 'lr' must be a number > 0, got {brief(self.lr)}")
        for name in ("gamma", *self.unit_fields):
            value = getattr(self, name)
            if not is_number(value) or not 0 <= value <= 1:
                raise ConfigError(f"{self.learner}: '{name}' must be a number in [0, 1], "
                                  f"got {brief(value)}")
        self.check()

    def check(self) -> None:
        """The learner's own checks, after the shared ones."""

    @classmethod
    def from_mapping(cls: type[OptionsT], values: Mapping[str, Any]) -> OptionsT:
        """Build the options from a mapping (a YAML file, CLI options), naming unknown keys.

        Raises:
            ConfigError: an unknown key or a value out of range.
        """
        return from_mapping(cls, values, cls.learner)


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
