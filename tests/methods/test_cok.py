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


def test_cok_constrained_output_with_thoughts() -> None:
    llm = ScriptedLLM(['{"Amenities": ["two pools"]}', '{"Amenities": ["pub"]}',
                       json.dumps({"thoughts_for_update": ["Amenities exists"], "thoughts_for_add": [],
                                   "revisions": [{"path": "$.attributes.Amenities", "op": "update",
                                                  "value": ["two pools", "pub"]}]})], supports_json_schema=True)
    out = get_method("cok").run(HOTEL, llm)
    js = llm.requests[2].json_schema
    assert list(js["properties"]) == ["thoughts_for_update", "thoughts_for_add", "revisions"]
    assert out.memory == {"attributes": {"Amenities": ["two pools", "pub"]}}
