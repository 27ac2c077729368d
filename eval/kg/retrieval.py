"""Keyword-weighted edge ranking and the two linearisations of seed 001 (section 3.4, Appendix A)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Protocol, Sequence

import networkx as nx
import numpy as np

# Appendix A: keyword -> weight
KEYWORDS: dict[str, float] = {
    "relation": 30,
    "happen": 15,
    "conflict": 10,
    "desire": 10,
    "emotion": 10,
    "role": 10,
    "think": 5,
    "location": 5,
    "personality": 5,
}


class Embedder(Protocol):
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalised embeddings, one row per text."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the packaged copy (`memloop.eval.embedding`, loaded once per process)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from memloop.eval.embedding import embed

        return embed(texts)


@dataclass(frozen=True)
class Edge:
    subject: str  # node id
    predicate: str
    object: str  # node id; == subject for a self-loop
    chapter: int
    score: float = 0.0

    @property
    def is_loop(self) -> bool:
        return self.subject == self.object


def mention_counts(kg: nx.MultiDiGraph, text: str) -> dict[str, Counter[str]]:
    """node -> Counter(name -> occurrences in text) over every name of the entity (its aliases), whole-word
    and case-insensitive: "mentioned in the chapter" holds for "the old capulet" as for "Old Capulet"."""
    out: dict[str, Counter[str]] = {}
    for node, data in kg.nodes(data=True):
        c: Counter[str] = Counter()
        for name in data.get("names", [node]):
            c[name] = len(re.findall(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text, flags=re.IGNORECASE))
        out[node] = c
    return out


def chapter_edges(kg: nx.MultiDiGraph, chapter_text: str, chapter: int) -> tuple[list[Edge], dict[str, Counter[str]]]:
    """E_k: edges of the subgraph induced by entities mentioned in the chapter, from chapters <= k."""
    counts = mention_counts(kg, chapter_text)
    mentioned = [n for n, c in counts.items() if sum(c.values()) > 0]
    sub = kg.subgraph(mentioned)
    edges = [Edge(u, d["predicate"], v, d["chapter"]) for u, v, d in sub.edges(data=True) if d["chapter"] <= chapter]
    return edges, counts


def rank_edges(edges: list[Edge], embedder: Embedder, keywords: dict[str, float] = KEYWORDS) -> list[Edge]:
    """Score S_i = sum_j w_j * z_j(cos(p_i, q_j)), z over edges per keyword; highest first (stable)."""
    if not edges:
        return []
    names = list(keywords)
    vecs = embedder.encode([e.predicate for e in edges] + names)
    p, q = vecs[: len(edges)], vecs[len(edges) :]
    sims = p @ q.T  # |E| x |Q| cosine (unit vectors)
    mu, sd = sims.mean(axis=0), sims.std(axis=0)
    z = np.where(sd > 0, (sims - mu) / np.where(sd > 0, sd, 1.0), 0.0)
    scores = z @ np.array([keywords[k] for k in names], dtype=float)
    order = sorted(range(len(edges)), key=lambda i: -scores[i])
    return [
        Edge(edges[i].subject, edges[i].predicate, edges[i].object, edges[i].chapter, float(scores[i])) for i in order
    ]


def display_name(kg: nx.MultiDiGraph, node: str, counts: dict[str, Counter[str]]) -> str:
    """The entity's name used most in the chapter (first listed name on ties)."""
    names = kg.nodes[node].get("names", [node])
    c = counts.get(node, Counter())
    return max(names, key=lambda n: (c[n], -names.index(n)))


def _total(counts: dict[str, Counter[str]], node: str) -> int:
    return sum(counts.get(node, Counter()).values())


def group_edges(
    edges: list[Edge], counts: dict[str, Counter[str]]
) -> list[tuple[str, list[Edge], list[tuple[str, list[Edge]]]]]:
    """[(subject, self-loops, [(object, edges)])], subjects and objects by chapter mentions (desc)."""
    subjects: dict[str, dict[str, list[Edge]]] = {}
    for e in edges:
        subjects.setdefault(e.subject, {}).setdefault(e.object, []).append(e)
    out = []
    for s in sorted(subjects, key=lambda n: -_total(counts, n)):
        objs = subjects[s]
        loops = objs.get(s, [])
        others = [(o, objs[o]) for o in sorted((o for o in objs if o != s), key=lambda n: -_total(counts, n))]
        out.append((s, loops, others))
    return out


def linearize_tokens(kg: nx.MultiDiGraph, edges: list[Edge], counts: dict[str, Counter[str]]) -> str:
    """Special-token format for fine-tunable models: <subject>, <object>, <predicate>."""
    lines = []
    for s, loops, others in group_edges(edges, counts):
        lines.append(f"<subject>{display_name(kg, s, counts)}")
        lines += [f"  <predicate>{e.predicate}" for e in loops]
        for o, es in others:
            lines.append(f"    <object>{display_name(kg, o, counts)}")
            lines += [f"      <predicate>{e.predicate}" for e in es]
    return "\n".join(lines)


def linearize_plain(kg: nx.MultiDiGraph, edges: list[Edge], counts: dict[str, Counter[str]]) -> str:
    """API-model format: one `subject; predicate; object` per line (`subject; predicate` for loops)."""
    lines = []
    for s, loops, others in group_edges(edges, counts):
        sn = display_name(kg, s, counts)
        lines += [f"{sn}; {e.predicate}" for e in loops]
        for o, es in others:
            on = display_name(kg, o, counts)
            lines += [f"{sn}; {e.predicate}; {on}" for e in es]
    return "\n".join(lines)
