"""The book knowledge graph of seed 001: names graph, initialisation, merging, pruning (networkx).

Nodes are entities carrying `names` (all aliases) and `counts`; edges are directed
<subject, predicate, object> triples with the `chapter` they were extracted from; a triple without
object is a self-loop. `nx.MultiDiGraph` keeps several predicates between the same pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import networkx as nx
from memloop.eval.kg.extraction import Extraction


def names_graph(extractions: Iterable[Extraction]) -> nx.Graph:
    """One node per distinct name; an edge joins names given for the same entity in any segment."""
    g = nx.Graph()
    for ex in extractions:
        for names in ex.aliases:
            g.add_nodes_from(names)
            g.add_edges_from((names[0], other) for other in names[1:] if other != names[0])
    return g


def degree_without_loops(kg: nx.MultiDiGraph, node: str) -> int:
    return kg.in_degree(node) + kg.out_degree(node) - 2 * kg.number_of_edges(node, node)


@dataclass
class BuildReport:
    merged: list[tuple[str, str]] = field(default_factory=list)
    refused_linked: list[tuple[str, str]] = field(default_factory=list)  # heuristic 1: nodes share an edge
    refused_degree: list[tuple[str, str]] = field(default_factory=list)  # heuristic 2: both degrees > threshold
    dropped_edges: list[str] = field(default_factory=list)  # subject/object not a named entity
    pruned: list[str] = field(default_factory=list)


def initial_graph(names: nx.Graph, chapters: list[tuple[int, Extraction]], report: BuildReport) -> nx.MultiDiGraph:
    """Each name its own node; edges whose subject and object are named entities."""
    kg = nx.MultiDiGraph()
    for name in names.nodes:
        kg.add_node(name, names=[name])
    for chapter, ex in chapters:
        for t in ex.triples:
            obj = t.subject if t.object is None else t.object
            if t.subject not in names or obj not in names:
                missing = t.subject if t.subject not in names else obj
                report.dropped_edges.append(
                    f"{t.subject}; {t.predicate}; {t.object or ''} ({missing!r} is not a named entity)"
                )
                continue
            kg.add_edge(t.subject, obj, predicate=t.predicate, chapter=chapter)
    return kg


def merge_nodes(kg: nx.MultiDiGraph, names: nx.Graph, report: BuildReport, max_degree: int = 3) -> dict[str, str]:
    """Merge nodes whose names are linked in the names graph, unless a heuristic says they differ.

    Heuristic 1: the two nodes already share a triple. Heuristic 2: both have more than
    `max_degree` edges (self-loops excluded), i.e. both are important and likely distinct.
    Returns name -> node that now holds it.
    """
    owner = {n: n for n in kg.nodes}
    for a, b in names.edges:
        na, nb = owner[a], owner[b]
        if na == nb:
            continue
        if kg.has_edge(na, nb) or kg.has_edge(nb, na):
            report.refused_linked.append((a, b))
            continue
        if degree_without_loops(kg, na) > max_degree and degree_without_loops(kg, nb) > max_degree:
            report.refused_degree.append((a, b))
            continue
        keep, gone = (na, nb) if degree_without_loops(kg, na) >= degree_without_loops(kg, nb) else (nb, na)
        # out-edges include gone's self-loops once; in-edges add the rest
        moved = list(kg.out_edges(gone, data=True)) + [e for e in kg.in_edges(gone, data=True) if e[0] != gone]
        for u, v, data in moved:
            kg.add_edge(keep if u == gone else u, keep if v == gone else v, **data)
        kg.nodes[keep]["names"] = kg.nodes[keep]["names"] + kg.nodes[gone]["names"]
        kg.remove_node(gone)
        for n in kg.nodes[keep]["names"]:
            owner[n] = keep
        report.merged.append((a, b))
    return owner


def prune(kg: nx.MultiDiGraph, report: BuildReport, min_degree: int = 2) -> None:
    """Remove nodes with fewer than `min_degree` edges (self-loops excluded), repeatedly."""
    while True:
        weak = [n for n in kg.nodes if degree_without_loops(kg, n) < min_degree]
        if not weak:
            return
        report.pruned.extend(weak)
        kg.remove_nodes_from(weak)


def build_book_graph(
    chapters: list[tuple[int, Extraction]], max_degree: int = 3, min_degree: int = 2
) -> tuple[nx.MultiDiGraph, BuildReport]:
    report = BuildReport()
    names = names_graph(ex for _, ex in chapters)
    kg = initial_graph(names, chapters, report)
    merge_nodes(kg, names, report, max_degree)
    prune(kg, report, min_degree)
    return kg, report
