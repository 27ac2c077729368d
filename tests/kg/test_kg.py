"""The seed-001 knowledge graph on a hand-made story: aliases, merge heuristics, pruning, ranking, linearisation."""

from __future__ import annotations

import numpy as np
import pytest
from memloop.eval.kg import (
    KEYWORDS,
    MiniLMEmbedder,
    build_book_graph,
    chapter_edges,
    degree_without_loops,
    linearize_plain,
    linearize_tokens,
    names_graph,
    parse_extraction,
    rank_edges,
)
from memloop.eval.kg.graph import BuildReport, initial_graph, merge_nodes
from memloop.eval.kg.retrieval import mention_counts

CH1 = """Named entities (include all aliases and name variations):
Tom / Thomas
Aunt Polly / Polly
Huck
Becky
Cardiff Hill

Knowledge graph edges (select up to 15 most important):
1. Tom, Huck; friends; Cardiff Hill
2. Aunt Polly; aunt of; Tom
3. Tom; in love with; Becky
4. Becky; walks on; Cardiff Hill
5. Tom; mischievous
6. Huck; sleeps in; barrel
7. not an edge line
"""
CH2 = """Named entities:
Thomas / Tommy
Huck / Huckleberry
Polly
Becky
Cardiff Hill
Muff

Knowledge graph edges:
1. Tommy; hides with; Huckleberry
2. Huckleberry; climbs; Cardiff Hill
3. Polly; scolds; Tommy
4. Becky; argues with; Huck
5. Muff; drinks
"""


@pytest.fixture(scope="module")
def story():
    chapters = [(1, parse_extraction(CH1)), (2, parse_extraction(CH2))]
    kg, report = build_book_graph(chapters)
    return chapters, kg, report


def test_extraction_parsing() -> None:
    ex = parse_extraction(CH1)
    assert ex.aliases[0] == ["Tom", "Thomas"] and ex.aliases[1] == ["Aunt Polly", "Polly"]
    first = [(t.subject, t.predicate, t.object) for t in ex.triples[:2]]
    assert first == [("Tom", "friends", "Cardiff Hill"), ("Huck", "friends", "Cardiff Hill")]
    assert ("Tom", "mischievous", None) in [(t.subject, t.predicate, t.object) for t in ex.triples]
    assert len(ex.rejected) == 1 and "not an edge line" in ex.rejected[0]


def test_alias_merging_through_names_graph(story) -> None:
    _, kg, report = story
    tom = next(n for n in kg.nodes if "Tommy" in kg.nodes[n]["names"])
    assert sorted(kg.nodes[tom]["names"]) == ["Thomas", "Tom", "Tommy"]  # Tom-Thomas, Thomas-Tommy: one entity
    polly = next(n for n in kg.nodes if "Polly" in kg.nodes[n]["names"])
    assert sorted(kg.nodes[polly]["names"]) == ["Aunt Polly", "Polly"]
    preds = {d["predicate"] for u, v, d in kg.edges(data=True) if u == polly}
    assert preds == {"aunt of", "scolds"}  # edges of both names now leave the merged node
    assert any("'barrel' is not a named entity" in d for d in report.dropped_edges)


def test_pruning_repeats_until_stable(story) -> None:
    _, kg, report = story
    assert "Muff" in report.pruned  # only a self-loop: degree 0 without loops
    assert all(degree_without_loops(kg, n) >= 2 for n in kg.nodes)


def test_no_merge_when_nodes_share_an_edge() -> None:
    ex = parse_extraction("Named entities:\nBecky / Huck\nKnowledge graph edges:\n1. Becky; argues with; Huck\n")
    report = BuildReport()
    names = names_graph([ex])
    kg = initial_graph(names, [(1, ex)], report)
    merge_nodes(kg, names, report)
    assert report.refused_linked == [("Becky", "Huck")] and set(kg.nodes) == {"Becky", "Huck"}


