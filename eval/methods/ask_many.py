"""Inject once, ask many (MemoryAgentBench's protocol): one context, one memory, every question.

A MemoryAgentBench sample is one context with many questions (`memloop.eval.datasets.memoryagentbench`). The
method reads the chunks once, building its memory as it always does, then answers every question
from the final memory with its own answer step: PRISM's memory under its class (`build_memory`),
incremental updating's notes (`build_notes`), or, for the long-context baseline, the whole context
when it fits the model's window and otherwise its last tokens that fit (FIFO truncation, as the
benchmark's long-context agents keep them: `memloop.eval.methods.fifo`; the unit's memory records what
was kept; n/a only when not even the question fits).

The questions are not known while the memory is built (the benchmark's agents memorise first), so the
question slot of the building prompts holds what to keep for the source (`BUILD`, by source family),
and the answer prompts put the memory first and the question last: every question of a context then
shares the memory as a prompt prefix. The first question is asked alone, the others together, so
a prefix-caching engine prefills the memory once and serves the rest from its cache. Each answer is a
step of kind "answer" (its usage is the ask-many phase's cost); the method's output answer is the
JSON list of replies, one per question, which the `mab` judge scores.

A method without an answer step (the summarisers: GO/GU/GM, CoK, hierarchical merging, KG
retrieval, F-ART) does not apply: its output is marked not applicable, counted as n/a, never a zero.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, Callable

from memloop.eval.asking import ask, reseed
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.llm import LLM
from memloop.eval.methods.base import Method, MethodOutput, Trace, kept_usage
from memloop.eval.methods.outcomes import call_outcome
from memloop.eval.methods.step import Step
from memloop.eval.templates import load_template

TASK = "memoryagentbench"
TEMPLATE_IDS = ("mab-answer-memory", "mab-answer-notes", "mab-long-context")
ANSWERING = ("prism-inplace", "prism-amendments", "inc-update", "long-context")  # methods with an answer step
COMPETENCIES = ("AR", "TTL", "LRU", "CR")
# which competencies each answering method is run on: all four (declared per method so that a method
# made for some only can say so; anything else is n/a and counted)
APPLIES: dict[str, tuple[str, ...]] = {name: COMPETENCIES for name in ANSWERING}

# per source family (first matching prefix): what to keep while reading, how to answer, and the
# benchmark's `generation_max_length` for the answer (configs/data_conf/*.yaml)
_FAMILIES: tuple[tuple[str, str, str, int], ...] = (
    (
        "factconsolidation_",
        "Keep every fact the text states, each with its serial number. When a fact conflicts with an earlier "
        "one, the fact with the larger serial number is the newer and replaces the older.",
        "Facts may conflict: the one with the larger serial number is the current one. Answer from the memorised "
        "facts, not from what you know of the real world, in a few words and nothing else.",
        10,
    ),
    (
        "icl_",
        "Keep the labelled examples: each example's text and its numerical label.",
        "Assign the text in the question the numerical label its closest examples have. Reply with the label number "
        "only.",
        20,
    ),
    (
        "eventqa_",
        "Keep the events of the story in the order they happen, with who does what.",
        "Reply with the event that happens next, in one sentence.",
        40,
    ),
    (
        "recsys_",
        "Keep the movies each user mentions, likes or is recommended, and what the user wants.",
        "Recommend 20 movies for this conversation as a numbered list, one title per line, without other text.",
        300,
    ),
    (
        "detective_qa",
        "Keep the clues, the people, their actions and the order of events.",
        "Answer in the format the question asks for.",
        2000,
    ),
    (
        "infbench_sum",
        "Keep the plot, the main characters and the main events of the book in order.",
        "Write the summary.",
        1200,
    ),
    (
        "longmemeval_",
        "Keep what the user says about themselves, with the date of each conversation.",
        "Answer in a single phrase if you can.",
        50,
    ),
    (
        "",
        "Keep the facts, names, numbers, events and their order that questions about this text may ask for.",
        "Reply with the answer only.",
        50,
    ),
)


def family(source: str) -> tuple[str, str, int]:
    """(what to keep, how to answer, answer max_tokens) for `source`."""
    for prefix, build, answer, max_tokens in _FAMILIES:
        if source.startswith(prefix):
            return build, answer, max_tokens
    raise AssertionError("the last family matches every source")


def not_applicable(method: "Method", sample: Sample) -> str | None:
    """Why `method` does not run on `sample` under the protocol (None: it does)."""
    if method.name not in APPLIES:
        return (
            f"{method.name} has no answer step (it summarises; MemoryAgentBench asks questions of the "
            f"memory): one of {list(ANSWERING)} answers them"
        )
    comp = sample.metadata.get("competency")
    if comp not in APPLIES[method.name]:
        return f"{method.name} is declared for competencies {list(APPLIES[method.name])}, not {comp!r}"
    return None


def run(method: Method, sample: Sample, llm: LLM) -> MethodOutput:
    """`method` on one MemoryAgentBench context: the memory built once, every question answered from it."""
    gold = sample.gold if isinstance(sample.gold, dict) else {}
    questions = gold.get("questions")
    source = sample.metadata.get("source")
    if not isinstance(questions, list) or not questions or not isinstance(source, str):
        raise MethodError(
            f"sample {sample.id} is not a MemoryAgentBench context (gold questions and metadata "
            "source missing): load it with the memoryagentbench loader"
        )
    trace = Trace(llm, method.settings)
    why = not_applicable(method, sample)
    if why is not None:
        trace.not_applicable = why
        return _output(method, sample, trace, [], None)
    build, instruction, max_tokens = family(source)
    template_id, prompt_of, memory = _memory(method, sample, trace, build, instruction, max_tokens)
    if prompt_of is None:
        return _output(method, sample, trace, [], memory)
    replies = ask_all(trace, template_id, [prompt_of(q) for q in questions], max_tokens, memory)
    return _output(method, sample, trace, replies, memory)


def _memory(
    method: "Method", sample: Sample, trace: Trace, build: str, instruction: str, max_tokens: int
) -> tuple[str, Callable[[str], str] | None, Any]:
    """(answer template, question -> answer prompt, the memory) after reading every chunk once; no prompt
    when the method produced no memory to ask (a PRISM schema that never parsed) or the long context
    does not fit (then the memory slot says what was checked)."""
    from memloop.eval.methods.booookscore import IncrementalUpdating
    from memloop.eval.methods.long_context import LongContext
    from memloop.eval.methods.prism import _Prism

    if isinstance(method, _Prism):
        tpl = _used(trace, "mab-answer-memory")
        built = method.build_memory(sample, trace, build)
        if built is None:
            return tpl.id, None, {}
        return (
            tpl.id,
            lambda q: tpl.render(
                memory_note=built.final_note,
                structure=built.structure,
                memory=built.text,
                question=q,
                answer_instruction=instruction,
            ),
            built.memory,
        )
    if isinstance(method, IncrementalUpdating):
        tpl = _used(trace, "mab-answer-notes")
        notes = method.build_notes(sample, trace, build)
        return tpl.id, lambda q: tpl.render(summary=notes, question=q, answer_instruction=instruction), notes
    if isinstance(method, LongContext):
        return _long_context(method, sample, trace, instruction, max_tokens)
    raise MethodError(
        f"{method.name}: declared as answering MemoryAgentBench questions but has no ask-many "
        "protocol; add it to memloop.eval.methods.ask_many._memory"
    )


def _long_context(
    method: Any, sample: Sample, trace: Trace, instruction: str, max_tokens: int
) -> tuple[str, Callable[[str], str] | None, Any]:
    """The long-context agent's prompt: the whole context, or, as the benchmark's long-context agents do
    (FIFO truncation), its last tokens that fit with the longest question and the answer's max_tokens;
    n/a only when not even the question fits. What was kept is the unit's memory."""
    from memloop.eval.methods.fifo import keep_last_fitting
    from memloop.eval.methods.long_context import context_window

    tpl = _used(trace, "mab-long-context")
    longest = max(sample.gold["questions"], key=len)
    out = min(max_tokens, method.settings.max_tokens)  # what each answer request asks for (`ask_all`)

    def prompt(text: str) -> str:
        return tpl.render(text=text, question=longest, answer_instruction=instruction)

    def fits(text: str) -> bool:
        return method._misfit(prompt(text), trace, out)[0] is None

    whole = "\n\n".join(c.strip("\n") for c in sample.chunks)
    text, kept = keep_last_fitting(whole, fits, context_window(method.settings.context_tokens, trace.llm)[0])
    why, fit = method._misfit(prompt(text or ""), trace, out)
    if text is None:
        trace.not_applicable = f"not even the question fits the model's context, without any of the input: {why}"
        return tpl.id, None, dict(fit, **kept)
    return tpl.id, lambda q: tpl.render(text=text, question=q, answer_instruction=instruction), dict(fit, **kept)


