"""SUMIE: the generator's gold is consistent and the official-format loader reads what it writes."""

from __future__ import annotations

import json
import re

import pytest
from memloop.eval.datasets import load_dataset
from memloop.eval.datasets.errors import (
    DatasetError,
    EmptyDatasetError,
    InconsistentGoldError,
    MissingFieldError,
    UnknownFormatError,
)
from memloop.eval.datasets.sumie import generate_sumie, load_sumie, verify_sumie_record, write_sumie_jsonl
from memloop.eval.datasets.sumie.generator import PARAGRAPHS, name_words


@pytest.fixture(scope="module")
def records():
    return list(generate_sumie(300, seed=7))


def test_deterministic_and_varied(records):
    assert records[:5] == list(generate_sumie(5, seed=7))
    assert records[0] != next(generate_sumie(1, seed=8))
    assert len({r["entity_name"] for r in records}) == 300
    assert {r["entity_category"] for r in records} == {"person", "restaurant", "company", "hotel", "product"}
    paragraphs = [p for r in records for p in r["paragraph_summaries"]]
    assert {p["paragraph_writing_style"] for p in paragraphs} == {
        "encyclopedia entry",
        "news report",
        "user review",
        "casual conversation",
    }
    assert {p["paragraph_sentiment"] for p in paragraphs} == {"optimistic", "neutral", "analytic", "pessimistic"}
    assert all(len(r["paragraph_summaries"]) == PARAGRAPHS for r in records)


def test_gold_values_appear_in_cited_sentences_and_aggregate(records):
    for r in records:
        verify_sumie_record(r)
        sentences = {}
        previous: list = []
        for para in r["paragraph_summaries"]:
            sentences.update(dict((i, t) for i, t in para["paragraph"]))
            pairs = [(x["attribute"], x["value"]) for x in para["summary"]]
            assert pairs[: len(previous)] == previous  # aggregated: earlier facts stay, in order
            previous = pairs
            for item in para["summary"]:
                assert item["sentence_ids"] and len(item["evidences"]) == len(item["sentence_ids"])
                for sid, ev in zip(item["sentence_ids"], item["evidences"]):
                    assert item["value"] in sentences[sid] == ev  # literally, case included


def test_distractors_never_mention_the_target(records):
    for r in records:
        name = r["entity_name"]
        assert r["distractor_sentences"]
        in_paragraphs = {i: t for p in r["paragraph_summaries"] for i, t in p["paragraph"]}
        assert len(in_paragraphs) == sum(len(p["paragraph"]) for p in r["paragraph_summaries"])  # ids unique per entity
        for sid in r["distractor_sentences"]:
            text = in_paragraphs[sid]
            assert name.lower() not in text.lower()
            assert not ({w.lower() for w in re.findall(r"\w+", text)} & name_words(name))


def test_written_file_round_trips_through_the_loader(tmp_path, records):
    path = write_sumie_jsonl(tmp_path / "dataset_sumie.jsonl", 300, seed=7)
    assert [json.loads(line) for line in path.read_text().splitlines()] == records
    samples = load_sumie(path, verify_gold=True)
    assert len(samples) == 300 and len({s.id for s in samples}) == 300
    s, r = samples[0], records[0]
    assert s.task == "sumie" and len(s.chunks) == PARAGRAPHS and r["entity_name"] in s.query
    assert s.metadata["entity"] == r["entity_name"] and s.metadata["entity_category"] == r["entity_category"]
    assert s.chunks[0] == " ".join(t for _, t in r["paragraph_summaries"][0]["paragraph"])
    assert s.metadata["paragraph_sentiments"] == [p["paragraph_sentiment"] for p in r["paragraph_summaries"]]
    last = {}
    for item in r["paragraph_summaries"][-1]["summary"]:
        last.setdefault(item["attribute"], []).append(item["value"])
    assert s.gold["turns"][-1] == last and len(s.gold["turns"]) == PARAGRAPHS
    assert all(len(a) <= len(b) for a, b in zip(s.gold["turns"], s.gold["turns"][1:]))
    assert load_dataset("sumie", path=str(path), limit=3)[2].id == samples[2].id
    assert [x.id for x in load_dataset("sumie", synthetic=True, entities=4, seed=7)] == [x.id for x in samples[:4]]


