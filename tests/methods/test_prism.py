"""PRISM on a scripted LLM: prompt layout, in-place vs amendments memories, add-only, schema generation,
and the prefix-sharing property measured in tokens."""

from __future__ import annotations

import json

import pytest
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.llm import LLMRequest, LLMResult, ScriptedLLM, Usage
from memloop.eval.memory import shared_prefix_tokens
from memloop.eval.methods import get_method

BOOK = Sample(id="b", task="book", chunks=("Anna sails to Crete.", "Anna becomes a captain.", "Bob joins her."))
REVS = [
    '[OBJECTS FOR UPDATE]\n\n[OBJECTS FOR ADD]\n{"$. \'attributes\'. \'Anna\'": {"add": ["sails to Crete"]}}\n'
    '{"$. \'attributes\'. \'Voyage\'": {"add": ["a long trip across the sea to the island of Crete"]}}',
    '[OBJECTS FOR UPDATE]\n{"$. \'attributes\'. \'Anna\'": {"update": ["sails to Crete", "becomes a captain"]}}\n\n'
    "[OBJECTS FOR ADD]\n",
    '[OBJECTS FOR UPDATE]\n\n[OBJECTS FOR ADD]\n{"$. \'attributes\'. \'Bob\'": {"add": ["joins Anna"]}}',
    "Anna sails to Crete, becomes a captain, and Bob joins her.",
]
FINAL = {
    "attributes": {
        "Anna": ["sails to Crete", "becomes a captain"],
        "Voyage": ["a long trip across the sea to the island of Crete"],
        "Bob": ["joins Anna"],
    }
}


def content(llm: ScriptedLLM, i: int) -> str:
    return llm.requests[i].messages[0]["content"]


@pytest.mark.parametrize("name", ["prism-inplace", "prism-amendments"])
def test_same_revisions_same_memory(name: str) -> None:
    llm = ScriptedLLM(REVS)
    out = get_method(name).run(BOOK, llm)
    assert [s.kind for s in out.steps] == ["revise", "revise", "revise", "final"]
    assert out.memory == FINAL and out.answer == REVS[-1] and out.failures == []
    p = content(llm, 1)
    assert (
        p.index("[QUESTION]\nSummarize this book.")
        < p.index("[CLASS]\nclass BookSummary")
        < p.rindex("[PARTIAL_SUMMARY]")
        < p.index("[TEXT]\nAnna becomes a captain.")
    )  # memory before the chunk
    assert ("amendments, one per line" in p) == (name == "prism-amendments")


def test_amendments_rendering_appends_lines() -> None:
    llm = ScriptedLLM(REVS)
    get_method("prism-amendments").run(BOOK, llm)
    mem2 = content(llm, 2).split("[PARTIAL_SUMMARY]\n")[-1].split("\n\n[TEXT]")[0]
    lines = mem2.splitlines()
    assert lines[0] == "{}" and json.loads(lines[-1]) == {
        "$. 'attributes'. 'Anna'": {"update": ["sails to Crete", "becomes a captain"]}
    }
    assert len(lines) == 4


def test_amendments_share_longer_prefix_in_tokens() -> None:
    def prefixes(name: str) -> list[int]:
        llm = ScriptedLLM(REVS)
        get_method(name).run(BOOK, llm)
        prompts = [content(llm, i) for i in range(3)]
        return [shared_prefix_tokens(a, b) for a, b in zip(prompts, prompts[1:])]

    inplace, amended = prefixes("prism-inplace"), prefixes("prism-amendments")
    # step 2 -> 3 follows an update of the first key: in-place re-renders it, amendments only append
    assert amended[1] > inplace[1]
    assert sum(amended) > sum(inplace)


def test_add_only_variant_rejects_updates() -> None:
    llm = ScriptedLLM(REVS)
    out = get_method("prism-inplace", updates=False).run(BOOK, llm)
    assert "[OBJECTS FOR UPDATE]" not in content(llm, 0) and content(llm, 0).rstrip().endswith("[OBJECTS FOR ADD]")
    assert out.memory["attributes"]["Anna"] == ["sails to Crete"]
    assert any("update is not allowed" in f for f in out.failures)


