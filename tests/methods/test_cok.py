"""Chain-of-Key on a scripted LLM: the two-step chain, the exact CoK prompt, programmatic revision."""

from __future__ import annotations

import json

from memloop.eval.datasets.sample import Sample
from memloop.eval.llm import ScriptedLLM
from memloop.eval.methods import get_method

HOTEL = Sample(
    id="h0",
    task="sumie",
    chunks=("Two pools.", "A pub open late. Street noise at night."),
    metadata={"entity": "HOTEL0"},
)

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
    llm = ScriptedLLM(
        [
            '{"Amenities": ["two pools"]}',
            '{"Amenities": ["pub open late"], "Noise Level": ["street noise at night"]}',
            COK_OUT,
        ]
    )
    out = get_method("cok").run(HOTEL, llm)
    assert [s.kind for s in out.steps] == ["structure", "structure", "revise"]
    assert out.steps[0].memory == {"Amenities": ["two pools"]}  # the bare table, as GU's and GM's
    p = llm.requests[2].messages[0]["content"]
    assert "[QUESTION]\nMerge the new summary and the existing summary of HOTEL0." in p
    assert '[NEW_SUMMARY]\n{"attributes": {"Amenities": ["pub open late"], "Noise Level"' in p
    assert "[CLASS]\nclass Summary" in p
    assert '[PARTIAL_SUMMARY]\n{"attributes":{"Amenities":["two pools"]}}' in p  # compact, as counted against K
    assert p.rstrip().endswith("[THOUGHTS FOR UPDATE]")
    final = {"Amenities": ["two pools", "pub open late"], "Noise Level": ["street noise at night"]}
    assert out.memory == final and out.steps[2].memory == final
    assert json.loads(out.answer) == final
    assert len(out.steps[2].parsed["applied"]) == 2
    assert any("Price" in f for f in out.failures)  # update of a missing path is rejected, memory unchanged


def test_cok_answers_in_figure_5_shape_and_update_adds_never_removes() -> None:
    """Issue 30 point 8: with a model that supports JSON schemas too, CoK's answer is figure 5's sections
    (no schema forces another order, path syntax or reasoning form), and an `update` adds the new value
    to the stored one, as figure 5's example updates a list with the new item only."""
    answer = (
        "[THOUGHTS FOR UPDATE]\n1. Amenities exists.\n\n[UPDATED_OBJECTS]\n"
        '{"$.attributes.Amenities": {"update": ["pub open late"]}}\n\n'
        "[THOUGHTS FOR ADD]\n1. Nothing new.\n\n[ADDED_OBJECTS]\n{}\n"
    )
    llm = ScriptedLLM(
        ['{"Amenities": ["two pools"]}', '{"Amenities": ["pub open late"]}', answer], supports_json_schema=True
    )
    out = get_method("cok").run(HOTEL, llm)
    assert llm.requests[2].json_schema is None
    assert out.memory == {"Amenities": ["two pools", "pub open late"]}
    # the step records the proposal as written and the value applied
    assert out.steps[2].parsed["revisions"] == [{"$. 'attributes'. 'Amenities'": {"update": ["pub open late"]}}]
    assert out.steps[2].parsed["applied"] == [
        {"$. 'attributes'. 'Amenities'": {"update": ["two pools", "pub open late"]}}
    ]


def test_cok_update_merges_objects_and_keeps_old_text() -> None:
    from memloop.eval.memory import Revision
    from memloop.eval.methods.cok import cumulative

    memory = {"attributes": {"Amenities": ["two pools"]}}
    whole = cumulative(memory, Revision("$.attributes", "update", {"Amenities": ["spa"], "Noise": ["loud"]}))
    assert whole.value == {"Amenities": ["two pools", "spa"], "Noise": ["loud"]}  # the whole object, merged
    item = cumulative(memory, Revision("$.attributes.Amenities[0]", "update", "a gym"))
    assert item.value == "two pools; a gym"
    assert cumulative(memory, Revision("$.attributes.Price", "update", ["cheap"])).value == ["cheap"]  # rejected later


