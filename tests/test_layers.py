"""The layers point one way: checked from the source's own imports (lazy ones included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "parcat"
# the episode-running layers, bottom up: a unit may import only units of its layer or below
EXECUTORS = {"parallel", "evaluate", "train", "sim", "cli", "bench"}


def unit_of(module: str) -> str:
    """``parcat.ipc.shm`` -> ``ipc``; ``parcat.rollout`` -> ``rollout``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "parcat"


def imports() -> dict[str, set[str]]:
    """Module name -> the parcat modules it imports (at top level or inside functions)."""
    found: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(relative.parts).removesuffix(".__init__")
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "parcat":  # modules only: `from parcat import __version__`
                    targets |= {f"parcat.{a.name}" for a in node.names if _is_module(a.name)}
                elif node.module.startswith("parcat."):
                    targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("parcat.")}
        found[name] = targets
    return found


def _is_module(name: str) -> bool:
    return (SRC / f"{name}.py").exists() or (SRC / name).is_dir()


def unit_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in imports().items():
        source = unit_of(module)
        graph.setdefault(source, set())
        graph[source] |= {unit_of(t) for t in targets if unit_of(t) != source}
    return graph


def test_ipc_imports_nothing_above_it() -> None:
    allowed = {"ipc", "resources", "errors"}
    for module, targets in imports().items():
        if unit_of(module) == "ipc":
            assert {unit_of(t) for t in targets} <= allowed, module


def test_the_episode_path_imports_no_executor() -> None:
    for module, targets in imports().items():
        if unit_of(module) in {"rollout", "stepping", "missions", "policies", "envs", "ipc"}:
            above = {unit_of(t) for t in targets} & EXECUTORS
            assert not above, f"{module} imports {sorted(above)}"


def test_train_and_sim_build_on_ipc_not_on_eval() -> None:
    for module, targets in imports().items():
        if unit_of(module) in {"train", "sim"}:
            eval_side = {unit_of(t) for t in targets} & {"parallel", "evaluate", "cli"}
            assert not eval_side, f"{module} imports {sorted(eval_side)}"


def test_no_import_cycles_between_packages() -> None:
    graph = unit_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    assert not cycles, f"import cycles between packages: {cycles}"


@pytest.mark.parametrize("package", ["train", "parallel", "sim", "stepping", "ipc"])
def test_no_import_cycles_between_modules_of_a_package(package: str) -> None:
    graph = {m: {t for t in targets if t.startswith(f"parcat.{package}.")}
             for m, targets in imports().items() if m.startswith(f"parcat.{package}.")}
    seen: set[str] = set()

    def reaches(start: str, goal: str, path: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in path and reaches(nxt, goal, path | {nxt})):
                return True
        return False

    for module in graph:
        if module not in seen:
            seen.add(module)
            assert not reaches(module, module, {module}), f"{module} imports itself back"
