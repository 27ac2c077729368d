"""BookSum chapters for seed 001: books rebuilt from BookSum's own chapter rows, one target chapter per
sample with chapters <= k as its chunks and that chapter's reference as gold, drawn at random with a
recorded seed after the paper's filters. The file is written here in BookSum's chapter-level format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memloop.eval.datasets import load_dataset, truncate
from memloop.eval.datasets.booksum import load_booksum
from memloop.eval.datasets.errors import MissingFieldError

SUMMARY = "In this chapter {who} walks to the harbour at dawn and speaks with the keeper about the storm and the lamp."


def _row(bid: int, title: str, path: str, text: str, summary: str, source: str, aggregate: bool = False) -> dict:
    """One row with the columns of BookSum's chapter-level data as kmfoda/booksum gives them."""
    name = Path(path).stem.replace("_", " ")
    return {
        "bid": bid,
        "is_aggregate": aggregate,
        "source": source,
        "chapter_path": path,
        "summary_path": f"finished_summaries/{source}/{title}/{name}.txt",
        "book_id": f"{title}.{name}",
        "summary_id": name,
        "content": None,
        "summary": json.dumps({"summary": summary}),
        "chapter": text,
        "chapter_length": len(text.split()),
        "summary_name": name,
        "summary_url": "https://example.org/x",
        "summary_text": summary,
        "summary_analysis": None,
        "summary_length": len(summary.split()),
        "analysis_length": 0,
    }


def _chapter(n: int, who: str) -> str:
    return f"Chapter {n}\n{who} rose early.\n" + " ".join(f"{who} saw the lamp number {i}." for i in range(30))


def booksum_file(tmp_path: Path) -> Path:
    """Two books (one a paper-excluded id), rows out of order, two study guides for one chapter, an aggregate
    overlapping chapters given one by one, a too-short summary and a chapter too long for the limit."""
    lamp = "all_chapterized_books/900-chapters"
    rows = [
        _row(900, "The Lamp", f"{lamp}/3.txt", _chapter(3, "Ada"), SUMMARY.format(who="Ada (3)"), "cliffnotes"),
        _row(900, "The Lamp", f"{lamp}/1.txt", _chapter(1, "Bo"), SUMMARY.format(who="Bo (1)"), "cliffnotes"),
        _row(900, "The Lamp", f"{lamp}/2.txt", _chapter(2, "Cy"), SUMMARY.format(who="Cy (2)"), "sparknotes"),
        _row(
            900, "The Lamp", f"{lamp}/2.txt", _chapter(2, "Cy"), SUMMARY.format(who="Cy (2, gradesaver)"), "gradesaver"
        ),
        _row(
            900,
            "The Lamp",
            f"{lamp}/chapters_1_to_2.txt",
            _chapter(1, "Bo") + "\n" + _chapter(2, "Cy"),
            SUMMARY.format(who="Bo and Cy"),
            "novelguide",
            aggregate=True,
        ),
        _row(900, "The Lamp", f"{lamp}/4.txt", _chapter(4, "Di"), "Too short.", "cliffnotes"),
        _row(900, "The Lamp", f"{lamp}/5.txt", _chapter(5, "Ed") * 80, SUMMARY.format(who="Ed (5)"), "cliffnotes"),
        _row(
            1232,
            "Excluded",
            "all_chapterized_books/1232-chapters/1.txt",
            _chapter(1, "Fay"),
            SUMMARY.format(who="Fay"),
            "cliffnotes",
        ),
    ]
    path = tmp_path / "booksum-test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_book_is_rebuilt_from_its_chapters_and_chapter_k_is_the_target(tmp_path):
    samples = load_booksum(booksum_file(tmp_path), samples=None, max_chapter_tokens=2000)
    by_id = {s.id: s for s in samples}
    # eligible: ch1, ch2 (two guides), ch3, the aggregate of 1-2; not the short summary, the long chapter, book 1232
    assert sorted(by_id) == [
        "booksum/900-ch1-2-novelguide",
        "booksum/900-ch1-cliffnotes",
        "booksum/900-ch2-gradesaver",
        "booksum/900-ch2-sparknotes",
        "booksum/900-ch3-cliffnotes",
    ]
    s = by_id["booksum/900-ch3-cliffnotes"]
    assert s.task == "booksum" and s.metadata["target_chapter"] == 3
    assert s.gold == {"reference": SUMMARY.format(who="Ada (3)")}
    # the whole book, in order (the graph is built from all of it; retrieval keeps edges from chapters <= k)
    assert [c.split("\n")[0] for c in s.chunks][:5] == ["Chapter 1", "Chapter 2", "Chapter 3", "Chapter 4", "Chapter 5"]
    assert sorted(set(s.metadata["chunk_chapters"])) == [1, 2, 3, 4, 5] and s.metadata["title"] == "The Lamp"
    agg = by_id["booksum/900-ch1-2-novelguide"]  # the aggregate is one chapter of its sample, its own text
    assert agg.metadata["target_chapter"] == 1 and agg.metadata["chapters"] == 4
    assert agg.chunks[0].startswith("Chapter 1") and "Chapter 2" in agg.chunks[0]
    assert by_id["booksum/900-ch2-gradesaver"].gold["reference"].startswith("In this chapter Cy (2, gradesaver)")
    small = load_booksum(booksum_file(tmp_path), samples=None, max_chapter_tokens=2000, chunk_tokens=64)
    s3 = {x.id: x for x in small}["booksum/900-ch3-cliffnotes"]
    assert len(s3.chunks) > 5 and sorted(set(s3.metadata["chunk_chapters"])) == [1, 2, 3, 4, 5]


