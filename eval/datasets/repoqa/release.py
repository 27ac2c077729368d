"""RepoQA's own release file (`repoqa-<date>.json`, also .jsonl / .gz): the real benchmark, for users who have it.

The file maps a language to its repositories; each repository carries its files (`content`: path ->
text), their imports (`dependency`: path -> paths) and its needles (`name`, `path`, `start_byte`,
`end_byte`, `description`). memloop lays a repository out as it does its own (files in dependency
order, each under a `# file: <path>` line), cuts it into chunks of whole lines, and asks for each
needle with the release's own description in the paper's query form.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Callable

import networkx as nx
from memloop.eval.datasets.errors import DatasetError, DatasetNotFoundError
from memloop.eval.datasets.repoqa.needles import QUERY_HEAD
from memloop.eval.datasets.repoqa.source import chunk_of, chunk_starts, pack_lines
from memloop.eval.datasets.rows import parse_row
from memloop.eval.datasets.sample import Sample, slug
from pydantic import BaseModel, StrictStr, model_validator

_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
_FIX = "is this RepoQA's release file after needle annotation (repositories with repo, content and needles)?"


class ReleaseNeedle(BaseModel):
    """A needle function as the release annotates it: where its definition starts and its description."""

    name: StrictStr
    path: StrictStr
    start_byte: int
    end_byte: int | None = None
    description: StrictStr


class ReleaseRepo(BaseModel):
    """One repository of the release: its files, their imports and its needles."""

    repo: StrictStr
    content: dict[str, StrictStr]
    dependency: dict[str, list[StrictStr] | None] | None = None
    needles: list[ReleaseNeedle]

    @model_validator(mode="after")
    def _needles_in_content(self) -> "ReleaseRepo":
        for needle in self.needles:
            if needle.path not in self.content:
                raise ValueError(
                    f"needle {needle.name!r} is in {needle.path!r}, which is not among the repository's "
                    "files (`content`)"
                )
        return self


def is_release(source: str | Path) -> bool:
    """Whether `source` names a release file (by its suffix) rather than a package or a folder."""
    return str(source).endswith(_SUFFIXES)


def _read(path: Path) -> dict[str, list[dict[str, Any]]]:
    if not path.is_file():
        raise DatasetNotFoundError(
            f"RepoQA release file {path} not found; download repoqa-<date>.json(.gz) from "
            "RepoQA's releases, or leave `path` out to build RepoQA-style samples from installed code"
        )
    raw = gzip.open(path, "rt", encoding="utf-8").read() if path.suffix == ".gz" else path.read_text(encoding="utf-8")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:  # the .jsonl form: one object per line (the release holds one)
        lines = [ln for ln in raw.splitlines() if ln.strip()]
        try:
            data = json.loads(lines[0]) if len(lines) == 1 else None
        except (json.JSONDecodeError, IndexError):
            data = None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise DatasetError(
            f"{path} is not a RepoQA release: expected one JSON object mapping a language to its list of repositories"
        )
    return data


def _file_order(repo: ReleaseRepo) -> list[str]:
    """Paths with every file after the files it imports; cycles kept together, ties broken by path."""
    content, deps = repo.content, repo.dependency or {}
    graph = nx.DiGraph()
    graph.add_nodes_from(content)
    for path, needs in deps.items():
        for dep in needs or ():
            if dep in content and path in content and dep != path:
                graph.add_edge(dep, path)
    cond = nx.condensation(graph)
    groups: dict[int, list[str]] = {}
    for path, comp in cond.graph["mapping"].items():
        groups.setdefault(comp, []).append(path)
    order = nx.lexicographical_topological_sort(cond, key=lambda c: min(groups[c]))
    return [p for comp in order for p in sorted(groups[comp])]


def load_release(
    path: str | Path, chunk_tokens: int, count: Callable[[str], int], language: str = "python", limit: int | None = None
) -> list[Sample]:
    """One sample per needle of the release's `language` repositories."""
    path = Path(path).expanduser()
    data = _read(path)
    if language not in data:
        raise DatasetError(f"{path} has no {language!r} repositories; it has {sorted(data)} (set `language`)")
    samples: list[Sample] = []
    for i, raw in enumerate(data[language]):
        repo = parse_row(ReleaseRepo, raw, f"{path} {language}[{i}]", _FIX)
        order = _file_order(repo)
        text, starts = "", {}
        for p in order:
            body = repo.content[p]
            text += f"# file: {p}\n"
            starts[p] = len(text)
            text += (body if body.endswith("\n") else body + "\n") + "\n"
        chunks = tuple(pack_lines(text, chunk_tokens, count))
        offsets = chunk_starts(chunks)
        for needle in repo.needles:
            body = repo.content[needle.path]
            at = starts[needle.path] + len(body.encode("utf-8")[: needle.start_byte].decode("utf-8", "ignore"))
            description = needle.description.strip()
            samples.append(
                Sample(
                    id=f"repoqa/{slug(repo.repo)}/{needle.name}",
                    task="repoqa",
                    chunks=chunks,
                    query=f"{QUERY_HEAD}\n{description}",
                    gold=needle.name,
                    metadata={
                        "package": repo.repo,
                        "file": needle.path,
                        "qualname": needle.name,
                        "description": {"text": description},
                        "needle_chunk": chunk_of(offsets, at),
                        "describer": "release",
                        "release": path.name,
                        "chunk_tokens": chunk_tokens,
                    },
                )
            )
    return samples[:limit]
