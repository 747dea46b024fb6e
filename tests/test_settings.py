"""One KEY=VALUE parser for --set and policy spec arguments."""

from __future__ import annotations

import re

import pytest

from parcat.core.errors import ConfigError, MissionError
from parcat.core.settings import parse_overrides, parse_settings


def test_values_are_yaml_scalars_and_invalid_yaml_stays_text() -> None:
    parsed = parse_settings([" width = 8", "rate=0.5", "on=true", "sizes=[1, 2]", "empty=",
                             "text=a: b: c", "width=9"], ConfigError)
    assert parsed == {"width": 9, "rate": 0.5, "on": True, "sizes": [1, 2], "empty": None,
                      "text": "a: b: c"}


def test_the_caller_words_the_error() -> None:
    with pytest.raises(ConfigError, match=re.escape("bad item '=3'")):
        parse_settings(["a=1", "=3"], lambda item: ConfigError(f"bad item '{item}'"))
    with pytest.raises(MissionError, match=re.escape(
            "--set expects KEY=VALUE (e.g. --set agents=8), got 'agents'")):
        parse_overrides(["agents"])
