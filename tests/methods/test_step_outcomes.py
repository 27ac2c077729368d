"""Each method records what happened at each step (`memloop.eval.methods.outcomes`), on scripted outputs."""

from __future__ import annotations

from memloop.eval.datasets.sample import Sample
from memloop.eval.llm import ScriptedLLM
from memloop.eval.methods import get_method
from memloop.eval.methods.outcomes import OUTCOMES, StepOutcome
from memloop.eval.methods.step import unit_failure

HOTEL = Sample(
    id="h",
    task="sumie",
    chunks=("HOTEL0 has two large pools.", "HOTEL0 serves a cold breakfast."),
    metadata={"entity": "HOTEL0"},
)
BOOK = Sample(id="b", task="book", chunks=("Tom painted the fence.", "Becky watched Tom."))


def _outcomes(out) -> list[str]:
    return [str(s.outcome) for s in out.steps]


def test_the_outcomes_are_one_closed_set() -> None:
    assert len(OUTCOMES) == len(set(OUTCOMES)) and "ok" in OUTCOMES
    assert {str(o) for o in StepOutcome} == set(OUTCOMES)


def test_updates_that_return_nothing_are_empty_and_fail_the_unit() -> None:
    out = get_method("gu-json", max_attempts=1).run(HOTEL, ScriptedLLM(["{}", "{}"]))
    assert _outcomes(out) == ["empty", "empty"]
    assert out.failure is not None and "2 empty" in out.failure
    ok = get_method("gu-json", max_attempts=1).run(HOTEL, ScriptedLLM(['{"pool": ["two"]}', "{}"]))
    assert _outcomes(ok) == ["ok", "empty"] and ok.failure is None  # one step produced a memory


def test_an_output_that_does_not_parse_is_parse_failed() -> None:
    out = get_method("gu-json", max_attempts=1).run(HOTEL, ScriptedLLM(["no json here", "none either"]))
    assert _outcomes(out) == ["parse_failed", "parse_failed"]
    assert out.failure.startswith("no step produced anything (2 step(s): 2 parse_failed)")


def test_compression_within_k_is_compressed_and_a_trim_after_it_is_trimmed_to_k() -> None:
    # K = 4 words: the first summary (6 words) compresses to 2; the update (6) compresses to 5, twice: trimmed
    llm = ScriptedLLM(
        [
            "HOTEL0 has two large pools today.",
            "two pools.",
            "two pools and a cold breakfast.",
            "pools and a cold breakfast.",
            "pools and a cold breakfast.",
        ]
    )
    out = get_method("gu-text", max_attempts=1, memory_limit=4).run(HOTEL, llm)
    assert [s.kind for s in out.steps] == ["initial", "compress", "update", "compress", "compress"]
    assert _outcomes(out) == ["ok", "compressed", "ok", "compressed", "trimmed_to_k"]
    assert out.steps[-1].outcome == StepOutcome.TRIMMED_TO_K and out.failure is None


def test_a_kg_chunk_whose_extraction_does_not_parse_is_extraction_failed() -> None:
    llm = ScriptedLLM(
        ["", "Tom\nBecky\n\nKnowledge graph edges:\n1. Becky; watched; Tom\n", "Tom painted.", "Becky watched Tom."]
    )
    out = get_method("kg-retrieval", max_attempts=1).run(BOOK, llm)
    assert _outcomes(out) == ["extraction_failed", "ok", "ok", "ok"]
    assert out.failure is None and "no named entities" in out.steps[0].failures[0]


def test_a_booookscore_summary_kept_despite_its_check_is_kept_invalid() -> None:
    llm = ScriptedLLM(["Tom painted the fence and", "Becky watched Tom paint."])
    out = get_method("inc-update", max_attempts=1, max_summary_tokens=200, word_limit=50, context_window=1024).run(
        BOOK, llm
    )
    assert _outcomes(out) == ["kept_invalid", "ok"] and out.failure is None
    assert "sentence punctuation" in out.steps[0].failures[0]


def test_prism_counts_revisions_and_an_empty_list_is_empty() -> None:
    llm = ScriptedLLM(['{"revisions": []}', '{"revisions": []}', "HOTEL0 has pools."], supports_json_schema=True)
    out = get_method("prism-inplace", max_attempts=1, decoding="constrained").run(HOTEL, llm)
    assert _outcomes(out) == ["empty", "empty", "ok"] and out.failure is None  # the answer step answered
    assert [s.revisions_proposed for s in out.steps] == [0, 0, 0]


def test_unit_failure_names_the_outcomes() -> None:
    assert unit_failure([]) is None
