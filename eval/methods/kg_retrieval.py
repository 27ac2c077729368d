"""Seed 001: chapter summarisation with knowledge-graph retrieval.

1. Every chunk goes through the extraction prompt (entities with aliases, edges).
2. eval.kg builds the book graph: names graph, initial nodes, merging with the two heuristics,
   pruning of nodes with degree < min_degree (repeated).
3. For each chapter, the edges among entities mentioned in it (from that chapter or earlier) are
   ranked by the keyword-weighted, z-normalised MiniLM similarity and added best-first while the
   prompt fits the context window; they are linearised (plain lines, or special tokens) before the
   chapter text, and the LLM writes the chapter summary. The answer joins the chapter summaries.
Chapters: metadata['chunk_chapters'] maps each chunk to its chapter number (default: one chunk, one
chapter); metadata['target_chapter'] restricts summarisation to that chapter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eval.asking import ParseFailure
from eval.datasets.sample import Sample
from eval.errors import MethodError
from eval.kg import MiniLMEmbedder, build_book_graph, chapter_edges, linearize_plain, linearize_tokens, parse_extraction, rank_edges
from eval.kg.extraction import Extraction
from eval.methods.base import Method, MethodSettings, Trace
from eval.templates import load_template
from eval.options import NonNegativeInt, PositiveInt


@dataclass(frozen=True)
class KGSettings(MethodSettings):
    context_window: PositiveInt = 4096
    max_degree: NonNegativeInt = 3        # merge heuristic 2 threshold
    min_degree: NonNegativeInt = 2        # pruning threshold
    linearization: str = "plain"  # "plain" (API models) or "tokens" (<subject>/<object>/<predicate>)
    max_tokens: PositiveInt = 512


def _parse(text: str) -> Extraction:
    # the prompt ends inside the entity list, so the output continues it
    ex = parse_extraction("Named entities:\n" + text)
    if not ex.aliases:
        raise ParseFailure("no named entities in the output")
    return ex


class KGRetrieval(Method):
    name = "kg-retrieval"
    Settings = KGSettings
    tasks = ("book", "arxiv")
    template_ids = ("s001-kg-extract", "s001-chapter-summary")

    def _validate(self) -> None:
        s = self.settings
        if s.linearization not in ("plain", "tokens"):
            raise MethodError(f"kg-retrieval: linearization must be 'plain' or 'tokens', got {s.linearization!r}")
        if s.context_window <= s.max_tokens:
            raise MethodError("kg-retrieval: context_window must exceed max_tokens")

    def _chapters(self, sample: Sample) -> list[int]:
        chapters = sample.metadata.get("chunk_chapters")
        if chapters is None:
            return list(range(1, len(sample.chunks) + 1))
        if len(chapters) != len(sample.chunks) or any(not isinstance(c, int) for c in chapters):
            raise MethodError(f"sample {sample.id}: metadata['chunk_chapters'] must give one chapter number per chunk")
        return list(chapters)

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        s = self.settings
        chapters = self._chapters(sample)
        extracted: list[tuple[int, Extraction]] = []
        for i, (chunk, ch) in enumerate(zip(sample.chunks, chapters)):
            step = trace.ask("s001-kg-extract", {"excerpt": chunk}, kind="extract", parse=_parse, chunk_index=i)
            if step.ok:
                ex: Extraction = step.parsed
                extracted.append((ch, ex))
                step.failures += [f"edge line skipped: {r}" for r in ex.rejected]
                step.parsed = {"aliases": ex.aliases, "triples": [[t.subject, t.predicate, t.object] for t in ex.triples]}
        kg, report = build_book_graph(extracted, s.max_degree, s.min_degree)
        memory = {"nodes": {n: d["names"] for n, d in kg.nodes(data=True)},
                  "edges": [[u, d["predicate"], v, d["chapter"]] for u, v, d in kg.edges(data=True)],
                  "merged": report.merged, "refused_linked": report.refused_linked,
                  "refused_degree": report.refused_degree, "pruned": report.pruned,
                  "dropped_edges": report.dropped_edges}
        target = sample.metadata.get("target_chapter")
        wanted = sorted(set(chapters)) if target is None else [int(target)]
        if target is not None and int(target) not in chapters:
            raise MethodError(f"sample {sample.id}: target_chapter {target} is not among the chunk chapters")
        embedder = MiniLMEmbedder()
        summaries = []
        for ch in wanted:
            text = "\n\n".join(c for c, k in zip(sample.chunks, chapters) if k == ch)
            edges, counts = chapter_edges(kg, text, ch)
            ranked = rank_edges(edges, embedder)
            chosen = self._fit(trace, kg, ranked, counts, text)
            lin = (linearize_plain if s.linearization == "plain" else linearize_tokens)(kg, chosen, counts)
            step = trace.ask("s001-chapter-summary", {"edges": lin or "(none)", "chapter": text}, kind="summarize",
                             chunk_index=chapters.index(ch))
            step.parsed = {"chapter": ch, "edges_ranked": len(ranked), "edges_used": len(chosen)}
            step.memory = {"chapter": ch, "retrieved": lin}
            summaries.append(step.output.strip())
        return "\n\n".join(summaries), memory

    def _fit(self, trace: Trace, kg: Any, ranked: list, counts: dict, text: str) -> list:
        """Best-ranked edges while the whole prompt stays within context_window - max_tokens."""
        tpl = load_template("s001-chapter-summary")
        budget = self.settings.context_window - self.settings.max_tokens
        base = trace.llm.count_tokens(tpl.render(edges="", chapter=text))
        chosen, used = [], base
        lin = linearize_plain if self.settings.linearization == "plain" else linearize_tokens
        for e in ranked:
            cost = trace.llm.count_tokens(lin(kg, [e], counts)) + 1
            if used + cost > budget:
                break
            chosen.append(e)
            used += cost
        return chosen