def test_constrained_revisions_and_repoqa_answer() -> None:
    repo = Sample(
        id="r",
        task="repoqa",
        chunks=("def add(a, b):\n    return a + b",),
        query="Find the function that sums two numbers.",
    )
    rev = {
        "revisions": [
            {
                "path": "$.candidate_functions.add",
                "op": "add",
                "value": {"purpose": "sums", "input": "a, b", "output": "sum", "procedure": "a + b"},
            }
        ]
    }
    llm = ScriptedLLM([json.dumps(rev), "add\nbecause it sums"], supports_json_schema=True)
    out = get_method("prism-amendments", updates=False, decoding="constrained", max_revisions=3).run(repo, llm)
    revisions = llm.requests[0].json_schema["properties"]["revisions"]
    assert revisions["items"]["anyOf"][0]["properties"]["op"] == {"enum": ["add"]} and revisions["maxItems"] == 3
    assert llm.requests[1].json_schema is None
    assert out.answer == "add" and "add" in out.memory["candidate_functions"]


def test_decoding_is_the_papers_text_format_by_default_even_where_json_schema_is_supported() -> None:
    """Seed 002 appendix C: the model writes [OBJECTS FOR UPDATE] / [OBJECTS FOR ADD] lines; no schema is
    sent, and an answer that continues the section the prompt opened (no header of its own) keeps its lines."""
    answers = [
        '{"$. \'attributes\'. \'Anna\'": {"add": ["sails to Crete"]}}\n\n[OBJECTS FOR ADD]\n'
        '{"$. \'attributes\'. \'Ship\'": {"add": ["a brig"]}}',
        "[OBJECTS FOR UPDATE]\n{}",
        "{}",
        "done",
    ]
    llm = ScriptedLLM(answers, supports_json_schema=True)
    out = get_method("prism-inplace").run(BOOK, llm)
    assert all(r.json_schema is None for r in llm.requests)
    assert content(llm, 0).rstrip().endswith("[OBJECTS FOR UPDATE]") and "[REVISIONS]" not in content(llm, 0)
    assert out.settings["decoding"] == "text" and out.steps[0].template_id == "s002-prism-revise"
    assert out.memory == {"attributes": {"Anna": ["sails to Crete"], "Ship": ["a brig"]}} and out.failures == []


def test_constrained_decoding_describes_its_form_and_keeps_complete_revisions_cut_at_max_tokens() -> None:
    """decoding: constrained sends the JSON schema with a prompt that shows {"revisions": [...]}; an output
    cut inside its second revision keeps the first, and the cut is recorded."""
    first = {"path": "$. 'attributes'. 'Anna'", "op": "add", "value": ["sails to Crete"]}
    cut = '{"revisions": [' + json.dumps(first) + ", {\"path\": \"$. 'attributes'. 'Bo"
    llm = ScriptedLLM([cut, '{"revisions": []}', '{"revisions": []}', "done"], supports_json_schema=True)
    out = get_method("prism-amendments", decoding="constrained").run(BOOK, llm)
    prompt = content(llm, 0)
    assert llm.requests[0].json_schema is not None and prompt.rstrip().endswith("[REVISIONS]")
    assert '{"revisions": [' in prompt and "[OBJECTS FOR" not in prompt
    assert out.settings["decoding"] == "constrained" and out.steps[0].template_id == "s002-prism-revise-json"
    assert out.steps[0].ok and out.memory == {"attributes": {"Anna": ["sails to Crete"]}}
    assert any("cut at max_tokens" in f and "1 complete revision" in f for f in out.steps[0].failures)


def test_constrained_decoding_needs_a_server_that_supports_it_and_max_revisions_needs_constrained() -> None:
    with pytest.raises(MethodError, match="decoding: text"):
        get_method("prism-inplace", decoding="constrained").run(BOOK, ScriptedLLM(["x"], supports_json_schema=False))
    with pytest.raises(MethodError, match="decoding: constrained"):
        get_method("prism-inplace", max_revisions=2)
    with pytest.raises(MethodError, match="decoding"):
        get_method("prism-inplace", decoding="grammar")