def test_generation_is_fast_for_hundreds(records):
    assert len(list(generate_sumie(800, seed=1))) == 800  # would take minutes if anything were quadratic


def test_malformed_files(tmp_path, records):
    p = tmp_path / "s.jsonl"
    p.write_text("")
    with pytest.raises(EmptyDatasetError):
        load_sumie(p)
    p.write_text("{not json\n")
    with pytest.raises(UnknownFormatError, match=r"s.jsonl:1"):
        load_sumie(p)
    broken = dict(records[0])
    del broken["entity_category"]
    p.write_text(json.dumps(records[1]) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(MissingFieldError, match=r"s.jsonl:2: missing field 'entity_category'"):
        load_sumie(p)
    bad = json.loads(json.dumps(records[0]))
    bad["paragraph_summaries"][0]["summary"][0]["value"] = "a value nobody wrote"
    p.write_text(json.dumps(bad) + "\n")
    assert load_sumie(p)  # the official data may paraphrase: checking is opt-in
    with pytest.raises(InconsistentGoldError, match="does not appear"):
        load_sumie(p, verify_gold=True)
    (tmp_path / "s.csv").write_text("a,b\n")
    with pytest.raises(UnknownFormatError):
        load_sumie(tmp_path / "s.csv")


def _broken(record: dict, change) -> dict:
    copy = json.loads(json.dumps(record))
    change(copy)
    return copy


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda r: r["paragraph_summaries"][1]["summary"][0].update(value={"nested": 1}),
            "field 'paragraph_summaries[1].summary[0].value': must be a string or number, got dict",
        ),
        (
            lambda r: r["paragraph_summaries"][0]["summary"][2].pop("attribute"),
            "missing field 'paragraph_summaries[0].summary[2].attribute'",
        ),
        (
            lambda r: r["paragraph_summaries"][2]["paragraph"].__setitem__(1, [7, 8]),
            "field 'paragraph_summaries[2].paragraph[1][1]': input should be a valid string, got int",
        ),
        (
            lambda r: r["paragraph_summaries"][2]["paragraph"].__setitem__(1, "no id"),
            "field 'paragraph_summaries[2].paragraph[1]': input should be a valid tuple, got str",
        ),
        (
            lambda r: r["paragraph_summaries"].__setitem__(3, "a paragraph as text"),
            "field 'paragraph_summaries[3]': input should be a valid dictionary",
        ),
        (
            lambda r: r["paragraph_summaries"].clear(),
            "field 'paragraph_summaries': is empty: an entity needs at least one paragraph;",
        ),
        (
            lambda r: r.update(distractor_sentences=5),
            "field 'distractor_sentences': input should be a valid list, got int",
        ),
        (lambda r: r.update(entity_name=None), "field 'entity_name': input should be a valid string, got NoneType"),
    ],
)
def test_a_malformed_record_names_its_line_and_field(tmp_path, records, change, says):
    """Read through the SUMIE row models: the error is the datasets' MissingFieldError with the file's line, the
    field's path and what to do, never pydantic's ValidationError."""
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(records[0]) + "\n" + json.dumps(_broken(records[1], change)) + "\n")
    with pytest.raises(MissingFieldError) as caught:
        load_sumie(p)
    message = str(caught.value)
    assert message.startswith(f"{p}:2: {says}"), message
    assert message.endswith("fix the record to the SUMIE release's format (memloop.eval.datasets.sumie.rows)")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no pydantic traceback behind it


