"""Seed 003 (BooookScore): hierarchical merging and incremental updating of book summaries, following
the control flow of the official code (`booookscore/summ.py`).

Validity as in the official code: a summary is accepted only if it is non-empty, ends in sentence
punctuation and fits its token limit; otherwise the call is retried (bounded by max_attempts) and a
still-invalid summary is kept but recorded as a failure of that step. Hierarchical merging retries
as the official `summarize` does: up to 7 calls, the retries at temperature 1, each retry's word
limit the previous one's times (1 - 0.1 x its index), so 1, 1, 0.9, 0.72, ... of the first
(`HierSettings`).

Hierarchical merging: each level has its own token limit, and its prompts ask for 0.65 of it in
words (`word_ratio`). The limits come from the number of levels the book needs (merges packed into
`context_window`, 8192 as in the official GPT-4 runs): the top level gets `max_summary_tokens`, each
level below 0.65 of the one above; a level whose whole input fits one merge with the full limit gets
the full limit. Merges are packed with "Summary k:" labels, and from the second group of a level on
the previous merge is given as context (cut to a fifth of the room, at a sentence end) and merged
with the summaries, as the official context prompt says. The packing counts as the official code
does (`count_tokens`, cl100k in the config) against `context_window`, and every merge must also fit
the model's own window in the model's tokens, its output cap included (`caps.fits_window`): a
group stops growing at whichever limit comes first, and a context too long for two summaries to
fit beside it is cut further. Output caps are the summary limits converted to the model's tokens.

Incremental updating: the first chunk is summarised, each next one updates the summary; the prompts
carry no word limit. As in the official code, an update is asked once: when it is invalid (too
long or cut off), the previous summary is compressed at once (no retry of the update first) to a
word budget that grows with progress through the book (0.65 x `max_summary_tokens` x j / n before
chunk j of n), accepted within 0.8-1.2 of the budget, and the update is redone on it; each further
try asks for 5% fewer words (`compress_rounds` tries, official 6). Compression samples at
`compress_temperature` (the official 1.0), the other calls at the run's temperature.

Incremental updating also runs on the query tasks (RepoQA, Spider) as seed 002's adapted baseline:
the running memory is notes for the task's question, built and compressed the same way with the
same order as Chang et al.'s update prompt (the new part first, then the question and the notes,
no word limit: the only budget is the compress-and-redo one), and a last call answers the question
from the notes with the task's answer instruction, read by the same contract as PRISM
(`memloop.eval.methods.answers`). Notes need not end in sentence punctuation (they may end in a name or a
value); empty or over-long notes still fail, and so does an update cut at the output cap (the official code
compresses a response that reaches its limit; the sentence-end check that catches this on books is off).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Callable

from memloop.eval.asking import ParseFailure
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.methods import answers
from memloop.eval.methods.base import Method, MethodSettings, Trace
from memloop.eval.methods.caps import fits_window, model_tokens
from memloop.eval.methods.outcomes import StepOutcome
from memloop.eval.methods.parsing import ends_in_punctuation
from memloop.eval.methods.procedure import Procedure, StepRule, counter_text, from_settings
from memloop.eval.methods.registry import method
from memloop.eval.methods.step import Step
from memloop.eval.options import MaxTokens, PositiveInt, Temperature
from memloop.eval.templates import load_template
from pydantic import Field

WORD_RATIO = 0.65  # the official code's words per token of a summary limit
CONTEXT_SHARE = 0.2  # the previous merge may use a fifth of a merge prompt's room as context
SLACK = 20  # tokens the official code keeps free in every prompt


@dataclass(frozen=True)
class BookSettings(MethodSettings):
    max_summary_tokens: PositiveInt = 900  # token limit of the final summary (the official max_summary_len)
    word_limit: PositiveInt | None = None  # words asked at that limit; None: 0.65 x max_summary_tokens
    context_window: PositiveInt = 8192  # merge prompts are packed to fit this window (official GPT-4 runs)
    compress_rounds: PositiveInt = 6  # incremental updating: compress-and-redo tries per chunk
    compress_temperature: Temperature = 1.0  # incremental updating compresses at the official code's temperature
    max_tokens: MaxTokens = 1024

    def cap_text(self, limit: str) -> str | int:
        """`out_tokens` for the procedure card: the cap itself where the limit counts the model's tokens,
        else the rule (the limit, named by `limit`, converted per call at the text's ratio)."""
        if self.count_tokens != "cl100k":
            return min(self.max_tokens, self.max_summary_tokens)
        return f"{limit} (cl100k_base) in model tokens, at most {self.max_tokens}"

    def out_tokens(self, trace: Trace, limit: int, text: str) -> int:
        """The output cap of a summary limited to `limit` budget tokens: the limit in the model's tokens
        (at `text`'s ratio, so a summary within its limit is never cut), at most `max_tokens`."""
        return min(self.max_tokens, model_tokens(trace, limit, text))


@dataclass(frozen=True)
class HierSettings(BookSettings):
    """Hierarchical merging's retries, as the official `summarize`: the first call at the run's temperature,
    then retries at `retry_temperature` with a word limit shrunk by `word_shrink` x the retry's index."""

    max_attempts: PositiveInt = 7  # the official code: the first call and up to 6 retries
    retry_temperature: Temperature = 1.0  # the official retries sample at temperature 1
    word_shrink: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1  # retry i's words: the previous x (1 - 0.1 i)


def retry_word_limits(first: int, attempts: int, shrink: float) -> list[int]:
    """The word limit asked on each of `attempts` calls, as the official `summarize` lowers it: the first
    call's, then retry i (0-based) the previous one's times (1 - shrink x i): 1, 1, 0.9, 0.72, ... of it."""
    limits, words = [first], float(first)
    for i in range(attempts - 1):
        words *= 1 - shrink * i
        limits.append(max(1, round(words)))
    return limits


def validity_parser(
    trace: Trace, limit: int, sentence_end: bool = True, words: tuple[int, int] | None = None, at_limit_ok: bool = True
) -> Callable[[str], str]:
    """`at_limit_ok`: a summary of exactly `limit` tokens passes (hierarchical merging's official check,
    `>`); incremental updating's official code compresses one that reaches the limit (`>=`)."""

    def parse(text: str) -> str:
        summary = text.strip()
        if not summary:
            raise ParseFailure("empty summary")
        n = trace.count_tokens(summary)
        if n > limit or (n == limit and not at_limit_ok):
            raise ParseFailure(f"summary has {n} tokens, {'reaching' if n == limit else 'above'} the limit of {limit}")
        if sentence_end and not ends_in_punctuation(summary):
            raise ParseFailure("summary does not end in sentence punctuation (likely cut off)")
        if words is not None and not words[0] <= len(summary.split()) <= words[1]:
            raise ParseFailure(f"summary has {len(summary.split())} words, outside {words[0]}-{words[1]}")
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
        if s.context_window <= 2 * s.max_summary_tokens:
            raise MethodError(
                f"{self.name}: context_window ({s.context_window}) must exceed twice "
                f"max_summary_tokens ({s.max_summary_tokens}) so that two summaries can be merged"
            )

    def _words(self, tokens: int) -> int:
        """Words asked of a summary limited to `tokens` (the top level's `word_limit` scales the same way)."""
        s = self.settings
        top = s.word_limit if s.word_limit is not None else round(WORD_RATIO * s.max_summary_tokens)
        return max(1, round(top * tokens / s.max_summary_tokens))


@method("hier-merge")
class HierarchicalMerging(_BookMethod):
    Settings = HierSettings
    template_ids = ("s003-hier-chunk", "s003-hier-merge", "s003-hier-merge-context")

    def procedure(self, task: str) -> Procedure:
        s = self.settings
        rule = StepRule(
            "merge (chunks: summarize)",
            f"empty, no sentence-end punctuation, or above the level's limit (top {s.max_summary_tokens}, "
            f"{counter_text(s)})",
            "fails the sentence-end check: " + ("retried, then " if s.max_attempts > 1 else "") + "kept",
            "the last output is kept (kept_invalid)",
        )
        return from_settings(s, rule, output_cap=s.cap_text(f"the level's summary limit (top {s.max_summary_tokens})"))

    def _summarise(self, trace: Trace, tid: str, values: dict[str, Any], limit: int, text: str, **kw: Any) -> Step:
        """One summary as the official `summarize` asks it: retries lower the word limit they ask for."""
        s = self.settings
        words = retry_word_limits(self._words(limit), s.max_attempts, s.word_shrink)
        return trace.ask(
            tid,
            {**values, "word_limit": words[0]},
            parse=validity_parser(trace, limit),
            max_tokens=s.out_tokens(trace, limit, text),
            retry_values=lambda attempt: {**values, "word_limit": words[attempt]},
            **kw,
        )

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        limits = self._level_limits(trace, sample.chunks)
        level: list[str] = []
        limit = self._limit(trace, limits, 0, list(sample.chunks), "s003-hier-chunk")
        for i, chunk in enumerate(sample.chunks):
            step = self._summarise(
                trace, "s003-hier-chunk", {"chunk": chunk}, limit, chunk, kind="summarize", chunk_index=i
            )
            level.append(_accepted(step))
            step.memory = {"level": 0, "limit": limit, "summaries": list(level)}
        depth = 0
        while len(level) > 1:
            depth += 1
            level = self._merge_level(trace, level, depth, limits)
        return level[0], {"levels": depth, "limits": limits, "summary": level[0]}

    def _bare(self, trace: Trace, tid: str) -> int:
        values = {"chunk": "", "summaries": "", "context": "", "word_limit": 0}
        tpl = load_template(tid)
        return trace.count_tokens(tpl.render(**{k: values[k] for k in tpl.fields}))

    def _level_limits(self, trace: Trace, chunks: tuple[str, ...]) -> list[int]:
        """Token limit per level: the top gets max_summary_tokens, each level below 0.65 of the next
        (the official `estimate_levels`, with the book's longest chunk as the chunk size)."""
        s = self.settings
        n, size = len(chunks), max((trace.count_tokens(c) for c in chunks), default=1)
        fit_room = s.context_window - self._bare(trace, "s003-hier-merge") - SLACK
        levels = 0
        while n > 1:
            n = math.ceil(n / max(2, fit_room // max(1, size)))
            size = s.max_summary_tokens // 2  # a merged summary's size as the official estimate takes it (450 of 900)
            levels += 1
        limits = [s.max_summary_tokens]
        for _ in range(levels - 1):
            limits.append(int(limits[-1] * WORD_RATIO))
        return limits[::-1] or [s.max_summary_tokens]

    def _limit(self, trace: Trace, limits: list[int], depth: int, items: list[str], tid: str) -> int:
        """This level's limit; the full one when the level's whole input fits one prompt with it."""
        s = self.settings
        whole = trace.count_tokens("\n\n".join(items)) + s.max_summary_tokens + self._bare(trace, tid) + SLACK
        if whole <= s.context_window or depth >= len(limits):
            return s.max_summary_tokens
        return limits[depth]

    def _merge_level(self, trace: Trace, level: list[str], depth: int, limits: list[int]) -> list[str]:
        """Pack consecutive summaries ("Summary k:") into merges that fit both the official room (counted
        as the paper counts) and the model's window (in its own tokens, with the output cap); from the
        second merge on, the previous merge of this level is the context, merged with the summaries."""
        s = self.settings
        limit = self._limit(trace, limits, depth, level, "s003-hier-merge-context")
        room = s.context_window - limit - self._bare(trace, "s003-hier-merge-context") - SLACK
        count = trace.count_tokens
        out = s.out_tokens(trace, limit, "\n\n".join(level))
        words = self._words(limit)

        def model_fits(group: list[str], context: str) -> bool:  # the model's window, in its tokens
            tid = "s003-hier-merge-context" if context else "s003-hier-merge"
            prompt = load_template(tid).render(summaries=_labelled(group), context=context, word_limit=words)
            return fits_window(trace, prompt, out, s.context_window)

        def fits(group: list[str], context: str) -> bool:  # the official packing, then the model's window
            return count(context + _labelled(group)) + SLACK <= room and model_fits(group, context)

        merged: list[str] = []
        i = 0
        while i < len(level):
            context = self._context(trace, merged[-1], room) if merged else ""
            group = [level[i]]
            i += 1
            # at least two per merge (every level shrinks), then as many as fit
            while i < len(level) and (len(group) < 2 or fits(group + [level[i]], context)):
                group.append(level[i])
                i += 1
            if len(group) == 1 and not context:
                merged.append(group[0])  # a lone last summary moves up unchanged
                continue
            context = self._fitting_context(trace, group, context, model_fits)
            values = {"summaries": _labelled(group)}
            if context:
                values["context"] = context
            step = self._summarise(
                trace,
                "s003-hier-merge-context" if context else "s003-hier-merge",
                values,
                limit,
                "\n\n".join(level),
                kind="merge",
            )
            if count(context + _labelled(group)) + SLACK > room:
                step.failures.append(
                    f"merge prompt exceeds the context window of {s.context_window} tokens "
                    "(two summaries must be merged to make progress)"
                )
            merged.append(_accepted(step))
            step.memory = {"level": depth, "limit": limit, "summaries": list(merged)}
        return merged

    def _fitting_context(
        self, trace: Trace, group: list[str], context: str, fits: Callable[[list[str], str], bool]
    ) -> str:
        """The context, cut further (halving its room, at a sentence end) until the merge fits the model's
        window; none at all if even that does not. A pair that fits neither way cannot be merged here."""
        cap = trace.count_tokens(context)
        while context and not fits(group, context):
            cap //= 2
            context = _cut(trace, context, cap) if cap > 0 else ""
        if not fits(group, context):
            raise MethodError(
                f"{self.name}: {len(group)} summaries at this level do not fit the model's window "
                f"with an output cap for {self.settings.max_summary_tokens}-token summaries; use a "
                "model with a longer context or a lower max_summary_tokens"
            )
        return context

    @staticmethod
    def _context(trace: Trace, previous: str, room: int) -> str:
        """The previous merge as context, cut to a fifth of the room at its last full sentence."""
        return _cut(trace, previous, math.floor(CONTEXT_SHARE * room))


def _cut(trace: Trace, previous: str, cap: int) -> str:
    """`previous` cut to at most `cap` tokens, at its last full sentence."""
    if trace.count_tokens(previous) <= cap:
        return previous
    words = previous.split()
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if trace.count_tokens(" ".join(words[:mid])) <= cap else (lo, mid - 1)
    cut = " ".join(words[:lo])
    return cut.rsplit(".", 1)[0] + "." if "." in cut else cut


def _labelled(summaries: list[str]) -> str:
    return "\n\n".join(f"Summary {k}:\n\n{text}" for k, text in enumerate(summaries, 1))


def _reject_cut(step: Step, cap: int) -> None:
    """Notes that reached the output cap lost their tail: not ok, so they are compressed and the update
    redone, as the official code does with a response that reaches the limit (the sentence-end check,
    which catches a cut summary on books, is off for notes)."""
    step.ok = False
    step.parsed = None
    step.outcome = StepOutcome.CUT_AT_MAX_TOKENS
    step.failures.append(f"attempt {step.attempts}: the notes reached the output cap of {cap} tokens (cut off)")


@method("inc-update")
class IncrementalUpdating(_BookMethod):
    UPDATE_ATTEMPTS = 1  # the official code asks an update once, then compresses (`_compress_and_redo`)
    tasks = answers.SUMMARY_TASKS + answers.QUERY_TASKS
    template_ids = (
        "s003-inc-init",
        "s003-inc-update",
        "s003-inc-compress",
        "s003-inc-init-query",
        "s003-inc-update-query",
        "s003-inc-compress-query",
        "s003-inc-answer",
        *answers.TEMPLATE_IDS,
        "mab-answer-notes",
    )

    def procedure(self, task: str) -> Procedure:
        s = self.settings
        query = task in answers.QUERY_TASKS
        counter = counter_text(s)
        if query:
            validity = (
                f"empty, reaching max_summary_tokens ({s.max_summary_tokens}, {counter}; official: >=), "
                "or cut at the cap"
            )
            cut = "not ok: compressed and redone, as the official code treats a response reaching the limit"
        else:
            validity = (
                f"empty, no sentence-end punctuation, or reaching max_summary_tokens ({s.max_summary_tokens}, "
                f"{counter})"
            )
            cut = "fails the sentence-end check: compressed and redone"
        rule = StepRule(
            "update",
            validity,
            cut,
            f"the previous summary is compressed and the update redone, up to {s.compress_rounds} "
            "rounds (official code); if none is valid, the last output is kept (kept_invalid)",
        )
        return from_settings(
            s,
            rule,
            output_cap=s.cap_text(f"max_summary_tokens {s.max_summary_tokens}"),
            attempts=self.UPDATE_ATTEMPTS,
            other_temperatures=f"compress {s.compress_temperature:g} (official code)",
        )

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        if sample.task not in answers.QUERY_TASKS:
            summary = self.build_notes(sample, trace, None)
            return summary, summary
        question = answers.question(sample, self.name)
        summary = self.build_notes(sample, trace, question)
        final = trace.ask(
            "s003-inc-answer",
            {
                "question": question,
                "summary": summary,
                "answer_instruction": answers.answer_instruction(trace, sample.task),
            },
            kind="final",
        )
        final.memory = summary
        return answers.read_answer(sample.task, final.output), summary

    def build_notes(self, sample: Sample, trace: Trace, question: str | None) -> str:
        """The running summary over every chunk: the book prompts (`question` None), or notes for
        `question` (the query prompts); the answer step is the caller's."""
        s = self.settings
        query = question is not None
        suffix = "-query" if query else ""
        base = {"question": question} if query else {}
        valid = validity_parser(trace, s.max_summary_tokens, sentence_end=not query, at_limit_ok=False)
        n = len(sample.chunks)

        def update(chunk: str, summary: str, j: int) -> Step:
            # one try: the official code compresses after the first invalid update instead of asking again
            out_tokens = s.out_tokens(trace, s.max_summary_tokens, chunk)
            step = trace.ask(
                f"s003-inc-update{suffix}",
                {**base, "chunk": chunk, "summary": summary},
                kind="update",
                parse=valid,
                chunk_index=j,
                max_tokens=out_tokens,
                max_attempts=self.UPDATE_ATTEMPTS,
            )
            if query and step.ok and step.cut:
                _reject_cut(step, out_tokens)
            return step

        summary = ""
        for j, chunk in enumerate(sample.chunks):
            if j == 0:
                # asked once and never checked again by the official code (no summary to compress yet)
                step = trace.ask(
                    f"s003-inc-init{suffix}",
                    {**base, "chunk": chunk},
                    kind="initial",
                    parse=valid,
                    chunk_index=j,
                    max_attempts=self.UPDATE_ATTEMPTS,
                    max_tokens=s.out_tokens(trace, s.max_summary_tokens, chunk),
                )
            else:
                step = update(chunk, summary, j)
                if not step.ok:
                    step = self._compress_and_redo(trace, summary, chunk, j, n, base, suffix, update) or step
            summary = _accepted(step)
            step.memory = summary
        return summary

    def _compress_and_redo(
        self,
        trace: Trace,
        previous: str,
        chunk: str,
        j: int,
        n: int,
        base: dict[str, Any],
        suffix: str,
        update: Callable[[str, str, int], Step],
    ) -> Step | None:
        """The official recovery from an invalid update: compress the previous summary to a budget that
        grows with progress (j / n of the word limit), then redo the update on it; each try asks 5%
        fewer words. Returns the first valid redone update, else the last one tried (None if no
        compression was ever valid)."""
        s = self.settings
        budget = max(1, int(self._words(s.max_summary_tokens) * j / n))
        last: Step | None = None
        for t in range(s.compress_rounds):
            target = max(1, int(budget * (1 - 0.05 * t)))
            parse = validity_parser(
                trace, s.max_summary_tokens, sentence_end=not suffix, words=(int(target * 0.8), int(target * 1.2))
            )
            c = trace.ask(
                f"s003-inc-compress{suffix}",
                {**base, "summary": previous, "words": len(previous.split()), "word_limit": target},
                kind="compress",
                parse=parse,
                chunk_index=j - 1,
                max_tokens=s.out_tokens(trace, s.max_summary_tokens, previous),
                max_attempts=1,
                temperature=s.compress_temperature,
            )
            c.memory = _accepted(c)
            if not c.ok:
                continue
            if c.outcome == StepOutcome.OK:
                c.outcome = StepOutcome.COMPRESSED
            last = update(chunk, c.parsed, j)
            if last.ok:
                return last
        return last