def test_chapters_are_drawn_at_random_with_a_recorded_seed(tmp_path):
    path = booksum_file(tmp_path)
    ids = {seed: [s.id for s in load_booksum(path, samples=2, seed=seed, max_chapter_tokens=2000)] for seed in range(6)}
    assert len({tuple(v) for v in ids.values()}) > 1  # the draw depends on the seed ...
    assert ids[3] == [
        s.id for s in load_booksum(path, samples=2, seed=3, max_chapter_tokens=2000)
    ]  # ... and only on it
    [s] = load_booksum(path, samples=1, seed=3, max_chapter_tokens=2000)
    assert s.metadata["draw_seed"] == 3 and s.metadata["eligible"] == 5


def test_the_paper_limits_on_chapter_and_summary_length(tmp_path):
    path = booksum_file(tmp_path)
    ids = {s.id for s in load_booksum(path, samples=None, max_chapter_tokens=10**6, exclude_paper_books=False)}
    assert "booksum/900-ch5-cliffnotes" in ids and "booksum/1232-ch1-cliffnotes" in ids
    assert "booksum/900-ch5-cliffnotes" not in {s.id for s in load_booksum(path, samples=None)}  # 16,384 by default
    assert all(s.id != "booksum/900-ch4-cliffnotes" for s in load_booksum(path, samples=None))  # "Too short."


def test_a_reduced_run_keeps_the_target_chapter(tmp_path):
    [s] = [
        x
        for x in load_dataset(
            "booksum", path=str(booksum_file(tmp_path)), samples=None, max_chapter_tokens=2000, chunk_tokens=64
        )
        if x.id == "booksum/900-ch3-cliffnotes"
    ]
    cut = truncate(s, 2)
    assert len(cut.chunks) == 2 and 3 in cut.metadata["chunk_chapters"] and cut.gold == s.gold


def test_rows_that_are_not_booksum_chapters_are_named(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"bid": 1, "chapter_path": "a/1.txt", "summary_text": "x"}) + "\n")
    with pytest.raises(MissingFieldError, match="'chapter'"):
        load_booksum(p)
    p.write_text(json.dumps({"bid": 1, "chapter_path": "a/intro.txt", "chapter": "Text.", "summary_text": "x"}) + "\n")
    with pytest.raises(MissingFieldError, match="which chapter"):
        load_booksum(p)


