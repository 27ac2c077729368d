"""The loader registry, and chunker properties on generated texts (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memloop.eval.datasets import chunk_paragraphs, get_loader, load_dataset, register_loader, tasks, token_counter
from memloop.eval.datasets.errors import DatasetError, UnknownTaskError
from memloop.eval.datasets.sample import Sample

from tests.datasets.booookscore_reference import reference_chunks

COUNT = token_counter()

words = st.sampled_from(
    ["the", "cat", "sat", "on", "mat", "Mr.", "quietly", "however", "naïve", "über", "🙂", "12", "x"]
)
marks = st.sampled_from(["", "", "", ".", ",", "!", "?", '."', "'", ";", "...", ',"'])
paragraph = st.lists(st.tuples(words, marks), min_size=1, max_size=60).map(lambda ws: " ".join(w + m for w, m in ws))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(paragraph, min_size=1, max_size=12), st.integers(min_value=8, max_value=60))
def test_chunks_lose_nothing_respect_the_limit_and_match_the_official_algorithm(paragraphs, limit):
    chunks = chunk_paragraphs(paragraphs, limit)
    assert "".join(chunks).replace("\n", "") == "".join(paragraphs)
    assert all(COUNT(c) <= limit for c in chunks)
    try:
        expected = reference_chunks(paragraphs, limit, COUNT)
    except AssertionError:  # no cut points left: the official code would drop text, ours hard-cuts
        return
    assert chunks == expected


def test_registry_names_and_errors():
    assert tasks() == ["arxiv", "book", "booksum", "memoryagentbench", "repoqa", "spider", "sumie"]
    assert get_loader("books") is get_loader("book") and get_loader("loft-spider") is get_loader("spider")
    with pytest.raises(
        UnknownTaskError, match="choose one of arxiv, book, booksum, memoryagentbench, repoqa, spider, sumie"
    ):
        load_dataset("squad")
    with pytest.raises(DatasetError, match="does not take option"):
        load_dataset("spider", chunk_size=100)
    with pytest.raises(DatasetError, match="needs `path`"):
        load_dataset("sumie")


def test_register_a_custom_loader(monkeypatch):
    from memloop.eval.datasets import registry

    monkeypatch.setattr(
        registry.LOADERS, "_entries", dict(registry.LOADERS._entries)
    )  # leave the real registry untouched
    register_loader("toy-task", lambda n=2: [Sample(id=f"toy/{i}", task="toy-task", chunks=("a",)) for i in range(n)])
    assert [s.id for s in load_dataset("toy-task", n=3)] == ["toy/0", "toy/1", "toy/2"]
    with pytest.raises(DatasetError, match="produced no samples"):
        load_dataset("toy-task", n=0)


def test_truncate_cuts_chunks_and_the_gold_the_task_defines():
    from memloop.eval.datasets import truncate

    [s] = load_dataset("sumie", synthetic=True, entities=1, seed=1)
    assert len(s.chunks) == len(s.gold["turns"]) == len(s.gold["facts"]) == 7
    t = truncate(s, 3)
    assert (
        t.chunks == s.chunks[:3] and t.gold["turns"] == s.gold["turns"][:3] and t.gold["facts"] == s.gold["facts"][:3]
    )
    assert t.gold["entity_name"] == s.gold["entity_name"] and len(s.gold["turns"]) == 7  # the input is not changed
    assert t.metadata == dict(s.metadata, max_chunks=3, total_chunks=7)
    assert truncate(s, 7) is s and truncate(s, 50) is s
    # default (a task without `truncate_gold`, or no registered loader): chunks only
    book = Sample(id="b", task="book", chunks=("a", "b", "c"), gold={"turns": [1, 2, 3]})
    assert truncate(book, 2).gold == {"turns": [1, 2, 3]} and truncate(book, 2).chunks == ("a", "b")
    toy = Sample(id="t", task="toy-task", chunks=("a", "b"), gold="g")
    assert truncate(toy, 1).gold == "g" and truncate(toy, 1).metadata == {"max_chunks": 1, "total_chunks": 2}
    with pytest.raises(DatasetError, match="max_chunks must be a positive integer"):
        truncate(s, 0)
