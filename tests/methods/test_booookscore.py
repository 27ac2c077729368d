"""Hierarchical merging and incremental updating on a scripted LLM (1 token per word)."""

from __future__ import annotations

from memloop.eval.datasets.sample import Sample
from memloop.eval.llm import ScriptedLLM
from memloop.eval.methods import get_method

BOOK = Sample(id="b", task="book", chunks=("Part one text.", "Part two text.", "Part three text."))


def prompt(llm: ScriptedLLM, i: int) -> str:
    return llm.requests[i].messages[0]["content"]


def test_hier_merge_limits_per_level_labels_and_context_as_the_official_code() -> None:
    """Issue 30 point 11: each level has its own token limit (0.65 of the level above, the top one
    max_summary_tokens) and asks for 0.65 of it in words; merges label their summaries; the previous
    merge is context merged with the summaries, not kept out."""
    chunks = tuple(" ".join([f"w{i}"] * 199) + "." for i in range(3))  # 200 words: two chunks per merge
    s1, s2, s3 = ("Anna " * 49 + "arrives."), ("Bob " * 49 + "leaves."), ("Carl " * 49 + "sings.")
    m1, m2, final = "Anna met Bob in town. Bob left.", "Carl sang after that.", "Anna met Bob; Carl sang."
    llm = ScriptedLLM([s1, s2, s3, m1, m2, final])
    out = get_method("hier-merge", max_summary_tokens=100, context_window=400).run(
        Sample(id="b", task="book", chunks=chunks), llm
    )
    assert out.memory["limits"] == [65, 100]
    assert "within 42 words" in prompt(llm, 0)  # level 0: round(0.65 x 65)
    assert [s.kind for s in out.steps] == ["summarize"] * 3 + ["merge"] * 3
    assert f"Summary 1:\n\n{s1}\n\nSummary 2:\n\n{s2}" in prompt(llm, 3) and "within 65 words" in prompt(llm, 3)
    ctx = prompt(llm, 4)
    assert out.steps[4].template_id == "s003-hier-merge-context" and m1 in ctx and f"Summary 1:\n\n{s3}" in ctx
    assert "Merge the summary of what comes before and the summaries of the parts into one single summary." in ctx
    assert "do not repeat" not in ctx
    assert out.steps[5].template_id == "s003-hier-merge" and out.answer == final and out.memory["levels"] == 2
    assert get_method("hier-merge").settings.context_window == 8192  # the official GPT-4 runs


def test_inc_update_compresses_the_previous_summary_to_a_growing_budget_and_redoes_the_update() -> None:
    """Issue 30 point 11: no word limit in the update prompts; an invalid update makes the previous
    summary compressed to (j / n) of the word limit, and the update is redone on the compressed one."""
    long = " ".join(["word"] * 30) + "."
    llm = ScriptedLLM(
        [
            "Anna arrives at the harbour.",
            long,
            "Anna reaches the harbour.",
            "Anna arrives; Bob too.",
            "Short again, Carl.",
        ]
    )
    out = get_method("inc-update", max_summary_tokens=20, max_attempts=1).run(BOOK, llm)
    assert [s.kind for s in out.steps] == ["initial", "update", "compress", "update", "update"]
    assert "words" not in prompt(llm, 0).split("---")[-1] and "within" not in prompt(llm, 1)
    # budget before chunk 1 of 3: int(round(0.65 x 20) x 1 / 3) = 4 words, accepted within 0.8-1.2 of it
    assert "This summary has 5 words. Shorten it to fewer than 4 words." in prompt(llm, 2)
    assert "summary of the story so far:\n\n---\n\nAnna reaches the harbour.\n\n---" in prompt(llm, 3)
    assert out.steps[2].chunk_index == 0 and out.answer == "Short again, Carl."


def test_inc_update_records_an_invalid_first_summary_asked_once() -> None:
    llm = ScriptedLLM(["cut off"])  # the official code asks the first summary once, whatever max_attempts
    out = get_method("inc-update", max_attempts=3).run(Sample(id="x", task="book", chunks=("a",)), llm)
    assert out.steps[0].attempts == 1 and not out.steps[0].ok and out.answer == "cut off"
    assert len(out.failures) == 1


def test_inc_update_compresses_after_one_invalid_update_at_the_official_temperature() -> None:
    """Issue 46 point 6: the official code asks an update once and compresses at temperature 1 after an
    invalid one; memloop asked the update again (max_attempts) first, and compressed at the run's 0.5."""
    long = " ".join(["word"] * 30) + "."
    llm = ScriptedLLM(
        [
            "Anna arrives at the harbour.",
            long,
            "Anna reaches the harbour.",
            "Anna arrives; Bob too.",
            "Short again, Carl.",
        ]
    )
    out = get_method("inc-update", max_summary_tokens=20, temperature=0.5).run(BOOK, llm)  # max_attempts: 3
    assert [s.kind for s in out.steps] == ["initial", "update", "compress", "update", "update"]
    assert out.steps[1].attempts == 1 and not out.steps[1].ok
    temps = [r.sampling.temperature for r in llm.requests]
    assert temps == [0.5, 0.5, 1.0, 0.5, 0.5]
    assert get_method("inc-update").settings.compress_temperature == 1.0
