"""What each judge is given: SUMIE judges get one prediction per turn, others the final answer."""
from __future__ import annotations

from eval.methods.base import MethodOutput, Step
from jobs.judging import judge_output


def _step(i: int, chunk: int | None, memory) -> Step:
    return Step(index=i, kind="update", template_id="t", template_sha256="h", prompt="p", output="o",
                memory=memory, chunk_index=chunk)


def test_per_turn_memories_for_sumie_judges() -> None:
    steps = [_step(0, 0, None), _step(1, 1, {"a": ["1"]}), _step(2, 1, {"a": ["1", "2"]}), _step(3, 2, {"b": ["x"]})]
    out = MethodOutput(method="gu-json", sample_id="s", answer="final text", steps=steps, memory={"b": ["x"]})
    # chunk 0 never parsed -> an empty prediction; the last step of chunk 1 holds its memory
    assert judge_output("sumie-exact", out, 3) == [{}, {"a": ["1", "2"]}, {"b": ["x"]}]
    assert judge_output("booookscore", out, 3) == "final text"


def test_methods_without_a_memory_per_chunk_are_scored_on_the_last_turn() -> None:
    out = MethodOutput(method="go-json", sample_id="s", answer="{}", steps=[_step(0, 2, {"k": ["v"]})],
                       memory={"k": ["v"]})
    assert judge_output("sumie", out, 3) == {"k": ["v"]}
    failed = MethodOutput(method="go-json", sample_id="s", answer="", steps=[_step(0, 2, None)], memory=None)
    assert judge_output("sumie", failed, 3) == {}