def test_the_accepted_variants_read_as_the_release_form(records):
    """`sentences` for `paragraph`, a plain-string paragraph, a number as a value, one id bare and [id, text]
    distractors are the same entity as the release's own spelling."""
    from memloop.eval.datasets.sumie import sumie_sample

    base = json.loads(json.dumps(records[0]))
    first = base["paragraph_summaries"][0]
    first["summary"][0]["sentence_ids"] = first["summary"][0]["sentence_ids"][:1]
    variant = json.loads(json.dumps(base))
    v0 = variant["paragraph_summaries"][0]
    v0["sentences"] = v0.pop("paragraph")
    v0["summary"][0]["sentence_ids"] = v0["summary"][0]["sentence_ids"][0]
    variant["distractor_sentences"] = [[d, "text"] for d in base.get("distractor_sentences", [])]
    a, b = sumie_sample(base), sumie_sample(variant)
    assert (a.id, a.chunks, a.gold, a.metadata) == (b.id, b.chunks, b.gold, b.metadata)
    plain = json.loads(json.dumps(base))
    plain["paragraph_summaries"][0]["paragraph"] = "First line.\n\nSecond line."
    plain["paragraph_summaries"][0]["summary"][0]["value"] = 42
    s = sumie_sample(plain)
    assert s.chunks[0] == "First line.\n\nSecond line."
    assert s.metadata["sentences"][0] == [["line0", "First line."], ["line1", "Second line."]]
    assert s.gold["facts"][0][0]["value"] == "42"


def test_release_readme_example_shape(tmp_path):
    """The record shape of the SUMIE release (masked names, 'P' ids, paraphrased values, id-only distractors)."""
    record = {
        "entity_name": "ENTITY0",
        "entity_category": "Computer & Video Games",
        "paragraph_summaries": [
            {
                "paragraph": [
                    ["P0", "ENTITY0 offers hours of gameplay content ."],
                    ["P1", "ENTITY201 shaped gaming culture."],
                    ["P2", "Its mechanics allow many playstyles ."],
                ],
                "summary": [
                    {
                        "attribute": "Content Variety",
                        "value": "Hours of gameplay content",
                        "sentence_ids": ["P0"],
                        "evidences": ["ENTITY0 offers hours of gameplay content"],
                    }
                ],
                "paragraph_sentiment": "analytic",
                "paragraph_writing_style": "user reviews by senior",
            },
            {
                "paragraph": [["P0", "Performance improved after updates ."]],
                "summary": [
                    {
                        "attribute": "Content Variety",
                        "value": "Hours of gameplay content",
                        "sentence_ids": ["P0"],
                        "evidences": [],
                    },
                    {"attribute": "Gameplay", "value": "Multiple playstyles", "sentence_ids": ["P2"], "evidences": []},
                ],
                "paragraph_sentiment": "neutral",
                "paragraph_writing_style": "news",
            },
        ],
        "distractor_sentences": ["P1"],
    }
    p = tmp_path / "dataset_sumie.jsonl"
    p.write_text(json.dumps(record) + "\n")
    [s] = load_sumie(p)
    assert s.chunks == (
        "ENTITY0 offers hours of gameplay content . ENTITY201 shaped gaming culture. Its mechanics allow many "
        "playstyles .",
        "Performance improved after updates .",
    )
    assert s.gold["turns"] == [
        {"Content Variety": ["Hours of gameplay content"]},
        {"Content Variety": ["Hours of gameplay content"], "Gameplay": ["Multiple playstyles"]},
    ]
    assert (
        s.metadata["distractor_sentence_ids"] == ["P1"]
        and s.metadata["paragraph_writing_styles"][0] == "user reviews by senior"
    )
    array = tmp_path / "sample.json"  # the README shows the records as one JSON array
    array.write_text(json.dumps([record, dict(record, entity_name="ENTITY1")], indent=2))
    assert [x.gold["entity_name"] for x in load_sumie(array)] == ["ENTITY0", "ENTITY1"]
    with pytest.raises(
        InconsistentGoldError, match="Multiple playstyles"
    ):  # paraphrased: verification suits generated data
        load_sumie(p, verify_gold=True)


