"""Real Python source for RepoQA-style tasks: an installed package (or a folder), files in dependency order."""

from __future__ import annotations

import ast
import bisect
import importlib.util
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import networkx as nx
from memloop.eval.datasets.errors import DatasetNotFoundError, EmptyDatasetError
from memloop.eval.datasets.textfile import read_text


@dataclass(frozen=True)
class SourceFile:
    module: str  # dotted module name inside the repository
    path: str  # path relative to the repository root, as shown to the model
    text: str
    tree: ast.Module


def _root_of(source: str | Path) -> tuple[str, Path]:
    """(package name, directory or file) for an importable name or a filesystem path."""
    p = Path(source)
    if p.exists():
        return p.stem if p.is_file() else p.name, p
    spec = importlib.util.find_spec(str(source))
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        raise DatasetNotFoundError(
            f"{source!r} is neither a path nor an installed pure-Python package: "
            "pass e.g. 'json', 'email' or a folder of .py files"
        )
    origin = Path(spec.origin)
    return str(source), origin.parent if origin.name == "__init__.py" else origin


def read_package(source: str | Path) -> list[SourceFile]:
    """Every parseable .py file of the package (tests and caches skipped), in path order."""
    name, root = _root_of(source)
    paths = (
        [root]
        if root.is_file()
        else sorted(
            f
            for f in root.rglob("*.py")
            if not any(part in ("tests", "test", "__pycache__") for part in f.relative_to(root).parts)
        )
    )
    files = []
    for f in paths:
        rel = f.name if root.is_file() else f.relative_to(root).as_posix()
        parts = [] if root.is_file() else list(f.relative_to(root).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join([name] + parts) if not root.is_file() else name
        if not f.read_bytes().strip():
            continue  # empty __init__.py files carry nothing to read
        text = read_text(f, "source file")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue  # files for another Python version (e.g. lib2to3 fixtures) are not part of the task
        files.append(SourceFile(module, f"{name}/{rel}" if not root.is_file() else rel, text, tree))
    if not files:
        raise EmptyDatasetError(f"{source!r} holds no parseable Python files")
    return files


def _imports(sf: SourceFile, known: set[str]) -> set[str]:
    """Modules of the same repository that `sf` imports (absolute and relative imports)."""
    out: set[str] = set()
    package = sf.module if sf.path.endswith("__init__.py") else sf.module.rpartition(".")[0]
    for node in ast.walk(sf.tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` depends on the submodule, not on pkg's __init__ (that would invent cycles)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n and n != sf.module:
                out.add(n)
    return out


def dependency_order(files: list[SourceFile]) -> list[SourceFile]:
    """Files so that a module comes after the modules it imports (RepoQA's layout); import cycles are
    kept together and ties are broken by path, so the order is deterministic."""
    by_module = {f.module: f for f in files}
    graph = nx.DiGraph()
    graph.add_nodes_from(by_module)
    for f in files:
        for dep in _imports(f, set(by_module)):
            graph.add_edge(dep, f.module)
    cond = nx.condensation(graph)
    members = cond.graph["mapping"]
    groups: dict[int, list[str]] = {}
    for module, comp in members.items():
        groups.setdefault(comp, []).append(module)
    key = lambda comp: min(by_module[m].path for m in groups[comp])  # noqa: E731
    order = []
    for comp in nx.lexicographical_topological_sort(cond, key=key):
        order.extend(sorted(groups[comp], key=lambda m: by_module[m].path))
    return [by_module[m] for m in order]


def chunk_starts(chunks: Sequence[str]) -> list[int]:
    """The character offset of each chunk in the text they were cut from."""
    return [0, *itertools.accumulate(len(c) for c in chunks[:-1])] if chunks else []


def chunk_of(starts: Sequence[int], at: int) -> int:
    """The index of the chunk holding character `at` (`starts` from `chunk_starts`)."""
    return bisect.bisect_right(starts, at) - 1


def pack_lines(text: str, chunk_tokens: int, count) -> list[str]:
    """Greedy chunks of whole lines (each within `chunk_tokens`); `"".join(chunks) == text` exactly.

    Each chunk holds the most lines whose joined text fits (exact counts). Per-line counts give a
    first guess of the boundary, which exact counts of the joined text then move to the right place,
    so a chunk costs a few tokenizations instead of one per line. A single line longer than a chunk
    is cut at the longest prefix that fits."""
    lines = text.splitlines(keepends=True)
    chunks: list[str] = []
    start = 0
    while start < len(lines):
        budget, end = 0, start  # guess: lines whose separate counts sum within the limit
        while end < len(lines) and budget + count(lines[end]) <= chunk_tokens:
            budget += count(lines[end])
            end += 1
        fits = lambda k: count("".join(lines[start:k])) <= chunk_tokens  # noqa: E731
        if fits(end):  # undershot (separate counts exceed the joined one): gallop right, then bisect
            lo, step = end, 1
            while lo + step <= len(lines) and fits(lo + step):
                lo, step = lo + step, step * 2
            hi = min(len(lines), lo + step - 1)
        else:  # overshot: gallop left to a prefix that fits, then bisect
            bad, step, k = end, 1, end - 1
            while k > start and not fits(k):
                bad, step = k, step * 2
                k = end - step
            lo, hi = max(k, start), bad - 1
        while lo < hi:  # largest k in [lo, hi] that fits (lo fits or is start)
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        end = lo
        if end == start:  # one over-long line: cut it by characters
            line = lines[start]
            a, b = 1, len(line)
            while a < b:
                m = (a + b + 1) // 2
                if count(line[:m]) <= chunk_tokens:
                    a = m
                else:
                    b = m - 1
            chunks.append(line[:a])
            lines[start] = line[a:]
            continue
        chunks.append("".join(lines[start:end]))
        start = end
    return chunks
