"""The engine package's import graph has no cycle, and every module imports on its own.

The graph counts every `import memloop.engine...` / `from memloop.engine... import ...` in a module, function-level
(lazy) imports included: a lazy import only hides a cycle until the day someone hoists it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return "memloop." + ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


def engine_imports(name: str, path: Path) -> set[str]:
    """The engine modules that `name` imports anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # `from engine import kernels` imports the submodule memloop.engine.kernels
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name and t != "memloop.engine":
                found.add(t)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_engine_import_graph_has_no_cycle() -> None:
    graph = {name: engine_imports(name, path) for name, path in MODULES.items()}
    assert (
        "memloop.engine.model.weights" in graph["memloop.engine.model.blocks"]
        or "memloop.engine.model.blocks" in graph["memloop.engine.model.weights"]
    )  # the walk sees imports
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle inside engine/: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_engine_never_imports_eval_or_jobs() -> None:
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            bad = [m for m in mods if m.startswith(("memloop.eval", "memloop.jobs"))]
            assert not bad, f"{name} imports {bad}: the engine never imports eval or jobs"


def test_each_module_imports_first() -> None:
    """Each module imported first, with no engine module loaded before it (one interpreter, engine
    modules dropped between imports so third-party imports are paid once)."""
    script = (
        "import importlib, sys\n"
        f"for name in {sorted(MODULES)!r}:\n"
        "    for m in [m for m in sys.modules if m == 'memloop.engine' or m.startswith('memloop.engine.')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        sys.exit(f'{name}: {type(exc).__name__}: {exc}')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
