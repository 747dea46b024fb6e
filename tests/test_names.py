"""A name means one thing: no two classes of the package share a name."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "parcat"


def test_no_two_classes_share_a_name() -> None:
    places: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                places[node.name].append(f"{path.relative_to(SRC)}:{node.lineno}")
    shared = {name: where for name, where in places.items() if len(where) > 1}
    assert shared == {}
