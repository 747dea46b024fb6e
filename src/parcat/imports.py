"""Resolving ``module:attribute`` references, the one way parcat loads user code."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any


def is_reference(text: str) -> bool:
    """Whether ``text`` looks like ``package.module:attribute``."""
    module, sep, attr = text.partition(":")
    return bool(sep and module and attr) and "/" not in module and not Path(text).exists()


def import_module(name: str) -> Any:
    """Import module ``name`` with the current directory importable, so ``my_env`` finds
    ``./my_env.py`` the way ``python -m`` would.

    Raises:
        ImportError: the module cannot be imported.
    """
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    return importlib.import_module(name)


def import_reference(reference: str) -> Any:
    """Import ``package.module:attr.sub`` and return the attribute.

    The current directory is importable, so ``my_policies:Agent`` finds ``./my_policies.py``
    the way ``python -m`` would.

    Raises:
        ImportError: the module cannot be imported.
        AttributeError: the module has no such attribute.
        ValueError: ``reference`` has no ``module:attribute`` shape.
    """
    module_name, sep, attr_path = reference.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"expected 'module:attribute', got {reference!r}")
    obj: Any = import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj
