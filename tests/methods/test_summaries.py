"""Seed 000 baselines on a scripted LLM: exact prompts, parsing, retries, memory transitions."""

from __future__ import annotations

import json

import pytest
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.llm import ScriptedLLM
from memloop.eval.methods import get_method

HOTEL = Sample(
    id="h0", task="sumie", chunks=("The pool is huge.", "Breakfast was cold."), metadata={"entity": "HOTEL0"}
)


def prompt(llm: ScriptedLLM, i: int) -> str:
    return llm.requests[i].messages[0]["content"]


class _Cl100kScripted(ScriptedLLM):
    """Scripted outputs counted by a real BPE tokenizer (cl100k), where layout whitespace costs tokens."""

    def count_tokens(self, text: str) -> int:
        from memloop.eval.tokens import cl100k_count

        return cl100k_count(text)


def test_gu_json_updates_memory_step_by_step() -> None:
    llm = ScriptedLLM(
        [
            '```json\n{"Amenities": ["huge pool"],}\n```',
            'Here it is: {"Amenities": ["huge pool"], "Food": ["cold breakfast"]}',
        ]
    )
    out = get_method("gu-json").run(HOTEL, llm)
    assert [s.kind for s in out.steps] == ["initial", "update"]
    assert "Entity: HOTEL0" in prompt(llm, 0) and "P1. The pool is huge." in prompt(llm, 0)
    assert "P2. Breakfast was cold." in prompt(llm, 1)
    assert '{"Amenities":["huge pool"]}' in prompt(llm, 1)  # memory of step 0, compact, in the update prompt
    assert out.steps[0].memory == {"Amenities": ["huge pool"]}
    assert json.loads(out.answer) == {"Amenities": ["huge pool"], "Food": ["cold breakfast"]}
    assert out.templates["s000-entity-update-json"] == out.steps[1].template_sha256


def test_parse_failure_retries_then_records() -> None:
    llm = ScriptedLLM(["no json here", '{"A": ["x"]}', "still nothing", "nope", "never"])
    out = get_method("gu-json", max_attempts=3).run(HOTEL, llm)
    assert out.steps[0].attempts == 2 and out.steps[0].ok
    assert out.steps[1].attempts == 3 and not out.steps[1].ok
    assert out.steps[1].memory == {"A": ["x"]}  # a failed revision leaves the memory unchanged
    assert len(out.failures) == 4 and "no JSON" in out.failures[0]


def test_schema_is_sent_under_constrained_decoding_when_supported() -> None:
    llm = ScriptedLLM(['{"A": ["x"]}'], supports_json_schema=True)
    get_method("go-json", decoding="constrained").run(HOTEL, llm)
    assert llm.requests[0].json_schema["additionalProperties"]["items"] == {"type": "string"}
    assert "P1. The pool is huge.\nP2. Breakfast was cold." in prompt(llm, 0)


def test_gm_json_merges_then_dedupes() -> None:
    llm = ScriptedLLM(
        [
            '{"Pool": ["huge pool"]}',
            '{"Pool": ["huge pool", "warm"], "Food": ["cold"]}',
            '{"Pool": ["huge warm pool"], "Food": ["cold"]}',
        ]
    )
    out = get_method("gm-json").run(HOTEL, llm)
    assert [s.kind for s in out.steps] == ["initial", "initial", "dedupe"]
    assert out.steps[1].memory == {"Pool": ["huge pool", "warm"], "Food": ["cold"]}
    assert '"warm"' in prompt(llm, 2) and "the entity HOTEL0" in prompt(llm, 2)
    assert json.loads(out.answer) == {"Pool": ["huge warm pool"], "Food": ["cold"]}


def test_memory_limit_triggers_compression_on_books() -> None:
    book = Sample(id="b", task="book", chunks=("Anna meets Bob.", "Bob leaves town."))
    llm = ScriptedLLM(
        [
            "Anna meets Bob in a small town by the sea at dawn.",
            "Anna meets Bob.",
            "Anna meets Bob; Bob leaves.",
            "Anna meets Bob; Bob leaves.",
        ],
        tokens_per_word=1.0,
    )
    out = get_method("gu-text", memory_limit=5).run(book, llm)
    assert [s.kind for s in out.steps] == ["initial", "compress", "update", "final"]
    assert "at most 5 tokens" in prompt(llm, 1)
    assert "Memory of the story so far:\n---\nAnna meets Bob.\n---" in prompt(llm, 2)
    assert out.answer == "Anna meets Bob; Bob leaves."


def test_book_json_final_summary_step() -> None:
    book = Sample(id="b", task="book", chunks=("Anna meets Bob.",))
    llm = ScriptedLLM(['{"characters": {"Anna": ["meets Bob"]}}', "Anna meets Bob."])
    out = get_method("go-json").run(book, llm)
    assert "characters, events, background, motivations, objectives, other" in prompt(llm, 0)
    assert out.steps[-1].kind == "final" and out.answer == "Anna meets Bob."


def test_bad_settings_and_names() -> None:
    with pytest.raises(MethodError, match="unknown method"):
        get_method("gx-json")
    with pytest.raises(MethodError, match="no settings"):
        get_method("gu-json", window=3)
    with pytest.raises(MethodError, match="memory_limit"):
        get_method("gu-json", memory_limit=0)


def test_memory_limit_is_binding_text() -> None:
    """Seed 000 appendix F: the memory never stays above K. Compression is retried (bounded rounds);
    a memory still over K is then trimmed deterministically, and the step records which happened."""
    book = Sample(id="b", task="book", chunks=("Anna meets Bob.", "Bob leaves town."))
    long = "Anna meets Bob in a small town by the sea at dawn."
    llm = ScriptedLLM(
        [long, "Anna meets Bob in a small town.", "Anna meets Bob in town today.", "Bob leaves.", "Bob leaves."],
        tokens_per_word=1.0,
    )
    out = get_method("gu-text", memory_limit=5, compress_rounds=2).run(book, llm)
    assert [s.kind for s in out.steps] == ["initial", "compress", "compress", "update", "final"]
    last = out.steps[2]
    assert last.memory == "Anna meets Bob in town"  # the leading words within K = 5
    assert any("trimmed" in f and "K=5" in f for f in last.failures)
    assert "Memory of the story so far:\n---\nAnna meets Bob in town\n---" in prompt(llm, 3)
    assert llm.count_tokens(out.memory) <= 5


def test_memory_limit_is_binding_json() -> None:
    from memloop.eval.methods.parsing import as_text
    from memloop.eval.tokens import cl100k_count

    book = Sample(id="b", task="book", chunks=("Anna meets Bob.",))
    big = {"characters": {"Anna": ["meets Bob", "sails", "fights", "wins"], "Bob": ["leaves town"]}}
    small = {"characters": {"Anna": ["meets Bob"]}}
    k = cl100k_count(as_text(small))
    llm = _Cl100kScripted([json.dumps(big), json.dumps(big), "Anna meets Bob."])
    out = get_method("gu-json", memory_limit=k, compress_rounds=1).run(book, llm)
    assert [s.kind for s in out.steps] == ["initial", "compress", "final"]
    mem = out.steps[1].memory
    assert llm.count_tokens(as_text(mem)) <= k and mem == small
    assert any("trimmed" in f for f in out.steps[1].failures)
    # within K after compressing: nothing trimmed, nothing recorded
    ok = _Cl100kScripted([json.dumps(big), json.dumps(small), "Anna meets Bob."])
    out = get_method("gu-json", memory_limit=k).run(book, ok)
    assert out.steps[1].failures == [] and out.steps[1].memory == small


def test_json_memory_is_counted_compact_against_k() -> None:
    """Issue 30 point 7: K counts the compact JSON the prompt receives, not an indented rendering."""
    from memloop.eval.tokens import cl100k_count

    book = Sample(id="b", task="book", chunks=("Anna meets Bob.", "Bob leaves town."))
    memory = {
        "characters": {
            "Anna": ["meets Bob", "sails north", "fights the storm", "wins the race"],
            "Bob": ["leaves town", "writes letters"],
        },
        "events": {"storm": ["the boat nearly sinks", "Anna steers home"]},
    }
    compact = json.dumps(memory, ensure_ascii=False, separators=(",", ":"))
    k = cl100k_count(compact) + 2
    assert cl100k_count(json.dumps(memory, indent=2)) > k  # the indented form would have been compressed
    llm = _Cl100kScripted([json.dumps(memory, indent=2), json.dumps(memory), "Anna wins; Bob leaves."])
    out = get_method("gu-json", memory_limit=k).run(book, llm)
    assert [s.kind for s in out.steps] == ["initial", "update", "final"]  # no compression: within K
    assert compact in prompt(llm, 1)


