"""Book loading: Gutenberg cleaning, paragraphs kept, chunking, malformed files."""
from __future__ import annotations

import json

import pytest

from eval.datasets import load_dataset
from eval.datasets.books import clean_book, load_book, load_books
from eval.datasets.errors import BinaryFileError, DatasetNotFoundError, EmptyDatasetError, MissingFieldError, UnknownFormatError

GUTENBERG = (
    "\ufeffThe Project Gutenberg EBook of A Test, by Someone\r\n\r\nLicence words here.\r\n\r\n"
    "*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***\r\n\r\nProduced by Volunteers\r\n\r\n\r\n"
    "CHAPTER I\r\n\r\nIt was a dark and stormy\r\nnight; the rain fell in torrents.\r\n\r\n"
    "\u201cWho is there?\u201d she asked.\r\n\r\nEnd of the Project Gutenberg EBook of A Test\r\n\r\n"
    "*** END OF THIS PROJECT GUTENBERG EBOOK A TEST ***\r\n\r\nMore licence text.\r\n"
)


def test_gutenberg_header_footer_bom_crlf_and_paragraphs():
    assert clean_book(GUTENBERG) == ("CHAPTER I\nIt was a dark and stormy night; the rain fell in torrents.\n"
                                     "\u201cWho is there?\u201d she asked.")
    assert clean_book(GUTENBERG, unwrap=False).split("\n")[1:3] == ["It was a dark and stormy", "night; the rain fell in torrents."]
    old_style = ("Project Gutenberg Etext of X\n\nsmall print licence\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\n"
                 "The book itself.\n\nEnd of the Project Gutenberg Etext of X\n")
    assert clean_book(old_style) == "The book itself."


def test_shared_books_load_clean_and_chunk(shared_data):
    samples = load_books(shared_data / "books", chunk_tokens=2048)
    assert [s.metadata["title"] for s in samples] == ["katrine", "news-from-nowhere", "pioneer-days-in-st-paul", "pride-and-prejudice"]
    for s in samples:
        text = "\n".join(s.chunks)
        assert "Project Gutenberg" not in text and "\r" not in text and "\ufeff" not in text
        assert s.task == "book" and s.gold is None and len(s.chunks) > 20
    pride = samples[-1]
    assert pride.chunks[0].startswith("PRIDE AND PREJUDICE")
    assert "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife." in pride.chunks[0]
    assert pride.chunks[-1].endswith("had been the means of uniting them.")
    pioneer = samples[2]
    assert pioneer.chunks[0].startswith("REMINISCENCES OF PIONEER DAYS IN ST. PAUL") and not pioneer.chunks[-1].endswith("***")
    # ids are stable across runs and the registry gives the same samples
    again = load_dataset("book", source=str(shared_data / "books" / "katrine.txt"), chunk_tokens=2048)
    assert again[0].id == samples[0].id and again[0].chunks == samples[0].chunks


def test_collections_and_errors(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"Tiny": "One line.\n\nTwo lines."}))
    [s] = load_books(tmp_path / "c.json", chunk_tokens=64)
    assert s.chunks == ("One line.\nTwo lines.",)
    (tmp_path / "c.jsonl").write_text(json.dumps({"title": "T", "text": "x."}) + "\n" + json.dumps({"text": "y"}) + "\n")
    with pytest.raises(MissingFieldError, match=r"c.jsonl:2"):
        load_books(tmp_path / "c.jsonl")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(EmptyDatasetError):
        load_book(tmp_path / "empty.txt")
    (tmp_path / "bin.txt").write_bytes(b"\x89PNG\x00\x00\x01binary")
    with pytest.raises(BinaryFileError):
        load_book(tmp_path / "bin.txt")
    (tmp_path / "book.pdf").write_bytes(b"%PDF-1.4")
    with pytest.raises(UnknownFormatError):
        load_books(tmp_path / "book.pdf")
    with pytest.raises(DatasetNotFoundError):
        load_books(tmp_path / "missing.txt")
    (tmp_path / "only-licence.txt").write_text("*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\n")
    with pytest.raises(EmptyDatasetError, match="no text after cleaning"):
        load_book(tmp_path / "only-licence.txt")


def test_chunk_chapters_follow_headings(shared_data):
    from eval.datasets.books import chunk_chapters

    assert chunk_chapters(["Preface text", "Chapter 1\nIt begins.", "more of it\nCHAPTER II\nnext", "tail"]) == [1, 1, 1, 2]
    s = load_book(shared_data / "books" / "pride-and-prejudice.txt", chapters=True)
    chapters = s.metadata["chunk_chapters"]
    assert len(chapters) == len(s.chunks) and chapters[0] == 1 and chapters[-1] == 61
    assert all(a <= b for a, b in zip(chapters, chapters[1:]))
    assert "chunk_chapters" not in load_book(shared_data / "books" / "katrine.txt").metadata


def test_legacy_encodings(tmp_path):
    from eval.datasets.textfile import read_text

    (tmp_path / "cp1252.txt").write_bytes("\u201cQuoted\u201d caf\u00e9 \u2014 dash.\r\n".encode("cp1252"))
    assert read_text(tmp_path / "cp1252.txt") == "\u201cQuoted\u201d caf\u00e9 \u2014 dash.\n"
    (tmp_path / "latin1.txt").write_bytes("Gar\u00e7on \x81\n".encode("latin-1"))
    assert read_text(tmp_path / "latin1.txt") == "Gar\u00e7on \x81\n"
    (tmp_path / "utf16.txt").write_bytes("Hello, world.\r\nSecond line.".encode("utf-16"))
    assert read_text(tmp_path / "utf16.txt") == "Hello, world.\nSecond line."
