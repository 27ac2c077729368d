"""Inject once, ask many: a MemoryAgentBench context's memory is built once, every question is answered from
it with the memory as the shared prompt prefix, the `mab` judge scores the replies, and methods without
an answer step are n/a."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from memloop.eval.datasets.memoryagentbench import load_memoryagentbench
from memloop.eval.judges import run_judge
from memloop.eval.llm import LLMRequest, LLMResult, Usage
from memloop.eval.memory import shared_prefix_tokens
from memloop.eval.methods import get_method

DATA = Path(__file__).parents[1] / "datasets" / "mab_data" / "Conflict_Resolution.jsonl"

# PRISM's revisions for the two chunks: the earlier fact, then the later one that must replace it
REVISE = [
    '[OBJECTS FOR UPDATE]\n\n[OBJECTS FOR ADD]\n{"$. \'attributes\'. \'capital of Zarnia\'": {"add": ["Velt (fact '
    '0)"]}}\n'
    '{"$. \'attributes\'. \'Mira Oskan occupation\'": {"add": ["glassblower (fact 1)"]}}',
    '[OBJECTS FOR UPDATE]\n{"$. \'attributes\'. \'capital of Zarnia\'": {"update": ["Orsk (fact 4)"]}}\n'
    '{"$. \'attributes\'. \'Mira Oskan occupation\'": {"update": ["lighthouse keeper (fact 5)"]}}\n\n[OBJECTS FOR '
    "ADD]\n",
]


class ReadingLLM:
    """A scripted model: the revise steps in order; an answer prompt is answered from the memory it shows
    (the value the memory holds for the asked key), so replies depend on what was memorised."""

    name = "reading"
    supports_json_schema = False

    def __init__(self, revisions: list[str]) -> None:
        self.revisions = list(revisions)
        self.requests: list[LLMRequest] = []
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def complete(self, request: LLMRequest) -> LLMResult:
        prompt = request.messages[0]["content"]
        with self._lock:
            self.requests.append(request)
            if "[QUESTION]" in prompt and prompt.rstrip().endswith("[ANSWER]"):
                text = self._answer(prompt)
            else:
                text = self.revisions.pop(0)
        return LLMResult(text=text, usage=Usage(self.count_tokens(prompt), 0, self.count_tokens(text)))

    @staticmethod
    def _answer(prompt: str) -> str:
        memory, question = prompt.split("[QUESTION]")[-2], prompt.split("[QUESTION]")[-1]
        key = "capital of Zarnia" if "capital" in question else "Mira Oskan occupation"
        found = re.findall(rf"{key}.*?([A-Za-z][A-Za-z ]*) \(fact", memory, re.S)
        return found[-1] if found else "unknown"  # the latest value the memory shows for the key


@pytest.fixture
def context():
    [fc] = load_memoryagentbench(
        DATA, splits=["Conflict_Resolution"], sources="factconsolidation_sh_6k", chunk_tokens=56
    )
    assert len(fc.chunks) == 2 and "Velt" in fc.chunks[0] and "Orsk" in fc.chunks[1]
    return fc


@pytest.mark.parametrize("name", ["prism-inplace", "prism-amendments"])
def test_the_memory_is_built_once_and_every_question_answered_from_it(name, context):
    llm = ReadingLLM(REVISE)
    out = get_method(name).run(context, llm)
    assert [s.kind for s in out.steps] == ["revise", "revise", "answer", "answer"]  # two chunks, two questions
    # the later fact replaced the earlier one, and the answers come from that memory
    assert json.loads(out.answer) == ["Orsk", "lighthouse keeper"]
    assert out.memory["attributes"]["capital of Zarnia"] == ["Orsk (fact 4)"]
    res = run_judge("mab", out.answer, context.gold, metadata=context.metadata)
    assert res.score("accuracy") == 1.0 and res.score("questions") == 2.0
    # the building prompts carry what to keep for the source, not the questions (unknown while reading)
    revise = llm.requests[0].messages[0]["content"]
    assert "larger serial number" in revise and "capital of Zarnia?" not in revise
    # the answer prompts share the memory as their prefix; only the question differs at the end
    a, b = (s.prompt for s in out.steps[2:])
    assert a.endswith("[QUESTION]\nWhat is the capital of Zarnia?\n\n[ANSWER]\n")
    shared = shared_prefix_tokens(a, b)
    assert shared > 0.9 * min(len(a), len(b)) / 4  # most of the prompt, in tokens
    assert a[: a.index("[QUESTION]")] == b[: b.index("[QUESTION]")] and "Orsk (fact 4)" in a[: a.index("[QUESTION]")]
    assert out.templates["mab-answer-memory"]


def test_the_earlier_fact_wins_when_the_memory_kept_it_and_scores_zero(context):
    stale = [REVISE[0], "[OBJECTS FOR UPDATE]\n\n[OBJECTS FOR ADD]\n"]  # the later chunk's facts never applied
    out = get_method("prism-inplace").run(context, ReadingLLM(stale))
    assert json.loads(out.answer) == ["Velt", "glassblower"]
    assert run_judge("mab", out.answer, context.gold, metadata=context.metadata).score("accuracy") == 0.0


def test_incremental_updating_answers_from_its_notes(context):
    notes = [
        "Fact 0: capital of Zarnia is Velt (fact 0). Mira Oskan occupation glassblower (fact 1).",
        "capital of Zarnia: Orsk (fact 4). Mira Oskan occupation: lighthouse keeper (fact 5).",
    ]
    out = get_method("inc-update").run(context, ReadingLLM(notes))
    assert [s.kind for s in out.steps] == ["initial", "update", "answer", "answer"]
    assert json.loads(out.answer) == ["Orsk", "lighthouse keeper"] and out.memory == notes[1]


class Echo(ReadingLLM):
    @staticmethod
    def _answer(prompt: str) -> str:
        return "Orsk"


def test_the_long_context_row_answers_from_the_whole_context_when_it_fits(context):
    out = get_method("long-context", context_tokens=4096).run(context, Echo([]))
    assert [s.kind for s in out.steps] == ["answer", "answer"] and json.loads(out.answer) == ["Orsk", "Orsk"]
    assert "0. The capital of Zarnia is Velt." in out.steps[0].prompt
    assert out.memory["fifo_truncated"] is False


def test_the_long_context_row_keeps_the_last_tokens_that_fit_as_the_benchmarks_agents_do(context):
    """FIFO truncation (the benchmark's long-context agents): the oldest tokens go, the newest stay, and the
    unit records what was kept; n/a only when not even the question fits."""
    window = 115  # words, as Echo counts: the template, instruction and question take 71, the answer 10
    out = get_method("long-context", context_tokens=window).run(context, Echo([]))
    assert out.not_applicable is None and out.failure is None
    assert [s.kind for s in out.steps] == ["answer", "answer"]
    prompt = out.steps[0].prompt
    whole = "\n\n".join(context.chunks)  # the chunks in order, as the method joins them
    assert "6. The official language of Zarnia is Velish." in prompt  # the newest fact kept
    assert "0. The capital of Zarnia is Velt." not in prompt  # the oldest dropped
    kept = prompt.split("[INPUT]\n", 1)[1].split("\n\nUsing the input above", 1)[0]
    assert whole.endswith(kept) and len(kept) < len(whole)
    mem = out.memory
    assert mem["fifo_truncated"] is True and mem["kept_tokens"] + mem["dropped_tokens"] == mem["input_tokens"]
    assert mem["needed_tokens"] <= window  # the longest question's prompt + the answer's 10 tokens
    assert all(s.memory == mem for s in out.steps)  # recorded with each answer of the unit
    # one more token of the input would not have fitted: the longest tail that does
    from memloop.eval.tokens import cl100k_base

    enc = cl100k_base()
    ids = enc.encode_ordinary(whole)
    longer = enc.decode(ids[len(ids) - mem["kept_tokens"] - 1 :])
    longest_q = max(context.gold["questions"], key=len)
    assert len(prompt.replace(kept, longer).replace(context.gold["questions"][0], longest_q).split()) + 10 > window
    tiny = get_method("long-context", context_tokens=60).run(context, Echo([]))
    assert tiny.not_applicable and "not even the question fits" in tiny.not_applicable and tiny.steps == []
    assert tiny.failure is None  # n/a, never a failure


def test_a_summariser_has_no_answer_step_and_is_na_not_absent(context):
    out = get_method("gu-text").run(context, ReadingLLM([]))
    assert out.not_applicable and "no answer step" in out.not_applicable
    assert out.steps == [] and out.answer == "" and out.failure is None