@pytest.mark.parametrize("name", ["go-text", "gu-text", "gm-text", "go-json", "gu-json", "gm-json", "cok"])
def test_every_book_method_ends_with_the_same_neutral_final_step(name: str) -> None:
    """Issue 30 point 6: the paper gives every method one final step, the aggregated memory in and
    the final summary out; text memories get it too, and its prompt coaches no evaluator error type."""
    book = Sample(id="b", task="book", chunks=("Anna meets Bob.",))
    first = '{"characters": {"Anna": ["meets Bob"]}}' if name.endswith("json") or name == "cok" else "Anna meets Bob."
    llm = ScriptedLLM([first, "Anna meets Bob at the harbour."])
    out = get_method(name).run(book, llm)
    final = out.steps[-1]
    assert final.kind == "final" and final.template_id == "s000-book-final"
    assert out.answer == "Anna meets Bob at the harbour."
    instructions = prompt(llm, len(llm.requests) - 1).split("Memory:")[0]
    assert not any(w in instructions.lower() for w in ("character", "trivial", "coherent", "introduce"))


def test_text_prompts_keep_the_json_prompts_instructions_and_compression_may_merge_keys() -> None:
    """Issue 30 point 10: text and JSON differ in the memory's form only; figure 13 merges, it does not
    ask to keep the structure and keys."""
    from memloop.eval.templates import load_template

    shape = (
        "An attribute with several values",
        "Each value carries enough evidence from the paragraph about the entity.",
    )
    for step in ("initial", "update"):
        text = load_template(f"s000-entity-{step}-text").text
        assert load_template(f"s000-entity-{step}-json").text.count(shape[1]) == 1
        assert all(s in text for s in shape), step
    update = load_template("s000-entity-update-text").text
    assert "original values stay, new ones are added" in update and "All original attributes and values stay" in update
    assert "keys" not in load_template("s000-compress-json").text.split("Criteria:")[0]


class _SchemaRecorder(ScriptedLLM):
    """Takes JSON schemas and answers every request with one valid entity table (CoK's revise step gets
    figure 5's sections); records which requests carried a schema."""

    def __init__(self) -> None:
        super().__init__([], supports_json_schema=True)

    def complete(self, request):  # type: ignore[override]
        from memloop.eval.llm import LLMResult, Usage

        self.requests.append(request)
        text = request.messages[0]["content"]
        if "[THOUGHTS FOR UPDATE]" in text.rsplit("===", 1)[-1]:
            out = (
                "[THOUGHTS FOR UPDATE]\n1. none\n\n[UPDATED_OBJECTS]\n{}\n\n[THOUGHTS FOR ADD]\n1. food\n\n"
                '[ADDED_OBJECTS]\n{"$.attributes.Food": {"add": ["cold breakfast"]}}\n'
            )
        else:
            out = '{"Amenities": ["huge pool"], "Food": ["cold breakfast"]}'
        return LLMResult(text=out, usage=Usage(1, 0, 1))


THREE = Sample(
    id="h1",
    task="sumie",
    chunks=("The pool is huge.", "Breakfast was cold.", "Staff were kind."),
    metadata={"entity": "HOTEL1"},
)


@pytest.mark.parametrize("name", ["go-json", "gu-json", "gm-json", "cok"])
def test_json_methods_write_json_freely_by_default_and_under_the_schema_when_asked(name: str) -> None:
    """Issue 46 point 1: every GU/GM-json generate, update, dedupe and compress step and CoK's JSON steps
    sent a JSON schema whenever the LLM took one, so JSON outputs were always valid while text ones
    could fail. Now `decoding: text` (the default) sends none; `constrained` sends one on every JSON step."""
    limit = {} if name == "go-json" else {"memory_limit": 2}  # K binds: compress steps run too
    free = _SchemaRecorder()
    out = get_method(name, **limit).run(THREE, free)
    assert out.settings["decoding"] == "text" and free.requests
    assert [r.json_schema for r in free.requests] == [None] * len(free.requests)
    held = _SchemaRecorder()
    out = get_method(name, decoding="constrained", **limit).run(THREE, held)
    kinds = {s.kind for s in out.steps}
    if name != "go-json":
        assert "compress" in kinds and kinds & {"update", "dedupe", "revise"}
    kind_of = {s.prompt: s.kind for s in out.steps}  # retried requests repeat their step's prompt
    for request in held.requests:
        # CoK's revise step is figure 5's sections under either decoding; every other JSON step is held
        kind = kind_of[request.messages[0]["content"]]
        assert (request.json_schema is not None) == (kind != "revise"), kind


def test_constrained_decoding_needs_a_json_method_and_a_server_that_takes_schemas() -> None:
    with pytest.raises(MethodError, match="text summary has no JSON schema"):
        get_method("gu-text", decoding="constrained")
    with pytest.raises(MethodError, match="decoding: constrained needs a model server"):
        get_method("gm-json", decoding="constrained").run(HOTEL, ScriptedLLM(['{"A": ["b"]}'] * 3))