def _book(tmp_path: Path, units: list[tuple[str, str]], name: str = "book.jsonl") -> Path:
    """One book in BookSum's format: (chapter file, text) units, each with its own reference."""
    rows = [
        _row(77, "Units", f"all_chapterized_books/77-chapters/{unit}.txt", text, SUMMARY.format(who=unit), "guide")
        for unit, text in units
    ]
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_chapter_given_only_inside_an_aggregate_is_rebuilt_and_every_unit_is_a_target(tmp_path):
    """Units 01, chapters_1_to_3, 03: the book is chapters 1, 2, 3 in order (chapter 2 cut out of the
    aggregate), and all three rows are targets."""
    one, two, three = _chapter(1, "Bo"), _chapter(2, "Cy"), _chapter(3, "Ada")
    path = _book(tmp_path, [("01", one), ("chapters_1_to_3", one + "\n\n" + two + "\n\n" + three), ("03", three)])
    samples = {
        s.metadata["target_unit"].rsplit("/", 1)[-1]: s for s in load_booksum(path, samples=None, chunk_tokens=4096)
    }
    assert sorted(samples) == ["01.txt", "03.txt", "chapters_1_to_3.txt"]
    book = samples["03.txt"]
    assert book.chunks == (one, two, three) and book.metadata["target_chapter"] == 3
    assert samples["01.txt"].chunks == (one, two, three) and samples["01.txt"].metadata["target_chapter"] == 1
    agg = samples["chapters_1_to_3.txt"]
    assert agg.metadata["target_chapter"] == 1 and agg.metadata["chunk_chapters"] == [1]
    assert agg.chunks[0].split() == (one + "\n" + two + "\n" + three).split()
    assert agg.gold == {"reference": SUMMARY.format(who="chapters_1_to_3")}


def test_a_plays_acts_and_scenes_keep_every_scene_in_order(tmp_path):
    """Act-and-scene units: scenes 1-3 of act 1 one by one, act 2 as a whole, act 3 scene 1 and an aggregate of
    act 3's scenes 1 to 2 whose scene 2 is only there."""
    texts = {
        u: f"{u.upper()}\nThe players speak of the lamp in {u}."
        for u in ("act_1_scene_1", "act_1_scene_2", "act_1_scene_3", "act_2", "act_3_scene_1", "a3s2")
    }
    path = _book(
        tmp_path,
        [
            ("act_1_scene_2", texts["act_1_scene_2"]),
            ("act_1_scene_1", texts["act_1_scene_1"]),
            ("act_1_scene_3", texts["act_1_scene_3"]),
            ("act_2", texts["act_2"]),
            ("act_3_scene_1", texts["act_3_scene_1"]),
            ("act_3_scenes_1_to_2", texts["act_3_scene_1"] + "\n\n" + texts["a3s2"]),
        ],
    )
    samples = load_booksum(path, samples=None, min_summary_words=1)
    last = next(s for s in samples if s.metadata["target_unit"].endswith("act_3_scene_1.txt"))
    assert last.chunks == tuple(texts.values()) and last.metadata["target_chapter"] == 5
    assert len(samples) == 6


def test_eligible_chapters_are_counted_in_one_fixed_tokenizer_whatever_the_model(tmp_path):
    """Appendix B's length filters use cl100k_base for every model: the model's own tokenizer (here one
    counting characters, as a byte-level one nearly does) sizes the chunks but never changes the draw."""
    path = booksum_file(tmp_path)
    by_chars = lambda text: len(text)  # noqa: E731 - a tokenizer as a callable returning a count
    fixed = [
        s.id for s in load_booksum(path, samples=None, max_chapter_tokens=600)
    ]  # chapters: ~250 tokens, ~800 chars
    with_model = load_booksum(path, samples=None, max_chapter_tokens=600, tokenizer=by_chars, chunk_tokens=10**6)
    assert [s.id for s in with_model] == fixed
    assert len(fixed) == 5
    assert all(s.metadata["eligibility_tokenizer"] == "cl100k_base" for s in with_model)


