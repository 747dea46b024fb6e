"""The layers point one way: checked from the source's own imports (lazy ones included) and
from every string that names a parcat module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "parcat"
# bottom up; a package may import only packages of a lower layer (and itself)
LAYERS: list[set[str]] = [
    {"core"},
    {"ipc"},
    {"envs"},
    {"policies"},
    {"stepping"},
    {"episode"},
    {"parallel"},
    {"eval", "train", "sim", "serve"},
    {"testing", "bench"},
    {"cli"},
]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}
NAMED = re.compile(r"\bparcat\.([a-z_]+)\b")


def package_of(module: str) -> str:
    """``parcat.ipc.shm`` -> ``ipc``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "parcat"


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in SRC.rglob("*.py")}


def imported(path: Path) -> set[str]:
    """The parcat modules ``path`` imports, at top level or inside functions."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "parcat":
                targets |= {f"parcat.{a.name}" for a in node.names if a.name != "__version__"}
            elif node.module.startswith("parcat."):
                targets.add(node.module)
        elif isinstance(node, ast.Import):
            targets |= {a.name for a in node.names if a.name.startswith("parcat.")}
    return targets


def named_in_code(path: Path) -> set[str]:
    """Packages a string in ``path`` names (``"parcat.cli.main"``), docstrings aside."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return {match for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings
            for match in NAMED.findall(node.value) if match in RANK}


def test_the_package_top_holds_only_init_and_main() -> None:
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert top == ["__init__.py", "__main__.py"]


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(RANK), sorted(packages ^ set(RANK))


def test_no_module_imports_a_higher_layer_nor_a_peer() -> None:
    wrong = []
    for module, path in modules().items():
        source = package_of(module)
        if source not in RANK:
            continue
        for target in imported(path) | {f"parcat.{p}" for p in named_in_code(path)}:
            package = package_of(target)
            if package != source and package in RANK and RANK[package] >= RANK[source]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "\n".join(sorted(wrong))
