"""JSON as parcat writes it: standard JSON, with ``null`` where a number is NaN or infinite
(Python writes ``NaN`` bare, which strict readers refuse); parcat reads ``null`` back as NaN."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def dumps(data: Any, **kwargs: Any) -> str:
    """``json.dumps(data, **kwargs)``, non-finite numbers written as ``null`` (data without
    them, nearly all, is encoded once by the C encoder)."""
    try:
        return json.dumps(data, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(finite(data), allow_nan=False, **kwargs)


def finite(data: Any) -> Any:
    """A copy of ``data`` (dicts, lists, tuples, numpy values and arrays nested in any way)
    with every NaN or infinite float replaced by ``None``."""
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [finite(value) for value in data]
    if isinstance(data, np.ndarray | np.generic):
        return finite(data.tolist())
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data