def test_partly_overlapping_aggregates_rebuild_losslessly_and_each_keeps_its_other_chapters(tmp_path):
    """chapters_1_to_2 and chapters_2_to_3 (two guides cutting the book differently): chapter 2, in both, is
    shared; chapter 3 is kept, and each aggregate's sample has the book's other chapters around its own text."""
    one, two, three = _chapter(1, "Bo"), _chapter(2, "Cy"), _chapter(3, "Ada")
    path = _book(tmp_path, [("chapters_1_to_2", one + "\n\n" + two), ("chapters_2_to_3", two + "\n" + three)])
    samples = {
        s.metadata["target_unit"].rsplit("/", 1)[-1]: s for s in load_booksum(path, samples=None, chunk_tokens=4096)
    }
    first, second = samples["chapters_1_to_2.txt"], samples["chapters_2_to_3.txt"]
    # the book is chapters 1, 2, 3: the first aggregate's sample has chapter 3 after its own text
    assert first.chunks == (one + "\n" + two, three) and first.metadata["target_chapter"] == 1  # blank lines dropped
    assert first.metadata["chapters"] == 2 and first.metadata["chunk_chapters"] == [1, 2]
    # the second's has chapter 1 before its own text, not its text alone
    assert second.chunks == (one, two + "\n" + three) and second.metadata["target_chapter"] == 2
    for s in (first, second):
        book = " ".join(s.chunks)
        assert all(text.split()[-1] in book and text.split("\n")[1] in book for text in (one, two, three))
    # a run of three (1-3, 2-4, 3-5): every chapter once, each aggregate the parts it spans
    ch = {n: _chapter(n, who) for n, who in zip(range(1, 6), ("Bo", "Cy", "Ada", "Di", "Ed"))}
    path = _book(
        tmp_path,
        [(f"chapters_{a}_to_{a + 2}", "\n".join(ch[n] for n in range(a, a + 3))) for a in (1, 2, 3)],
        name="three.jsonl",
    )
    by_unit = {
        s.metadata["target_unit"].rsplit("/", 1)[-1]: s for s in load_booksum(path, samples=None, chunk_tokens=4096)
    }
    middle = by_unit["chapters_2_to_4.txt"]
    assert middle.chunks == (ch[1], "\n".join(ch[n] for n in (2, 3, 4)), ch[5])
    assert by_unit["chapters_1_to_3.txt"].chunks[1:] == (ch[4], ch[5])
    assert by_unit["chapters_3_to_5.txt"].chunks[:2] == (ch[1], ch[2])


def _char_tokenizer(folder: Path) -> Path:
    """A Hugging Face tokenizer folder that counts one token per character (written here, nothing downloaded)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(str(folder))
    return folder


def test_the_eligibility_tokenizer_is_a_stated_choice_and_a_local_tokenizer_can_replace_it(tmp_path):
    """The paper's limits are its LongT5 model's (T5 SentencePiece tokens); memloop counts in cl100k_base
    unless `eligibility_tokenizer` names a local tokenizer folder (e.g. a copy of t5-base's), which then
    decides the draw and is recorded. An unloadable one is a named error saying what to give."""
    from memloop.eval.datasets.booksum import EligibilityTokenizerError

    path = booksum_file(tmp_path)
    # a chapter: ~250 cl100k tokens, ~800 characters; the aggregate of chapters 1-2 twice that
    by_cl100k = load_booksum(path, samples=None, max_chapter_tokens=1000)
    assert len(by_cl100k) == 5 and {s.metadata["eligibility_tokenizer"] for s in by_cl100k} == {"cl100k_base"}
    folder = str(_char_tokenizer(tmp_path / "chars"))
    by_chars = load_booksum(path, samples=None, max_chapter_tokens=1000, eligibility_tokenizer=folder)
    # one token a character: the aggregate (~1,600) is over the limit, the single chapters are not
    assert sorted(s.id for s in by_chars) == sorted(s.id for s in by_cl100k if s.id != "booksum/900-ch1-2-novelguide")
    assert {s.metadata["eligibility_tokenizer"] for s in by_chars} == {folder}
    assert len(load_booksum(path, samples=None, max_chapter_tokens=5000, eligibility_tokenizer=folder)) == 5
    with pytest.raises(EligibilityTokenizerError, match="t5-base.*nothing is downloaded"):
        load_booksum(path, samples=None, eligibility_tokenizer="t5-base")