def _used(trace: Trace, template_id: str) -> Any:
    tpl = load_template(template_id)
    trace.templates[tpl.id] = tpl.sha256
    return tpl


def ask_all(trace: Trace, template_id: str, prompts: list[str], max_tokens: int, memory: Any) -> list[str]:
    """Every prompt asked (the first alone, then the rest concurrently) and recorded in order as an
    "answer" step; returns the replies."""
    s = trace.settings
    tpl = load_template(template_id)
    sampling = s.sampling(min(max_tokens, s.max_tokens))

    def one(prompt: str) -> tuple[Any, float, float]:
        started = time.time()
        return ask(trace.llm, prompt, sampling, max_attempts=1, retry=reseed(s.retry_temperature)), started, time.time()

    timed = [one(prompts[0])]
    if len(prompts) > 1:
        with ThreadPoolExecutor(max_workers=min(32, len(prompts) - 1)) as pool:
            timed += list(pool.map(one, prompts[1:]))
    answers = [a for a, _, _ in timed]
    for i, (prompt, (a, started, finished)) in enumerate(zip(prompts, timed)):
        step = Step(
            index=len(trace.steps),
            kind="answer",
            template_id=tpl.id,
            template_sha256=tpl.sha256,
            prompt=prompt,
            output=a.text,
            parsed={"question": i},
            memory=memory,
            usage=kept_usage(a.usage, a.retry_usage),
            attempts=a.attempts,
            outcome=call_outcome(a.ok, a.cut, a.text),
            retry_usage=a.retry_usage,
            started_at=started,
            finished_at=finished,
        )
        if a.cut:
            step.failures.append("the answer hit max_tokens")
        trace.steps.append(step)
    return [a.text.strip() for a in answers]


def _output(method: "Method", sample: Sample, trace: Trace, replies: list[str], memory: Any) -> MethodOutput:
    return MethodOutput(
        method=method.name,
        sample_id=sample.id,
        answer=json.dumps(replies) if replies else "",
        steps=trace.steps,
        memory=memory,
        settings=asdict(method.settings),
        templates=dict(trace.templates),
        not_applicable=trace.not_applicable,
    )


__all__ = ["ANSWERING", "APPLIES", "TASK", "TEMPLATE_IDS", "ask_all", "family", "not_applicable", "run"]
