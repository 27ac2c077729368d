"""BookSum chapters for seed 001: books rebuilt from BookSum's own chapter rows, one target chapter per
sample with chapters <= k as its chunks and that chapter's reference as gold, drawn at random with a
recorded seed after the paper's filters. The file is written here in BookSum's chapter-level format."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.datasets import load_dataset, truncate
from eval.datasets.booksum import load_booksum
from eval.datasets.errors import MissingFieldError

SUMMARY = "In this chapter {who} walks to the harbour at dawn and speaks with the keeper about the storm and the lamp."


def _row(bid: int, title: str, path: str, text: str, summary: str, source: str, aggregate: bool = False) -> dict:
    """One row with the columns of BookSum's chapter-level data as kmfoda/booksum gives them."""
    name = Path(path).stem.replace("_", " ")
    return {"bid": bid, "is_aggregate": aggregate, "source": source, "chapter_path": path,
            "summary_path": f"finished_summaries/{source}/{title}/{name}.txt", "book_id": f"{title}.{name}",
            "summary_id": name, "content": None, "summary": json.dumps({"summary": summary}), "chapter": text,
            "chapter_length": len(text.split()), "summary_name": name, "summary_url": "https://example.org/x",
            "summary_text": summary, "summary_analysis": None, "summary_length": len(summary.split()),
            "analysis_length": 0}


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
        _row(900, "The Lamp", f"{lamp}/2.txt", _chapter(2, "Cy"), SUMMARY.format(who="Cy (2, gradesaver)"), "gradesaver"),
        _row(900, "The Lamp", f"{lamp}/chapters_1_to_2.txt", _chapter(1, "Bo") + "\n" + _chapter(2, "Cy"),
             SUMMARY.format(who="Bo and Cy"), "novelguide", aggregate=True),
        _row(900, "The Lamp", f"{lamp}/4.txt", _chapter(4, "Di"), "Too short.", "cliffnotes"),
        _row(900, "The Lamp", f"{lamp}/5.txt", _chapter(5, "Ed") * 80, SUMMARY.format(who="Ed (5)"), "cliffnotes"),
        _row(1232, "Excluded", "all_chapterized_books/1232-chapters/1.txt", _chapter(1, "Fay"), SUMMARY.format(who="Fay"),
             "cliffnotes"),
    ]
    path = tmp_path / "booksum-test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_book_is_rebuilt_from_its_chapters_and_chapter_k_is_the_target(tmp_path):
    samples = load_booksum(booksum_file(tmp_path), samples=None, max_chapter_tokens=2000)
    by_id = {s.id: s for s in samples}
    # eligible: ch1, ch2 (two guides), ch3; not the aggregate, the short summary, the long chapter, book 1232
    assert sorted(by_id) == ["booksum/900-ch1-cliffnotes", "booksum/900-ch2-gradesaver", "booksum/900-ch2-sparknotes",
                             "booksum/900-ch3-cliffnotes"]
    s = by_id["booksum/900-ch3-cliffnotes"]
    assert s.task == "booksum" and s.metadata["target_chapter"] == 3
    assert s.gold == {"reference": SUMMARY.format(who="Ada (3)")}
    assert [c.split("\n")[0] for c in s.chunks] == ["Chapter 1", "Chapter 2", "Chapter 3"]  # chapters <= k, in order
    assert s.metadata["chunk_chapters"] == [1, 2, 3] and s.metadata["title"] == "The Lamp"
    assert "Chapter 4" not in "".join(s.chunks)  # nothing after the target chapter
    assert by_id["booksum/900-ch2-gradesaver"].gold["reference"].startswith("In this chapter Cy (2, gradesaver)")
    small = load_booksum(booksum_file(tmp_path), samples=None, max_chapter_tokens=2000, chunk_tokens=64)
    s3 = {x.id: x for x in small}["booksum/900-ch3-cliffnotes"]
    assert len(s3.chunks) > 3 and sorted(set(s3.metadata["chunk_chapters"])) == [1, 2, 3]


def test_chapters_are_drawn_at_random_with_a_recorded_seed(tmp_path):
    path = booksum_file(tmp_path)
    ids = {seed: [s.id for s in load_booksum(path, samples=2, seed=seed, max_chapter_tokens=2000)] for seed in range(6)}
    assert len({tuple(v) for v in ids.values()}) > 1  # the draw depends on the seed ...
    assert ids[3] == [s.id for s in load_booksum(path, samples=2, seed=3, max_chapter_tokens=2000)]  # ... and only on it
    [s] = load_booksum(path, samples=1, seed=3, max_chapter_tokens=2000)
    assert s.metadata["draw_seed"] == 3 and s.metadata["eligible"] == 4


def test_the_paper_limits_on_chapter_and_summary_length(tmp_path):
    path = booksum_file(tmp_path)
    ids = {s.id for s in load_booksum(path, samples=None, max_chapter_tokens=10**6, exclude_paper_books=False)}
    assert "booksum/900-ch5-cliffnotes" in ids and "booksum/1232-ch1-cliffnotes" in ids
    assert "booksum/900-ch5-cliffnotes" not in {s.id for s in load_booksum(path, samples=None)}  # 16,384 by default
    assert all(s.id != "booksum/900-ch4-cliffnotes" for s in load_booksum(path, samples=None))  # "Too short."


def test_a_reduced_run_keeps_the_target_chapter(tmp_path):
    [s] = [x for x in load_dataset("booksum", path=str(booksum_file(tmp_path)), samples=None, max_chapter_tokens=2000,
                                   chunk_tokens=64) if x.id == "booksum/900-ch3-cliffnotes"]
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
