"""Seed 001: chapter summarisation with knowledge-graph retrieval, and its No-KG baseline.

`kg-retrieval`:
1. Every chunk goes through the extraction prompt (entities with aliases, edges).
2. memloop.eval.kg builds the book graph: names graph, initial nodes, merging with the two heuristics,
   pruning of nodes with degree < min_degree (repeated).
3. For each chapter, the edges among entities mentioned in it (from that chapter or earlier) are
   ranked by the keyword-weighted, z-normalised MiniLM similarity and the best-ranked ones kept while
   the whole prompt (measured as rendered, so grouped subjects are paid once) and `max_tokens` fit the
   served model's window; they are linearised before the chapter text and the LLM writes
   the chapter summary. Linearisations (section 3.4): `plain` (one `subject; predicate; object` line
   per edge, for API models) or `tokens` (`<subject>`/`<object>`/`<predicate>` groups, then the
   `<chapter>` marker and the chapter text, the fine-tuned models' input). The answer joins the
   chapter summaries.
The graph's extraction model is a setting of its own (`extraction_model`): "judge" (the default), the
model the run hands the method for it (the run's `graph_model`, else its judge model: the paper extracted
with gpt-3.5-turbo, a model other than its GPT-4 summariser and weaker, section 3.3); or "self", the model
under test. The memory records which model
extracted (`extraction`), and the report names it in the table note.
`no-kg` (section 4.2's No-KG baseline): the same chapters summarised from the chapter text alone,
with the same instruction less the knowledge graph; no extraction and no graph.

Chain of Density (section 4.2's GPT-4 rows, Adams et al. 2023), `density_rounds: n`: the first
summary is a deliberately sparse draft, as Adams et al. make it (about `density_words` words naming only
one to three entities, the rest general filler; templates `s001-density-first`, `s001-density-first-nokg`),
so that densifying has entities to add; then n more calls, one per densification round, each given the chapter (and, for
`kg-retrieval`,
the retrieved edges refitted around the current summary) and the current summary, name one to three
missing entities and rewrite the summary at the same length with them (`density_words`, about 80
words: the first summary asks for it and every round keeps it); the last round's summary is
the answer. A round whose answer cannot be read keeps the summary it was given (the failure is
recorded). The rounds use the plain linearisation, as the paper's GPT-4 rows did.

Chapters: metadata['chunk_chapters'] maps each chunk to its chapter number (default: one chunk, one
chapter; the book loader's `chunk_by: chapter` makes chunks follow the book's chapter headings);
metadata['target_chapter'] restricts summarisation to that chapter.

Whether a prompt fits is the LLM's own check when it has one (the engine's, chat template and
`max_tokens` included), else a token count against `context_window`, the window the LLM reports, or
8192. A chapter whose prompt does not fit even without edges makes the sample not applicable to the
model (recorded as "n/a" with the reason), before any call, rather than a request the engine refuses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from memloop.eval.asking import ParseFailure, build_request
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.kg import (
    MiniLMEmbedder,
    build_book_graph,
    chapter_edges,
    linearize_plain,
    linearize_tokens,
    parse_extraction,
    rank_edges,
)
from memloop.eval.kg.extraction import Extraction
from memloop.eval.methods.base import Method, MethodSettings, Trace
from memloop.eval.methods.long_context import context_window
from memloop.eval.methods.outcomes import StepOutcome
from memloop.eval.methods.registry import method
from memloop.eval.options import MaxTokens, NonNegativeInt, PositiveInt
from memloop.eval.templates import load_template

SUMMARY_TEMPLATES = {"plain": "s001-chapter-summary", "tokens": "s001-chapter-summary-tokens"}
DENSITY_TEMPLATE, NO_KG_DENSITY_TEMPLATE = "s001-density", "s001-density-nokg"
# Chain of Density's first summary: deliberately sparse (few entities, filler), so the rounds have entities to add
DENSITY_FIRST_TEMPLATE, NO_KG_DENSITY_FIRST_TEMPLATE = "s001-density-first", "s001-density-first-nokg"
LINEARIZE = {"plain": linearize_plain, "tokens": linearize_tokens}
NO_KG_TEMPLATE = "s001-chapter-summary-nokg"


@dataclass(frozen=True)
class ChapterSettings(MethodSettings):
    context_window: PositiveInt | None = None  # prompt + output tokens; None: the served model's window
    max_tokens: MaxTokens = 512
    density_rounds: NonNegativeInt = 0  # Chain of Density rounds after the first summary (the paper's GPT-4 rows: 4)
    # Chain of Density's length: the first summary about this many words, every round keeping it
    # (Adams et al.'s ~80 words; the paper's appendix G summaries are 58-80 words)
    density_words: PositiveInt = 80


@dataclass(frozen=True)
class KGSettings(ChapterSettings):
    max_degree: NonNegativeInt = 3  # merge heuristic 2 threshold
    min_degree: NonNegativeInt = 2  # pruning threshold
    linearization: str = "plain"  # "plain" (API models) or "tokens" (<subject>/<object>/<predicate>, <chapter>)
    extraction_model: str = "judge"  # "judge": the run's judge model extracts the graph; "self": the model under test


def _dense(text: str) -> dict[str, Any]:
    """One Chain of Density answer: the missing entities and the denser summary (the prompt ends inside
    the "Missing entities:" line, so the output continues it)."""
    head, sep, summary = text.partition("Denser summary:")
    summary = summary.strip() if sep else ""
    if not summary:
        raise ParseFailure("no 'Denser summary:' with a summary in the output")
    missing = [e.strip() for e in head.replace("Missing entities:", "").split(";") if e.strip()]
    return {"missing": missing, "summary": summary}


def _parse(text: str) -> Extraction:
    # the prompt ends inside the entity list, so the output continues it
    ex = parse_extraction("Named entities:\n" + text)
    if not ex.aliases:
        raise ParseFailure("no named entities in the output")
    return ex


class _ChapterSummaries(Method, ABC):
    """Chapter-wise summarisation of a book: the chapters to summarise and the loop over them."""

    tasks = ("booksum", "book", "arxiv")

    def _validate(self) -> None:
        window = self.settings.context_window
        if window is not None and window <= self.settings.max_tokens:
            raise MethodError(f"{self.name}: context_window must exceed max_tokens")

    def _misfit(self, trace: Trace, prompt: str) -> str | None:
        """Why this chapter prompt cannot be served with `max_tokens`, or None. The LLM's own check
        when it has one (the engine's, chat template included), else prompt tokens + `max_tokens`
        against `context_window`, else the window the LLM reports, else 8192; a `context_window`
        setting below the engine's window is checked by both."""
        s = self.settings
        check = getattr(trace.llm, "misfit", None)
        if callable(check) and s.context_window is None:
            return check(build_request(prompt, s.sampling()))
        window, source = context_window(s.context_window, trace.llm)
        needed = trace.llm.count_tokens(prompt) + s.max_tokens
        if needed > window:
            return f"{needed} tokens needed (prompt and max_tokens={s.max_tokens}) > context_window={window} ({source})"
        return check(build_request(prompt, s.sampling())) if callable(check) else None

    def _first_values(self) -> dict[str, Any]:
        """The first summary's values beyond the chapter: Chain of Density's length, nothing without rounds."""
        return {"words": self.settings.density_words} if self.settings.density_rounds else {}

    @staticmethod
    def _text(sample: Sample, chapters: list[int], chapter: int) -> str:
        return "\n\n".join(c for c, k in zip(sample.chunks, chapters) if k == chapter)

    @abstractmethod
    def _bare_prompt(self, text: str) -> str:
        """The chapter's summary prompt with nothing retrieved: the least a chapter needs."""

    @abstractmethod
    def _bare_density_prompt(self, text: str, summary: str) -> str:
        """A Chain of Density round's prompt with nothing retrieved."""

    def _bare_prompts(self, text: str) -> list[str]:
        """The prompts a chapter needs at the least: its summary prompt and, with Chain of Density, a
        round's prompt holding a summary as long as max_tokens allows (one token a word, about)."""
        out = [self._bare_prompt(text)]
        if self.settings.density_rounds:
            out.append(self._bare_density_prompt(text, " ".join(["word"] * self.settings.max_tokens)))
        return out

    def _does_not_fit(self, sample: Sample, trace: Trace, chapters: list[int]) -> bool:
        """Mark the sample not applicable when a wanted chapter's bare prompt cannot be served."""
        over = [
            (ch, self._misfit(trace, prompt))
            for ch in self._wanted(sample, chapters)
            for prompt in self._bare_prompts(self._text(sample, chapters, ch))
        ]
        over = list({ch: why for ch, why in over if why is not None}.items())
        if over:
            trace.not_applicable = (
                "the chapter does not fit the model's context even without retrieved edges: "
                + "; ".join(f"chapter {ch}: {why}" for ch, why in over)
            )
        return bool(over)

    def _chapters(self, sample: Sample) -> list[int]:
        chapters = sample.metadata.get("chunk_chapters")
        if chapters is None:
            return list(range(1, len(sample.chunks) + 1))
        if len(chapters) != len(sample.chunks) or any(not isinstance(c, int) for c in chapters):
            raise MethodError(f"sample {sample.id}: metadata['chunk_chapters'] must give one chapter number per chunk")
        return list(chapters)

    def _wanted(self, sample: Sample, chapters: list[int]) -> list[int]:
        target = sample.metadata.get("target_chapter")
        if target is None:
            return sorted(set(chapters))
        if int(target) not in chapters:
            raise MethodError(f"sample {sample.id}: target_chapter {target} is not among the chunk chapters")
        return [int(target)]

    def _summaries(self, sample: Sample, trace: Trace, chapters: list[int], context: Any) -> str:
        summaries = []
        for ch in self._wanted(sample, chapters):
            text = self._text(sample, chapters, ch)
            tpl, values, parsed, memory = self._chapter_prompt(trace, context, ch, text)
            step = trace.ask(tpl, values, kind="summarize", chunk_index=chapters.index(ch))
            step.parsed = {"chapter": ch, **parsed}
            step.memory = {"chapter": ch, **memory}
            summary = step.output.strip()
            for r in range(self.settings.density_rounds):
                tpl, values, parsed = self._density_prompt(trace, context, ch, text, summary)
                step = trace.ask(tpl, values, kind="densify", parse=_dense, chunk_index=chapters.index(ch))
                if step.ok:
                    summary = step.parsed["summary"]
                    step.parsed = {"chapter": ch, "round": r + 1, **step.parsed, **parsed}
                step.memory = {"chapter": ch, "summary": summary}
            summaries.append(summary)
        return "\n\n".join(summaries)

    @abstractmethod
    def _density_prompt(
        self, trace: Trace, context: Any, chapter: int, text: str, summary: str
    ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """(template id, values, step.parsed extras) of one Chain of Density round."""

    @abstractmethod
    def _chapter_prompt(
        self, trace: Trace, context: Any, chapter: int, text: str
    ) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(template id, values, step.parsed extras, step.memory extras) of one chapter's summary prompt."""


@method("kg-retrieval")
class KGRetrieval(_ChapterSummaries):
    Settings = KGSettings
    template_ids = ("s001-kg-extract", *SUMMARY_TEMPLATES.values(), DENSITY_FIRST_TEMPLATE, DENSITY_TEMPLATE)

    def _validate(self) -> None:
        super()._validate()
        if self.settings.linearization not in SUMMARY_TEMPLATES:
            raise MethodError(
                f"kg-retrieval: linearization must be 'plain' or 'tokens', got {self.settings.linearization!r}"
            )
        if self.settings.extraction_model not in ("judge", "self"):
            raise MethodError(
                f"kg-retrieval: extraction_model must be 'judge' (the run's judge model) or 'self' (the "
                f"model under test), got {self.settings.extraction_model!r}"
            )
        if self.settings.density_rounds and self.settings.linearization != "plain":
            raise MethodError(
                "kg-retrieval: Chain of Density (density_rounds) runs with the plain linearisation, as "
                "the paper's GPT-4 rows; set linearization: plain or density_rounds: 0"
            )

    def asks_judge(self) -> bool:
        return self.settings.extraction_model == "judge"

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        s = self.settings
        chapters = self._chapters(sample)
        if self._does_not_fit(sample, trace, chapters):  # also fails a bad target chapter before any call
            return "", None
        extracted: list[tuple[int, Extraction]] = []
        # the judge when the run gives one; a caller without a judge model has the model under test extract
        extractor = trace.judge if s.extraction_model == "judge" and trace.judge is not None else trace.llm
        for i, (chunk, ch) in enumerate(zip(sample.chunks, chapters)):
            step = trace.ask(
                "s001-kg-extract", {"excerpt": chunk}, kind="extract", parse=_parse, chunk_index=i, llm=extractor
            )
            if step.ok:
                ex: Extraction = step.parsed
                extracted.append((ch, ex))
                step.failures += [f"edge line skipped: {r}" for r in ex.rejected]
                step.parsed = {
                    "aliases": ex.aliases,
                    "triples": [[t.subject, t.predicate, t.object] for t in ex.triples],
                }
                if not ex.triples:  # entities without edges: nothing to retrieve from this chunk
                    step.outcome = StepOutcome.EMPTY
            else:  # left out of the graph: without this outcome a KG row could silently be the No-KG row
                step.outcome = StepOutcome.EXTRACTION_FAILED
        kg, report = build_book_graph(extracted, s.max_degree, s.min_degree)
        memory = {
            "nodes": {n: d["names"] for n, d in kg.nodes(data=True)},
            "edges": [[u, d["predicate"], v, d["chapter"]] for u, v, d in kg.edges(data=True)],
            "merged": report.merged,
            "refused_linked": report.refused_linked,
            "refused_degree": report.refused_degree,
            "pruned": report.pruned,
            "dropped_edges": report.dropped_edges,
            "extraction": {"setting": s.extraction_model, "model": extractor.name, "judge": extractor is not trace.llm},
        }
        return self._summaries(sample, trace, chapters, (kg, MiniLMEmbedder())), memory

    def _chapter_prompt(
        self, trace: Trace, context: Any, chapter: int, text: str
    ) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
        kg, embedder = context
        edges, counts = chapter_edges(kg, text, chapter)
        ranked = rank_edges(edges, embedder)
        values = {"chapter": text, **self._first_values()}
        template = self._first_template()
        chosen = self._fit(trace, kg, ranked, counts, template, values)
        lin = self._edges_text(kg, chosen, counts)
        return (
            template,
            {"edges": lin, **values},
            {"edges_ranked": len(ranked), "edges_used": len(chosen)},
            {"retrieved": lin},
        )

    def _density_prompt(
        self, trace: Trace, context: Any, chapter: int, text: str, summary: str
    ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        kg, embedder = context
        edges, counts = chapter_edges(kg, text, chapter)
        ranked = rank_edges(edges, embedder)
        values = {"chapter": text, "summary": summary, "words": self.settings.density_words}
        chosen = self._fit(trace, kg, ranked, counts, DENSITY_TEMPLATE, values)
        return DENSITY_TEMPLATE, {**values, "edges": self._edges_text(kg, chosen, counts)}, {"edges_used": len(chosen)}

    def _bare_density_prompt(self, text: str, summary: str) -> str:
        return load_template(DENSITY_TEMPLATE).render(
            edges="(none)", chapter=text, summary=summary, words=self.settings.density_words
        )

    def _edges_text(self, kg: Any, edges: list, counts: dict) -> str:
        lin = LINEARIZE[self.settings.linearization](kg, edges, counts)
        return "(none)" if not lin and self.settings.linearization == "plain" else lin

    def _bare_prompt(self, text: str) -> str:
        return load_template(self._first_template()).render(
            edges="(none)" if self.settings.linearization == "plain" else "", chapter=text, **self._first_values()
        )

    def _first_template(self) -> str:
        # Chain of Density runs with the plain linearisation only (checked in _validate)
        return (
            DENSITY_FIRST_TEMPLATE if self.settings.density_rounds else SUMMARY_TEMPLATES[self.settings.linearization]
        )

    def _fit(self, trace: Trace, kg: Any, ranked: list, counts: dict, template: str, values: dict[str, Any]) -> list:
        """The longest best-ranked prefix of the edges whose whole rendered prompt can still be served
        (a binary search: the prompt only grows with more edges). Measuring the prompt as rendered
        charges each subject and object heading once, as the token linearisation writes it, where
        pricing each edge alone charged them again for every edge."""
        tpl = load_template(template)

        def fits(n: int) -> bool:
            prompt = tpl.render(edges=self._edges_text(kg, ranked[:n], counts), **values)
            return self._misfit(trace, prompt) is None

        lo, hi = 0, len(ranked)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        return ranked[:lo]


@method("no-kg")
class NoKG(_ChapterSummaries):
    """Seed 001's No-KG baseline: each chapter summarised from its text alone."""

    Settings = ChapterSettings
    template_ids = (NO_KG_TEMPLATE, NO_KG_DENSITY_FIRST_TEMPLATE, NO_KG_DENSITY_TEMPLATE)

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        chapters = self._chapters(sample)
        if self._does_not_fit(sample, trace, chapters):
            return "", None
        return self._summaries(sample, trace, chapters, None), None

    def _bare_prompt(self, text: str) -> str:
        return load_template(self._first_template()).render(chapter=text, **self._first_values())

    def _first_template(self) -> str:
        return NO_KG_DENSITY_FIRST_TEMPLATE if self.settings.density_rounds else NO_KG_TEMPLATE

    def _bare_density_prompt(self, text: str, summary: str) -> str:
        return load_template(NO_KG_DENSITY_TEMPLATE).render(
            chapter=text, summary=summary, words=self.settings.density_words
        )

    def _density_prompt(
        self, trace: Trace, context: Any, chapter: int, text: str, summary: str
    ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        return NO_KG_DENSITY_TEMPLATE, {"chapter": text, "summary": summary, "words": self.settings.density_words}, {}

    def _chapter_prompt(
        self, trace: Trace, context: Any, chapter: int, text: str
    ) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
        return self._first_template(), {"chapter": text, **self._first_values()}, {}, {}
