"""What each judge is given: SUMIE judges get one prediction per turn, others the final answer."""

from __future__ import annotations

from memloop.eval.judges import get_judge
from memloop.eval.methods.base import MethodOutput
from memloop.eval.methods.step import Step


def judge_output(judge: str, out: MethodOutput, n_chunks: int):
    return get_judge(judge).prediction(out, n_chunks)


def _step(i: int, chunk: int | None, memory) -> Step:
    return Step(
        index=i,
        kind="update",
        template_id="t",
        template_sha256="h",
        prompt="p",
        output="o",
        memory=memory,
        chunk_index=chunk,
    )


def test_per_turn_memories_for_sumie_judges() -> None:
    steps = [_step(0, 0, None), _step(1, 1, {"a": ["1"]}), _step(2, 1, {"a": ["1", "2"]}), _step(3, 2, {"b": ["x"]})]
    out = MethodOutput(method="gu-json", sample_id="s", answer="final text", steps=steps, memory={"b": ["x"]})
    # chunk 0 never parsed -> an empty prediction; the last step of chunk 1 holds its memory
    assert judge_output("sumie-exact", out, 3) == [{}, {"a": ["1", "2"]}, {"b": ["x"]}]
    assert judge_output("booookscore", out, 3) == "final text"


def test_methods_without_a_memory_per_chunk_are_scored_on_the_last_turn() -> None:
    out = MethodOutput(
        method="go-json", sample_id="s", answer="{}", steps=[_step(0, 2, {"k": ["v"]})], memory={"k": ["v"]}
    )
    assert judge_output("sumie", out, 3) == {"k": ["v"]}
    failed = MethodOutput(method="go-json", sample_id="s", answer="", steps=[_step(0, 2, None)], memory=None)
    assert judge_output("sumie", failed, 3) == {}


def test_every_judge_declares_what_it_scores_and_jobs_asks_the_judge() -> None:
    import statistics

    from memloop.eval.judges import JUDGES, JudgeInfo, get_judge, list_judges, register_judge
    from memloop.eval.judges.predictions import final_answer, memory_per_turn

    for name in list_judges():  # SUMIE judges score memories per turn, the rest the final answer
        assert get_judge(name).predict is (memory_per_turn if get_judge(name).tasks == ("sumie",) else final_answer)
    out = MethodOutput(method="go-json", sample_id="s", answer="the answer", steps=[_step(0, 0, {"k": ["v"]})])
    # a new judge whose name starts with "sumie" but scores the answer: no name check decides for it
    info = JudgeInfo(
        "sumie-answer-length",
        ("sumie",),
        False,
        "memloop.eval.judges.overlap",
        "judge_rouge",
        "test judge",
        predict=final_answer,
        aggregate_by=statistics.median,
    )
    register_judge(info)
    try:
        assert judge_output("sumie-answer-length", out, 1) == "the answer"
        assert get_judge("sumie-answer-length").aggregate([0.1, 0.2, 0.9]) == 0.2
    finally:
        JUDGES.unregister("sumie-answer-length")
    assert "sumie-answer-length" not in list_judges()
