"""Book knowledge graphs (seed 001): extraction parsing, names graph, node merging and pruning,
keyword-weighted edge retrieval with MiniLM, and the two edge linearisations."""

from memloop.eval.kg.extraction import Extraction, Triple, parse_extraction
from memloop.eval.kg.graph import BuildReport, build_book_graph, degree_without_loops, names_graph
from memloop.eval.kg.retrieval import (
    KEYWORDS,
    Edge,
    Embedder,
    MiniLMEmbedder,
    chapter_edges,
    linearize_plain,
    linearize_tokens,
    rank_edges,
)

__all__ = [
    "Extraction",
    "Triple",
    "parse_extraction",
    "BuildReport",
    "build_book_graph",
    "degree_without_loops",
    "names_graph",
    "KEYWORDS",
    "Edge",
    "Embedder",
    "MiniLMEmbedder",
    "chapter_edges",
    "linearize_plain",
    "linearize_tokens",
    "rank_edges",
]
