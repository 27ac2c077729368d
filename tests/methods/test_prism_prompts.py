"""PRISM's revise prompts (seed 002 appendix C) read as data: the four worked examples keep the paper's
structure, every example answer applies to its example memory under its example class, and the
constrained (JSON) prompts show the same revisions in the form the server holds the model to."""

from __future__ import annotations

import jsonschema
import pytest
from memloop.eval.memory import Schema, apply_revisions, parse_prism, parse_revision_list
from memloop.eval.memory.formats import split_sections
from memloop.eval.memory.literal import loads
from memloop.eval.methods.structured import constrained_schema
from memloop.eval.templates import load_template

TEXT_TEMPLATES = {"s002-prism-revise": ("add", "update"), "s002-prism-revise-addonly": ("add",)}
JSON_TEMPLATES = {f"{t}-json": ops for t, ops in TEXT_TEMPLATES.items()}
KINDS = ("comparing two entities", "summarizing an entity", "SQL tables", "code retrieval")


def examples(template_id: str) -> list[dict[str, str]]:
    """Each worked example of a revise template as {title, QUESTION, CLASS, PARTIAL_SUMMARY, TEXT, answer}."""
    blocks = load_template(template_id).text.split("\n\n===\n\n")[1:-1]  # the instructions hold the first
    first = load_template(template_id).text.split("\n\n===\n\n")[0]
    blocks.insert(0, first[first.index("Here is an example") :])
    out = []
    for block in blocks:
        title, rest = block.split("\n", 1)
        sections = split_sections(rest)
        answer_at = rest.index("[REVISIONS]" if "[REVISIONS]" in rest else "[OBJECTS FOR")
        out.append({"title": title, **{k: v.strip("\n") for k, v in sections.items()}, "answer": rest[answer_at:]})
    return out


@pytest.mark.parametrize("tid", [*TEXT_TEMPLATES, *JSON_TEMPLATES])
def test_four_examples_in_the_papers_order_each_with_a_prior_memory(tid: str) -> None:
    exs = examples(tid)
    assert [next(k for k in KINDS if k in e["title"]) for e in exs] == list(KINDS)
    for e in exs:
        assert loads(e["PARTIAL_SUMMARY"]), (tid, e["title"])  # never an empty memory


def test_entity_comparison_has_tuple_values_and_placeholders() -> None:
    comp = examples("s002-prism-revise")[0]
    assert "tuple[str, str]" in comp["CLASS"] and '"???"' in comp["PARTIAL_SUMMARY"]
    assert '"weight": ("410 g per boot", "???")' in comp["PARTIAL_SUMMARY"]  # Python tuples, as the paper writes
    parsed = parse_prism(comp["answer"])
    assert [r.op for r in parsed.revisions] == ["update", "add", "add", "add"]
    assert all(line.rstrip().endswith(")}}") for line in comp["answer"].splitlines() if line.startswith("{"))
    assert all(len(r.value) == 2 for r in parsed.revisions) and sum("???" in r.value for r in parsed.revisions) == 3


def test_sql_and_code_examples_write_empty_updates_as_braces_and_code_records_near_misses() -> None:
    _, _, sql, code = examples("s002-prism-revise")
    for e in (sql, code):
        assert e["answer"].split("[OBJECTS FOR ADD]")[0].strip() == "[OBJECTS FOR UPDATE]\n{}"
    assert sql["TEXT"].count("Table: ") >= 3  # several tables in one chunk, one of them answers the query
    assert code["TEXT"].startswith("File path: ") and len(loads(code["PARTIAL_SUMMARY"])["candidate_functions"]) == 2
    assert "1. Purpose:" in code["QUESTION"] and "4. Procedure:" in code["QUESTION"]
    added = {r.path.segments[-1]: r.value for r in parse_prism(code["answer"]).revisions}
    assert len(added) == 3  # the match and the near misses beside it
    assert [name for name, v in added.items() if v["procedure"] == "Unknown"] == ["even_widths"]  # cut off in TEXT
    assert all(f"def {name}(" in code["TEXT"] for name in added)


@pytest.mark.parametrize("tid", list(TEXT_TEMPLATES))
def test_every_example_answer_applies_to_its_memory_under_its_class(tid: str) -> None:
    for e in examples(tid):
        schema = Schema.from_text(e["CLASS"])
        parsed = parse_prism(e["answer"])
        assert parsed.rejected == [] and parsed.revisions, (tid, e["title"])
        assert all(r.op in TEXT_TEMPLATES[tid] for r in parsed.revisions)
        res = apply_revisions(loads(e["PARTIAL_SUMMARY"]), parsed.revisions, schema, TEXT_TEMPLATES[tid])
        assert res.rejected == [], (tid, e["title"], [r.reason for r in res.rejected])


@pytest.mark.parametrize("tid", list(JSON_TEMPLATES))
def test_json_examples_hold_the_text_examples_revisions_in_the_constrained_form(tid: str) -> None:
    text_tid = tid.removesuffix("-json")
    for e, t in zip(examples(tid), examples(text_tid)):
        assert {k: e[k] for k in ("QUESTION", "CLASS", "PARTIAL_SUMMARY", "TEXT")} == {
            k: t[k] for k in ("QUESTION", "CLASS", "PARTIAL_SUMMARY", "TEXT")
        }
        body = e["answer"].removeprefix("[REVISIONS]").strip()
        as_json = parse_revision_list(body).revisions
        as_text = parse_prism(t["answer"]).revisions
        assert [(r.path, r.op, loads_json(r.value)) for r in as_json] == [
            (r.path, r.op, loads_json(r.value)) for r in as_text
        ]
        schema = Schema.from_text(e["CLASS"])
        jsonschema.validate(loads(body), constrained_schema(schema, JSON_TEMPLATES[tid], thoughts=False))


def loads_json(value):  # tuples of the text form are JSON arrays in the constrained form
    import json

    return json.loads(json.dumps(value))