SCHEMA_ANSWER = '```python\nclass Notes:\n    """Key facts."""\n    facts: list[str]\n```'


class KindScriptedLLM(ScriptedLLM):
    """A ScriptedLLM with one script per kind of prompt (schema generation, revision, final answer),
    each replayed in order: concurrent samples interleave their revise and answer calls in any order,
    so one global script would hand a revise prompt an answer. A kind whose script runs out raises."""

    def __init__(self, scripts: dict[str, list[str]], name: str) -> None:
        super().__init__([], name=name)
        self._scripts = {kind: list(texts) for kind, texts in scripts.items()}

    def complete(self, request: LLMRequest) -> LLMResult:
        content = request.messages[0]["content"]
        kind = "schema" if "[Query domain]" in content else "revise" if "[PARTIAL_SUMMARY]" in content else "answer"
        with self._lock:
            if not self._scripts.get(kind):
                raise AssertionError(f"no scripted {kind} output left after {len(self.requests)} calls")
            text = self._scripts[kind].pop(0)
            self.requests.append(request)
        return LLMResult(text=text, usage=Usage(self.count_tokens(content), 0, self.count_tokens(text)))


def test_generated_schema_is_made_once_per_task_from_the_task_example_query() -> None:
    """Seed 002 section 3.4: one schema per task, from the task's example query (not the sample's own
    query), reused for every sample; concurrent samples wait for the one generation."""
    from concurrent.futures import ThreadPoolExecutor

    from memloop.eval.methods.prism import EXAMPLE_QUERIES

    samples = [
        Sample(id=f"r{i}", task="repoqa", chunks=(f"def f{i}(): pass",), query=f"OWN QUERY {i}") for i in range(4)
    ]
    rev = '[OBJECTS FOR ADD]\n{"$.facts": {"add": ["a function"]}}'
    # one schema answer, then a revise and a final answer per sample: a second generation runs out the script
    llm = KindScriptedLLM({"schema": [SCHEMA_ANSWER], "revise": [rev] * 4, "answer": ["f"] * 4}, name="schema-once")
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(lambda smp: get_method("prism-inplace", generate_schema=True).run(smp, llm), samples))
    prompts = [r.messages[0]["content"] for r in llm.requests]
    gen = [p for p in prompts if "[Query domain]" in p]
    assert len(gen) == 1 and EXAMPLE_QUERIES["repoqa"] in gen[0] and "OWN QUERY" not in gen[0]
    assert len(llm.requests) == 1 + 2 * 4
    for out in outs:
        assert out.steps[0].kind == "schema" and out.steps[0].ok and "class Notes" in out.steps[0].parsed
        assert out.memory == {"facts": ["a function"]} and out.failures == []
    # the one generation's tokens are counted once over the run
    assert sum(o.steps[0].usage.decoded_tokens for o in outs) == llm.count_tokens(SCHEMA_ANSWER)


def test_generated_schema_is_one_per_task_across_repeats() -> None:
    """Repeats run with their own seeds (the jobs layer passes seed = base + repeat); the task's schema is
    still generated once (table 4 compares one generated schema per task, not an average of five)."""
    sample = Sample(id="r0", task="repoqa", chunks=("def f(): pass",), query="q")
    rev = '[OBJECTS FOR ADD]\n{"$.facts": {"add": ["a function"]}}'
    llm = ScriptedLLM([SCHEMA_ANSWER] + [rev, "f"] * 3, name="schema-repeats")
    outs = [
        get_method("prism-inplace", generate_schema=True, seed=seed, temperature=0.8).run(sample, llm)
        for seed in (0, 1, 2)
    ]
    assert sum("[Query domain]" in r.messages[0]["content"] for r in llm.requests) == 1
    assert all(o.steps[0].ok for o in outs)