def test_conflicting_updates_replace_values_in_later_turns():
    records = list(generate_sumie(60, seed=11, conflicts=1.0))
    assert records[:3] != list(generate_sumie(3, seed=11))  # updates change the data only when asked for
    changed = 0
    for r in records:
        verify_sumie_record(r)
        turns = []
        for para in r["paragraph_summaries"]:
            turn: dict = {}
            for item in para["summary"]:
                turn.setdefault(item["attribute"], []).append(item["value"])
            turns.append(turn)
        for k, (before, after) in enumerate(zip(turns, turns[1:]), 1):
            for attribute, values in before.items():
                if attribute in after and after[attribute] != values and not set(values) <= set(after[attribute]):
                    assert len(after[attribute]) == 1  # a single-valued attribute now holds the new value only
                    sentences = {i: t for p in r["paragraph_summaries"] for i, t in p["paragraph"]}
                    item = next(x for x in r["paragraph_summaries"][k]["summary"] if x["attribute"] == attribute)
                    assert "is now" in sentences[item["sentence_ids"][0]]
                    changed += 1
    assert changed >= 30
    with pytest.raises(DatasetError, match="probability"):
        next(generate_sumie(1, conflicts=2))


def test_each_sample_says_whether_the_release_file_or_the_generator_ran(tmp_path) -> None:
    """Issue 30 point 3: a SUMIE sample records which data ran, so a table from the generator is never
    read as the official release's."""
    from memloop.eval.datasets.sumie import write_sumie_jsonl
    from memloop.eval.datasets.sumie.loader import load_sumie_dataset

    generated = load_sumie_dataset(synthetic=True, entities=2, seed=3)
    assert all("memloop's SUMIE generator (seed 3, 2 entities)" in s.metadata["source"] for s in generated)
    path = write_sumie_jsonl(tmp_path / "dataset_sumie.jsonl", entities=2, seed=3)
    from_file = load_sumie_dataset(path)
    assert all(s.metadata["source"] == f"SUMIE file {path}" for s in from_file)
    assert [s.id for s in from_file] == [s.id for s in generated]  # same data, same unit ids


def test_rich_entities_carry_memories_as_large_as_sumies_so_that_k_binds() -> None:
    """Issue 46 point 4: the generator's entities carried ~14 one-word facts (~80 compact cl100k tokens at
    the last turn) against K = 200 / 300, so figure 3's limited memory might never occur. `detail: rich`
    (the seed 000 configs) states clause-valued facts, ~29 an entity, with the same gold guarantees."""
    import statistics

    from memloop.eval.datasets.sumie import load_sumie_dataset
    from memloop.eval.tokens import cl100k_count

    def last_memory_tokens(records) -> list[int]:
        out = []
        for r in records:
            memory: dict[str, list[str]] = {}
            for item in r["paragraph_summaries"][-1]["summary"]:
                memory.setdefault(item["attribute"], []).append(item["value"])
            out.append(cl100k_count(json.dumps(memory, separators=(",", ":"), ensure_ascii=False)))
        return out

    rich = list(generate_sumie(25, seed=0, detail="rich", conflicts=0.3))
    for r in rich:
        verify_sumie_record(r)  # every value verbatim in the sentences it cites, summaries aggregate
    sizes = last_memory_tokens(rich)
    assert statistics.mean(sizes) > 200 and sum(s > 200 for s in sizes) > len(sizes) / 2
    assert statistics.mean(last_memory_tokens(generate_sumie(25, seed=0))) < 100  # compact: the old default
    assert list(generate_sumie(3, seed=0, detail="rich")) == list(generate_sumie(3, seed=0, detail="rich"))
    samples = load_sumie_dataset(synthetic=True, entities=2, detail="rich")
    assert "rich detail" in samples[0].metadata["source"]
    with pytest.raises(DatasetError, match="unknown SUMIE detail 'huge'"):
        list(generate_sumie(1, detail="huge"))
