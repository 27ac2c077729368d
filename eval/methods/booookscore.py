"""Seed 003 (BooookScore): hierarchical merging and incremental updating of book summaries.

Validity as in the official code: a summary is accepted only if it is non-empty, ends in sentence
punctuation and fits the token limit; otherwise the call is retried (bounded by max_attempts) and a
still-invalid summary is kept but recorded as a failure of that step.

Incremental updating also runs on the query tasks (RepoQA, Spider) as seed 002's adapted baseline:
the running memory is notes for the task's question (the query prompts), built chunk by chunk and
compressed like a summary, and a last call answers the question from the notes with the task's
answer instruction, read by the same contract as PRISM (`eval.methods.answers`). Notes need not end
in sentence punctuation (they may end in a name or a value); empty or over-long notes still fail.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from eval.asking import ParseFailure
from eval.datasets.sample import Sample
from eval.errors import MethodError
from eval.methods import answers
from eval.methods.base import Method, MethodSettings, Step, Trace
from eval.methods.outcomes import StepOutcome
from eval.methods.parsing import ends_in_punctuation
from eval.templates import load_template
from eval.options import PositiveInt


@dataclass(frozen=True)
class BookSettings(MethodSettings):
    max_summary_tokens: PositiveInt = 900   # validity limit of every summary (tokens of the LLM's tokenizer)
    word_limit: PositiveInt = 600           # the word budget written into the prompts
    context_window: PositiveInt = 4096      # hierarchical merging packs each merge prompt to fit this window
    max_tokens: PositiveInt = 1024


def validity_parser(trace: Trace, limit: int, sentence_end: bool = True) -> Callable[[str], str]:
    def parse(text: str) -> str:
        summary = text.strip()
        if not summary:
            raise ParseFailure("empty summary")
        n = trace.llm.count_tokens(summary)
        if n > limit:
            raise ParseFailure(f"summary has {n} tokens, above the limit of {limit}")
        if sentence_end and not ends_in_punctuation(summary):
            raise ParseFailure("summary does not end in sentence punctuation (likely cut off)")
        return summary
    return parse


def _accepted(step: Step) -> str:
    """The validated summary, or the last output when every attempt failed (the failure stays recorded,
    the outcome says `kept_invalid` when that output is not empty)."""
    if step.ok:
        return step.parsed
    if step.output.strip():
        step.outcome = StepOutcome.KEPT_INVALID
    return step.output.strip()


class _BookMethod(Method):
    Settings = BookSettings
    tasks = ("book", "arxiv")

    def _validate(self) -> None:
        s = self.settings
        if min(s.max_summary_tokens, s.word_limit, s.context_window) <= 0:
            raise MethodError(f"{self.name}: max_summary_tokens, word_limit and context_window must be positive")
        if s.context_window <= 2 * s.max_summary_tokens:
            raise MethodError(f"{self.name}: context_window ({s.context_window}) must exceed twice "
                              f"max_summary_tokens ({s.max_summary_tokens}) so that two summaries can be merged")


class HierarchicalMerging(_BookMethod):
    name = "hier-merge"
    template_ids = ("s003-hier-chunk", "s003-hier-merge", "s003-hier-merge-context")

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        s = self.settings
        parse = validity_parser(trace, s.max_summary_tokens)
        level: list[str] = []
        for i, chunk in enumerate(sample.chunks):
            step = trace.ask("s003-hier-chunk", {"chunk": chunk, "word_limit": s.word_limit}, kind="summarize",
                             parse=parse, chunk_index=i)
            level.append(_accepted(step))
            step.memory = {"level": 0, "summaries": list(level)}
        depth = 0
        while len(level) > 1:
            depth += 1
            level = self._merge_level(trace, level, depth, parse)
        return level[0], {"levels": depth, "summary": level[0]}

    def _prompt_tokens(self, trace: Trace, summaries: list[str], context: str | None) -> int:
        tid = "s003-hier-merge-context" if context else "s003-hier-merge"
        values = {"summaries": "\n\n".join(summaries), "word_limit": self.settings.word_limit}
        if context:
            values["context"] = context
        return trace.llm.count_tokens(load_template(tid).render(**values))

    def _merge_level(self, trace: Trace, level: list[str], depth: int, parse: Callable[[str], str]) -> list[str]:
        """Pack consecutive summaries into merge groups that fit the window; the previous merge is context."""
        budget = self.settings.context_window - self.settings.max_summary_tokens
        merged: list[str] = []
        i = 0
        while i < len(level):
            context = merged[-1] if merged else None
            group = [level[i]]
            i += 1
            # at least two per group (progress is guaranteed), then as many as fit
            while i < len(level) and (len(group) < 2 or self._prompt_tokens(trace, group + [level[i]], context) <= budget):
                group.append(level[i])
                i += 1
            if context is not None and self._prompt_tokens(trace, group, context) > budget:
                context = None  # the context no longer fits: merge the group without it
            if len(group) == 1 and context is None:
                merged.append(group[0])  # a lone last summary moves up unchanged
                continue
            values = {"summaries": "\n\n".join(group), "word_limit": self.settings.word_limit}
            if context is not None:
                values["context"] = context
            step = trace.ask("s003-hier-merge-context" if context else "s003-hier-merge", values, kind="merge",
                             parse=parse)
            if self._prompt_tokens(trace, group, context) > budget:
                step.failures.append(f"merge prompt exceeds the context window of {self.settings.context_window} "
                                     "tokens (two summaries must be merged to make progress)")
            merged.append(_accepted(step))
            step.memory = {"level": depth, "summaries": list(merged)}
        return merged


class IncrementalUpdating(_BookMethod):
    name = "inc-update"
    tasks = answers.SUMMARY_TASKS + answers.QUERY_TASKS
    template_ids = ("s003-inc-init", "s003-inc-update", "s003-inc-compress", "s003-inc-init-query",
                    "s003-inc-update-query", "s003-inc-compress-query", "s003-inc-answer", *answers.TEMPLATE_IDS)

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        s = self.settings
        query = sample.task in answers.QUERY_TASKS
        suffix = "-query" if query else ""
        base = {"question": answers.question(sample, self.name)} if query else {}
        # updates may run long before compression brings them back under the limit
        loose = validity_parser(trace, s.context_window, sentence_end=not query)
        strict = validity_parser(trace, s.max_summary_tokens, sentence_end=not query)
        summary = ""
        for i, chunk in enumerate(sample.chunks):
            if i == 0:
                step = trace.ask(f"s003-inc-init{suffix}", {**base, "chunk": chunk, "word_limit": s.word_limit},
                                 kind="initial", parse=strict, chunk_index=i)
            else:
                step = trace.ask(f"s003-inc-update{suffix}", {**base, "chunk": chunk, "summary": summary,
                                                              "word_limit": s.word_limit},
                                 kind="update", parse=loose, chunk_index=i)
            summary = _accepted(step)
            step.memory = summary
            if trace.llm.count_tokens(summary) > s.max_summary_tokens:
                step = trace.ask(f"s003-inc-compress{suffix}", {**base, "summary": summary,
                                                                "words": len(summary.split()), "word_limit": s.word_limit},
                                 kind="compress", parse=strict, chunk_index=i)
                if step.outcome == StepOutcome.OK:
                    step.outcome = StepOutcome.COMPRESSED
                summary = _accepted(step)
                step.memory = summary
        if not query:
            return summary, summary
        final = trace.ask("s003-inc-answer", {**base, "summary": summary,
                                              "answer_instruction": answers.answer_instruction(trace, sample.task)},
                          kind="final")
        final.memory = summary
        return answers.read_answer(sample.task, final.output), summary
