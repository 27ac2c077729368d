"""Seed 000 appendix A: memory tokens per turn are the existing information each turn's prompt receives."""

from __future__ import annotations

import json

import pandas as pd
from memloop.eval.judges.memory_size import carried_memories
from memloop.eval.methods.parsing import as_text
from memloop.eval.tokens import cl100k_count


def test_only_the_memory_carried_into_a_later_turn_counts() -> None:
    # GU with K: turn 0 writes a long memory, compresses it; turn 1 updates, compresses; then a final summary
    steps = [
        (0, {"a": ["x"] * 40}),
        (0, {"a": ["x"]}),
        (1, {"a": ["x", "y"] * 30}),
        (1, {"a": ["x", "y"]}),
        (None, {"a": ["x", "y"]}),
    ]
    assert carried_memories(steps) == [{"a": ["x"]}]  # turn 1's prompt got turn 0's compressed memory
    # a turn that kept no memory passes on the one before; a single call (GO) carries none
    assert carried_memories([(0, "m0"), (1, None), (2, "m2")]) == ["m0", "m0"]
    assert carried_memories([(3, {"a": 1}), (None, {"a": 1})]) == []


def test_report_memory_tokens_are_what_the_prompts_received() -> None:
    from memloop.jobs.results.figures import memory_figures
    from memloop.jobs.results.run_data import RunData

    big, small, later = {"a": ["long value"] * 50}, {"a": ["v"]}, {"a": ["v", "w"] * 50}
    unit = {"method": "gu-json-k200", "dataset": "sumie", "repeat": 0, "sample_id": "s0"}
    steps = pd.DataFrame(
        [
            dict(unit, step=i, memory_json=json.dumps(m), extra_json=json.dumps({"chunk_index": c}))
            for i, (c, m) in enumerate([(0, big), (0, small), (1, later), (1, later)])
        ]
    )
    samples = pd.DataFrame([dict(unit, status="ok")])
    d = RunData("mem://", "r", samples, steps, pd.DataFrame(), pd.DataFrame())
    (fig,) = memory_figures(d)
    # averaging every step's memory (the old figure) gives 141 tokens here; the prompt saw `small` (5)
    assert fig["mean"] == cl100k_count(as_text(small)) and fig["samples"] == 1
