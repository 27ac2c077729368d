"""Hierarchical merging and incremental updating on a scripted LLM (1 token per word)."""
from __future__ import annotations

from eval.datasets.sample import Sample
from eval.llm import ScriptedLLM
from eval.methods import get_method

BOOK = Sample(id="b", task="book", chunks=("Part one text.", "Part two text.", "Part three text."))


def prompt(llm: ScriptedLLM, i: int) -> str:
    return llm.requests[i].messages[0]["content"]


def test_hier_merge_levels_and_context() -> None:
    # 30-word chunk summaries; a 200-token budget fits two per merge (or one plus the previous merge as context)
    s1, s2, s3 = ("Anna " * 29 + "arrives."), ("Bob " * 29 + "leaves."), ("Carl " * 29 + "sings.")
    llm = ScriptedLLM([s1, s2[:-1], s2, s3, "Anna arrives, Bob leaves.", "Carl sings after.",
                       "Anna arrives, Bob leaves, Carl sings."])
    out = get_method("hier-merge", max_summary_tokens=100, word_limit=50, context_window=300).run(BOOK, llm)
    assert [s.kind for s in out.steps] == ["summarize"] * 3 + ["merge"] * 3
    assert out.steps[1].attempts == 2 and "punctuation" in out.steps[1].failures[0]
    assert f"{s1}\n\n{s2}" in prompt(llm, 4) and s3 not in prompt(llm, 4)
    assert out.steps[3].template_id == "s003-hier-merge"
    assert out.steps[4].template_id == "s003-hier-merge-context"
    assert "before the parts below:\n\n---\n\nAnna arrives, Bob leaves.\n\n---" in prompt(llm, 5)
    assert s3 in prompt(llm, 5)
    assert out.steps[5].template_id == "s003-hier-merge"  # level 2 starts without context
    assert out.answer == "Anna arrives, Bob leaves, Carl sings." and out.memory["levels"] == 2


def test_inc_update_compresses_over_limit() -> None:
    long = " ".join(["word"] * 30) + "."
    llm = ScriptedLLM(["Anna arrives.", long, "Short again.", "Short again, Carl."])
    out = get_method("inc-update", max_summary_tokens=20, word_limit=15, context_window=100).run(BOOK, llm)
    assert [s.kind for s in out.steps] == ["initial", "update", "compress", "update"]
    assert "This summary has 30 words. Shorten it to fewer than 15 words." in prompt(llm, 2)
    assert "summary of the story so far:\n\n---\n\nShort again." in prompt(llm, 3)
    assert out.answer == "Short again, Carl."


def test_inc_update_records_invalid_after_retries() -> None:
    llm = ScriptedLLM(["cut off", "cut off", "cut off"])
    out = get_method("inc-update", max_attempts=3).run(Sample(id="x", task="book", chunks=("a",)), llm)
    assert out.steps[0].attempts == 3 and not out.steps[0].ok and out.answer == "cut off"
    assert len(out.failures) == 3