def _example_answer(example: str) -> str:
    """The worked example's own answer: its sections from [THOUGHTS FOR UPDATE] on."""
    return example[example.index("[THOUGHTS FOR UPDATE]") :]


def test_cok_on_books_shows_a_book_example_whose_paths_the_book_schema_accepts() -> None:
    """Issue 46 point 2: books were shown the SUMIE hotel example, whose `$.attributes...` paths the book
    schema refuses, so a model copying the example never grew the memory. Appendix G: a book example."""
    from memloop.eval.memory.schemas import STORY_ELEMENTS
    from memloop.eval.templates import load_template

    example = load_template("s000-cok-example-book").text
    partial = json.loads(example.split("[PARTIAL_SUMMARY]\n", 1)[1].split("\n", 1)[0])
    assert not STORY_ELEMENTS.errors(partial)
    first = json.dumps({k: v for k, v in partial.items()})
    new = json.loads(example.split("[NEW_SUMMARY]\n", 1)[1].split("\n", 1)[0])
    book = Sample(id="b", task="book", chunks=("Maren keeps the light.", "Tobias comes; a storm."))
    llm = ScriptedLLM([first, json.dumps(new), _example_answer(example), "Maren stays; Tobias comes."])
    out = get_method("cok").run(book, llm)
    prompt = llm.requests[2].messages[0]["content"]
    assert "$.attributes" not in prompt and "HOTEL" not in prompt and "$.characters['Tobias Fenn']" in prompt
    assert out.steps[2].revisions_rejected == 0 and out.steps[2].revisions_accepted == 3
    assert out.memory["characters"]["Maren Holt"] == [
        "keeper of the lighthouse for eleven years",
        "refuses to leave the lighthouse",
    ]
    assert set(out.memory["characters"]) == {"Maren Holt", "Tobias Fenn"} and "The storm" in out.memory["events"]
    # entities keep the hotel example, whose update now gives only the new value (figure 5)
    hotel = load_template("s000-cok-example-entity").text
    assert '{"$.attributes.Amenities": {"update": ["pub open until midnight"]}}' in hotel


def test_cok_follows_figure_5_appends_once_removes_nothing_and_merges_an_add_at_an_existing_key() -> None:
    """Issue 46 point 3: a restated value differing in case or spacing was appended again; an `add` of a
    list at an existing key was refused and its values lost."""
    from memloop.eval.memory import Revision
    from memloop.eval.memory.revisions import apply_revisions
    from memloop.eval.memory.schemas import SUMIE_SUMMARY
    from memloop.eval.methods.cok import cumulative

    memory = {"attributes": {"Amenities": ["two pools"]}}

    def applied(rev: Revision) -> dict:
        res = apply_revisions(memory, [cumulative(memory, rev)], SUMIE_SUMMARY)
        assert not res.rejected, res.rejected
        return res.memory["attributes"]

    # update restating the old value in other case/spacing, plus the new one listed twice: appended once
    assert applied(Revision("$.attributes.Amenities", "update", ["Two  Pools", "a spa", "A spa"]))["Amenities"] == [
        "two pools",
        "a spa",
    ]
    # an add of a list at an existing key is merged, nothing lost and nothing repeated
    assert applied(Revision("$.attributes.Amenities", "add", ["TWO pools", "a gym"]))["Amenities"] == [
        "two pools",
        "a gym",
    ]
    # an add of one item at an existing list appends it once
    assert applied(Revision("$.attributes.Amenities", "add", "two pools "))["Amenities"] == ["two pools"]
    # an add of an object at an existing key merges key by key
    assert applied(Revision("$.attributes", "add", {"Amenities": ["bar"], "Noise": ["loud"]})) == {
        "Amenities": ["two pools", "bar"],
        "Noise": ["loud"],
    }
    # a text restated in other case is not repeated; new words are appended, the old kept
    assert cumulative(memory, Revision("$.attributes.Amenities[0]", "update", "TWO pools")).value == "two pools"
    assert cumulative(memory, Revision("$.attributes.Amenities[0]", "update", "a gym")).value == "two pools; a gym"
    # an add at a new path is left to memloop.eval.memory as before
    assert cumulative(memory, Revision("$.attributes.View", "add", ["sea"])).op == "add"
