"""Resolving ``module:attribute`` references, the one way parcat loads user code, and the one
rule for code that a file names (:func:`require_trusted`)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

from parcat.core.errors import UntrustedCodeError, clip


def is_reference(text: str) -> bool:
    """Whether ``text`` looks like ``package.module:attribute``."""
    module, sep, attr = text.partition(":")
    return bool(sep and module and attr) and "/" not in module and not Path(text).exists()


def import_module(name: str) -> Any:
    """Import module ``name`` with the current directory importable (as ``python -m``)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    return importlib.import_module(name)


def import_reference(reference: str) -> Any:
    """Import ``package.module:attr.sub`` and return the attribute (see :func:`import_module`).

    Raises:
        ValueError: ``reference`` has no ``module:attribute`` shape.
    """
    module_name, sep, attr_path = reference.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"expected 'module:attribute', got {reference!r}")
    obj: Any = import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


TRUST_FLAG = "--trust-code"  # the flag by which a user lets files name code from outside parcat


def require_trusted(reference: str, builtin: Collection[str], trusted: bool, named_by: str,
                    other_fix: str = "") -> None:
    """Refuse code that a file names unless it is parcat's own (``builtin``) or the user
    allowed it (``trusted``): a replay, manifest or checkpoint from elsewhere must not make
    parcat run anyone's code (``os:system``), as ``trust_remote_code`` guards HuggingFace
    models. ``named_by`` names the file in the message; ``other_fix`` is said before the flag
    (``name it with -m, or``).

    Raises:
        UntrustedCodeError: one line naming the file, the code and how to allow it.
    """
    if trusted or reference in builtin:
        return
    raise UntrustedCodeError(
        f"{named_by} names '{clip(reference)}', code from outside parcat; a file cannot make "
        f"parcat run it: {other_fix}pass {TRUST_FLAG} if you trust the file"
    )