def test_generated_schema_failure_is_retried_then_recorded_on_every_sample() -> None:
    llm = ScriptedLLM(["not a schema at all", "still not one"], name="schema-fails")
    settings = {"generate_schema": True, "schema_attempts": 2}
    outs = [
        get_method("prism-inplace", **settings).run(Sample(id=f"b{i}", task="book", chunks=("x",)), llm)
        for i in range(2)
    ]
    assert len(llm.requests) == 2  # two attempts, then the failure is reused, not asked again
    assert llm.requests[1].sampling.temperature > 0  # a retry resamples: a greedy model would repeat itself
    for out in outs:
        assert out.answer == "" and [s.kind for s in out.steps] == ["schema"] and not out.steps[0].ok
        assert any("no generated schema for task 'book' parsed in 2 attempt(s)" in f for f in out.failures)
        assert any("not a typed hierarchy" in f for f in out.failures)
        assert out.failure.startswith("not run: no generated schema for task 'book' parsed in 2 attempt(s)")
    with pytest.raises(MethodError, match="unknown schema"):
        get_method("prism-inplace", schema="nope")
    with pytest.raises(MethodError, match="generate_schema: true"):
        get_method("prism-inplace", schema_domain="Code search.")


def test_generated_schema_prompt_uses_the_task_domain() -> None:
    llm = ScriptedLLM(
        [SCHEMA_ANSWER, '[OBJECTS FOR ADD]\n{"$.facts": {"add": ["Anna sails"]}}', "Anna sails."], name="schema-book"
    )
    out = get_method("prism-inplace", generate_schema=True).run(
        Sample(id="b", task="book", chunks=("Anna sails.",)), llm
    )
    assert "[Query domain]\nSummarizing very long narrative books" in content(llm, 0)
    assert "class Notes" in content(llm, 1) and out.memory == {"facts": ["Anna sails"]}


SPIDER = Sample(
    id="s",
    task="spider",
    chunks=("Table: singer\nsinger_id,name\n1,Joe Sharp\n2,Timbaland",),
    query="How many singers are there?",
    gold=[[2]],
)


@pytest.mark.parametrize(
    "final,want",
    [
        ("There are two rows in the singer table.\nFinal Answer: [[2]]", 1.0),  # LOFT's answer line after reasoning
        ("Final Answer: [['2']]", 1.0),  # Python literal, as LOFT parses it
        ("**Final Answer:** `[[3]]`", 0.0),  # formatting stripped, wrong count
        ("2", 0.0),  # no list of lists: LOFT scores it 0
    ],
)
def test_spider_answer_scores_through_loft_exec(final: str, want: float) -> None:
    """The Spider answer prompt asks for LOFT's format and `loft-exec` reads that format, from the
    method's raw output text to the score."""
    from memloop.eval.judges import get_judge, run_judge

    rev = "[OBJECTS FOR UPDATE]\n\n[OBJECTS FOR ADD]\n"
    llm = ScriptedLLM([rev, final])
    out = get_method("prism-inplace").run(SPIDER, llm)
    assert "Final Answer: [[" in content(llm, 1)  # the prompt shows LOFT's answer line
    info = get_judge("loft-exec")
    res = run_judge("loft-exec", info.prediction(out, len(SPIDER.chunks)), SPIDER.gold)
    assert res.score("accuracy") == want


def test_amendments_note_says_what_fold_does() -> None:
    """The note the model reads about the amendments text and `fold()` agree: an `add` at a list path
    appends (the earlier items stay), an `update` replaces."""
    revs = [
        '[OBJECTS FOR ADD]\n{"$. \'attributes\'. \'Anna\'": {"add": ["sails to Crete"]}}',
        '[OBJECTS FOR ADD]\n{"$. \'attributes\'. \'Anna\'": {"add": "becomes a captain"}}',
        '[OBJECTS FOR UPDATE]\n{"$. \'attributes\'. \'Bob\'": {"update": ["x"]}}\n[OBJECTS FOR ADD]\n'
        '{"$. \'attributes\'. \'Bob\'": {"add": ["joins Anna"]}}',
        "summary",
    ]
    llm = ScriptedLLM(revs)
    out = get_method("prism-amendments").run(BOOK, llm)
    assert out.memory["attributes"]["Anna"] == ["sails to Crete", "becomes a captain"]  # fold appended
    note = content(llm, 2).split("[PARTIAL_SUMMARY]\n")[0]
    assert "replaces that value" not in note  # the old note: any later amendment replaces the value
    assert '"add" at a path that holds a list appends' in note and "earlier items stay" in note
    assert '"update" replaces the value' in note


