"""One KEY=VALUE parser for --set and policy spec arguments."""

from __future__ import annotations

import re

import pytest

from parcat.core.errors import ConfigError, MissionError
from parcat.core.settings import parse_overrides, parse_settings, parse_value
from parcat.core.yamlfile import load_yaml


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


@pytest.mark.parametrize(("text", "value"), [
    ("1e-4", 1e-4), ("5e-05", 5e-5), ("-2E+3", -2000.0), (".5e1", 5.0), ("1.0e3", 1000.0),
    ("[1e-4, 2]", [1e-4, 2]),
    # text stays text: quoted, or not a whole number
    ("'1e3'", "1e3"), ("1e3x", "1e3x"), ("run1e3", "run1e3"), ("1e", "1e"), ("e5", "e5"),
    ("inf", "inf"), ("nan", "nan"),
])
def test_e_notation_is_a_number_on_the_command_line_and_in_files_alike(
        text: str, value: object) -> None:
    # YAML 1.1 keeps 1e-4 as text; json.dumps writes a file's lr: 0.00005 as 5e-05
    assert parse_value(text) == value
    assert load_yaml(f"key: {text}") == {"key": value}
