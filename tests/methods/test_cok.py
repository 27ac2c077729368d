"""Chain-of-Key on a scripted LLM: the two-step chain, the exact CoK prompt, programmatic revision."""
from __future__ import annotations

import json

from eval.datasets.sample import Sample
from eval.llm import ScriptedLLM
from eval.methods import get_method

HOTEL = Sample(id="h0", task="sumie", chunks=("Two pools.", "A pub open late. Street noise at night."),
               metadata={"entity": "HOTEL0"})

COK_OUT = """[THOUGHTS FOR UPDATE]
1. I need to find which fields and values to update.
4. The content should be updated at these JSONPaths: ["$.attributes.Amenities"]

[UPDATED_OBJECTS]
```
{"$.attributes.Amenities": {"update": ["two pools", "pub open late"]},}
```

[THOUGHTS FOR ADD]
4. The content should be added at these JSONPaths: ["$.attributes.Noise Level"]

[ADDED_OBJECTS]
{"$.attributes.Noise Level": {"add": ["street noise at night"]}}
{"$.attributes.Price": {"update": ["cheap"]}}
"""


def test_cok_chain_step_by_step() -> None:
    llm = ScriptedLLM(['{"Amenities": ["two pools"]}',
                       '{"Amenities": ["pub open late"], "Noise Level": ["street noise at night"]}',
                       COK_OUT])
    out = get_method("cok").run(HOTEL, llm)
    assert [s.kind for s in out.steps] == ["structure", "structure", "revise"]
    assert out.steps[0].memory == {"attributes": {"Amenities": ["two pools"]}}
    p = llm.requests[2].messages[0]["content"]
    assert "[QUESTION]\nMerge the new summary and the existing summary of HOTEL0." in p
    assert '[NEW_SUMMARY]\n{"attributes": {"Amenities": ["pub open late"], "Noise Level"' in p
    assert "[CLASS]\nclass Summary" in p
    assert '[PARTIAL_SUMMARY]\n{"attributes":{"Amenities":["two pools"]}}' in p  # compact, as counted against K
    assert p.rstrip().endswith("[THOUGHTS FOR UPDATE]")
    final = {"attributes": {"Amenities": ["two pools", "pub open late"], "Noise Level": ["street noise at night"]}}
    assert out.memory == final and out.steps[2].memory == final
    assert json.loads(out.answer) == final["attributes"]
    assert len(out.steps[2].parsed["applied"]) == 2
    assert any("Price" in f for f in out.failures)  # update of a missing path is rejected, memory unchanged


def test_cok_answers_in_figure_5_shape_and_update_adds_never_removes() -> None:
    """Issue 30 point 8: with a model that supports JSON schemas too, CoK's answer is figure 5's sections
    (no schema forces another order, path syntax or reasoning form), and an `update` adds the new value
    to the stored one, as figure 5's example updates a list with the new item only."""
    answer = ("[THOUGHTS FOR UPDATE]\n1. Amenities exists.\n\n[UPDATED_OBJECTS]\n"
              '{"$.attributes.Amenities": {"update": ["pub open late"]}}\n\n'
              "[THOUGHTS FOR ADD]\n1. Nothing new.\n\n[ADDED_OBJECTS]\n{}\n")
    llm = ScriptedLLM(['{"Amenities": ["two pools"]}', '{"Amenities": ["pub open late"]}', answer],
                      supports_json_schema=True)
    out = get_method("cok").run(HOTEL, llm)
    assert llm.requests[2].json_schema is None
    assert out.memory == {"attributes": {"Amenities": ["two pools", "pub open late"]}}
    # the step records the proposal as written and the value applied
    assert out.steps[2].parsed["revisions"] == [{"$. 'attributes'. 'Amenities'": {"update": ["pub open late"]}}]
    assert out.steps[2].parsed["applied"] == [{"$. 'attributes'. 'Amenities'": {"update": ["two pools", "pub open late"]}}]


def test_cok_update_merges_objects_and_keeps_old_text() -> None:
    from eval.memory import Revision
    from eval.methods.cok import cumulative

    memory = {"attributes": {"Amenities": ["two pools"]}}
    whole = cumulative(memory, Revision("$.attributes", "update", {"Amenities": ["spa"], "Noise": ["loud"]}))
    assert whole.value == {"Amenities": ["two pools", "spa"], "Noise": ["loud"]}  # the whole object, merged
    item = cumulative(memory, Revision("$.attributes.Amenities[0]", "update", "a gym"))
    assert item.value == "two pools; a gym"
    assert cumulative(memory, Revision("$.attributes.Price", "update", ["cheap"])).value == ["cheap"]  # rejected later