def test_add_only_variant_says_add_appends_and_never_advises_update() -> None:
    """The add-only prompt says an `add` at a list path appends (and at a new list path starts the list);
    adding at an existing non-list path is rejected with a reason that stays within the variant."""
    schema_answer = "```python\nclass Notes:\n    title: str\n    facts: list[str]\n```"
    revs = [
        schema_answer,
        '[OBJECTS FOR ADD]\n{"$.title": {"add": "Crete"}}\n{"$.facts": {"add": "Anna sails"}}',
        '[OBJECTS FOR ADD]\n{"$.title": {"add": "Captain Anna"}}\n{"$.facts": {"add": "Anna leads"}}',
        "{}",
        "done",
    ]
    llm = ScriptedLLM(revs, name="addonly-wording")
    out = get_method("prism-inplace", updates=False, generate_schema=True).run(BOOK, llm)
    prompt = content(llm, 1)
    assert "appends the object as one new item" in prompt and "starts that list with the item" in prompt
    assert out.memory == {"title": "Crete", "facts": ["Anna sails", "Anna leads"]}  # one-item list, then appended
    (reason,) = [f for f in out.failures if "'title'" in f]
    assert "use 'update'" not in reason and "may only add" in reason


def test_amendments_note_names_the_section_it_describes() -> None:
    """The note reads [PARTIAL_SUMMARY] in the revise prompts and [MEMORY] in the final prompt (whose memory
    section is [MEMORY]), and says that an `add` of one item at a new list path makes a one-item list."""
    llm = ScriptedLLM(REVS)
    get_method("prism-amendments").run(BOOK, llm)
    revise, final = content(llm, 0), content(llm, 3)
    assert "About [PARTIAL_SUMMARY]: it is written as a base object" in revise
    assert "About [MEMORY]: it is written as a base object" in final and "About [PARTIAL_SUMMARY]" not in final
    assert "makes a list of that one item" in revise


def test_spider_uses_the_papers_relevant_table_info_schema() -> None:
    """Seed 002 appendix A.1: PRISM's Spider memory is `RelevantTableInfo` (a list of TableDescription)."""
    llm = ScriptedLLM(
        [
            '[OBJECTS FOR ADD]\n{"$.table_descriptions": {"add": [{"table_name": "singer", '
            '"table_description": "singers", "columns_observed": ["singer_id: int"], '
            '"relevant_statistics": ["2 rows"], "relationships": []}]}}',
            "Final Answer: [[2]]",
        ]
    )
    out = get_method("prism-amendments").run(SPIDER, llm)
    assert "class RelevantTableInfo" in content(llm, 0) and "relevant_statistics" in content(llm, 0)
    assert out.memory["table_descriptions"][0]["relevant_statistics"] == ["2 rows"]


def test_generated_schema_is_asked_again_until_one_parses_each_attempt_recorded() -> None:
    """Issue 46 point 10: the paper used one working schema; a schema that failed within the steps'
    max_attempts (3) was cached and zeroed the whole table 4 cell. Generation is now bounded apart
    (`schema_attempts`, 10) and every rejected attempt is on the schema step."""
    rev = '[OBJECTS FOR ADD]\n{"$.facts": {"add": ["a function"]}}'
    llm = ScriptedLLM(["no schema"] * 4 + [SCHEMA_ANSWER, rev, "f"], name="schema-fifth")
    out = get_method("prism-inplace", generate_schema=True).run(
        Sample(id="r", task="repoqa", chunks=("def f(): pass",), query="q"), llm
    )
    step = out.steps[0]
    assert step.kind == "schema" and step.ok and step.attempts == 5 and len(step.failures) == 4
    assert out.failure is None and out.memory == {"facts": ["a function"]}