def test_no_merge_when_both_nodes_have_high_degree() -> None:
    lines = [f"{i}. Ann; knows; P{i}" for i in range(4)] + [f"{i + 4}. Bob; knows; P{i}" for i in range(4)]
    text = (
        "Named entities:\nAnn / Bob\n"
        + "".join(f"P{i}\n" for i in range(4))
        + "Knowledge graph edges:\n"
        + "\n".join(lines)
    )
    ex = parse_extraction(text)
    report = BuildReport()
    names = names_graph([ex])
    kg = initial_graph(names, [(1, ex)], report)
    merge_nodes(kg, names, report, max_degree=3)
    assert report.refused_degree == [("Ann", "Bob")]
    # one edge less for Bob (degree 3, not above the threshold) and the two are merged
    ex2 = parse_extraction(text.replace("7. Bob; knows; P3", ""))
    report2 = BuildReport()
    kg2 = initial_graph(names_graph([ex2]), [(1, ex2)], report2)
    merge_nodes(kg2, names_graph([ex2]), report2, max_degree=3)
    assert report2.merged == [("Ann", "Bob")] and degree_without_loops(kg2, "Ann") == 7


class TableEmbedder:
    """Fixed 2-d unit vectors, to pin the z-normalised weighted score arithmetic exactly."""

    def __init__(self, table: dict[str, tuple[float, float]]) -> None:
        self.table = table

    def encode(self, texts):
        v = np.array([self.table[t] for t in texts], dtype=float)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_rank_score_arithmetic(story) -> None:
    _, kg, _ = story
    edges, _ = chapter_edges(kg, "Tom and Polly and Becky and Huck on Cardiff Hill", 2)
    preds = sorted({e.predicate for e in edges})
    table = {p: (1.0, float(i)) for i, p in enumerate(preds)}
    table.update({"relation": (0.0, 1.0), "happen": (1.0, 0.0)})
    kw = {"relation": 30.0, "happen": 15.0}
    ranked = rank_edges(edges, TableEmbedder(table), kw)
    emb = TableEmbedder(table).encode([e.predicate for e in edges] + list(kw))
    sims = emb[: len(edges)] @ emb[len(edges) :].T
    z = (sims - sims.mean(0)) / sims.std(0)
    expected = z @ np.array([30.0, 15.0])
    assert [round(e.score, 9) for e in ranked] == sorted((round(float(x), 9) for x in expected), reverse=True)


def test_minilm_ranking_and_linearisation(story) -> None:
    _, kg, _ = story
    text = "Tom ran. Tom laughed. Tommy hid. Polly called Tom. Becky smiled at Tom. Huck waited on Cardiff Hill."
    edges, counts = chapter_edges(kg, text, 1)  # chapter-2 edges are future information here
    assert {e.chapter for e in edges} == {1}
    ranked = rank_edges(edges, MiniLMEmbedder())
    preds = [e.predicate for e in ranked]
    assert preds.index("aunt of") < preds.index("walks on")  # kinship ("relation", w=30) above a plain action
    assert ranked[0].score >= ranked[-1].score and abs(sum(e.score for e in ranked)) < 1e-6 * len(ranked) * 100
    plain = linearize_plain(kg, ranked, counts).splitlines()
    assert plain[0] == "Tom; mischievous"  # the most mentioned subject first, its self-loop before other edges
    assert "Aunt Polly; aunt of; Tom" in plain or "Polly; aunt of; Tom" in plain
    tokens = linearize_tokens(kg, ranked, counts)
    assert tokens.startswith("<subject>Tom\n  <predicate>mischievous\n")
    assert "<object>Becky\n      <predicate>in love with" in tokens
    assert list(KEYWORDS) == [
        "relation",
        "happen",
        "conflict",
        "desire",
        "emotion",
        "role",
        "think",
        "location",
        "personality",
    ]


def test_edges_without_header_are_edges() -> None:
    ex = parse_extraction("Nell / Nell Crane\nTobias\n1. Nell; sister of; Tobias\n2. Tobias; owes money\n")
    assert ex.aliases == [["Nell", "Nell Crane"], ["Tobias"]]
    assert [(t.subject, t.object) for t in ex.triples] == [("Nell", "Tobias"), ("Tobias", None)]


def test_mentions_match_any_alias_whatever_its_case(story) -> None:
    """Seed 001's E_k takes entities "mentioned in the chapter": a lowercased chapter mentions them too."""
    _, kg, _ = story
    text = "Tom and Polly and Becky and Huck on Cardiff Hill"
    upper, _ = chapter_edges(kg, text, 2)
    lower, counts = chapter_edges(kg, text.lower(), 2)
    assert upper and sorted(map(repr, lower)) == sorted(map(repr, upper))
    tommy = next(n for n, d in kg.nodes(data=True) if "Tommy" in d.get("names", []))
    assert counts[tommy]["Tommy"] == 0 and mention_counts(kg, "TOMMY hid")[tommy]["Tommy"] == 1  # an alias counts
