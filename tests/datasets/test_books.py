"""Book loading: Gutenberg cleaning, paragraphs kept, chunking, malformed files."""

from __future__ import annotations

import json

import pytest
from memloop.eval.datasets import load_dataset
from memloop.eval.datasets.books import clean_book, load_book, load_books
from memloop.eval.datasets.errors import (
    BinaryFileError,
    DatasetNotFoundError,
    EmptyDatasetError,
    MissingFieldError,
    UnknownFormatError,
)

GUTENBERG = (
    "\ufeffThe Project Gutenberg EBook of A Test, by Someone\r\n\r\nLicence words here.\r\n\r\n"
    "*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***\r\n\r\nProduced by Volunteers\r\n\r\n\r\n"
    "CHAPTER I\r\n\r\nIt was a dark and stormy\r\nnight; the rain fell in torrents.\r\n\r\n"
    "\u201cWho is there?\u201d she asked.\r\n\r\nEnd of the Project Gutenberg EBook of A Test\r\n\r\n"
    "*** END OF THIS PROJECT GUTENBERG EBOOK A TEST ***\r\n\r\nMore licence text.\r\n"
)


def test_gutenberg_header_footer_bom_crlf_and_paragraphs():
    assert clean_book(GUTENBERG) == (
        "CHAPTER I\nIt was a dark and stormy night; the rain fell in torrents.\n\u201cWho is there?\u201d she asked."
    )
    assert clean_book(GUTENBERG, unwrap=False).split("\n")[1:3] == [
        "It was a dark and stormy",
        "night; the rain fell in torrents.",
    ]
    old_style = (
        "Project Gutenberg Etext of X\n\nsmall print licence\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN "
        "ETEXTS*Ver.04.29.93*END*\n\n"
        "The book itself.\n\nEnd of the Project Gutenberg Etext of X\n"
    )
    assert clean_book(old_style) == "The book itself."


def test_shared_books_load_clean_and_chunk(shared_data):
    samples = load_books(shared_data / "books", chunk_tokens=2048)
    assert [s.metadata["title"] for s in samples] == [
        "katrine",
        "news-from-nowhere",
        "pioneer-days-in-st-paul",
        "pride-and-prejudice",
    ]
    for s in samples:
        text = "\n".join(s.chunks)
        assert "Project Gutenberg" not in text and "\r" not in text and "\ufeff" not in text
        assert s.task == "book" and s.gold is None and len(s.chunks) > 20
    pride = samples[-1]
    assert pride.chunks[0].startswith("PRIDE AND PREJUDICE")
    assert (
        "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
        "of a wife." in pride.chunks[0]
    )
    assert pride.chunks[-1].endswith("had been the means of uniting them.")
    pioneer = samples[2]
    assert pioneer.chunks[0].startswith("REMINISCENCES OF PIONEER DAYS IN ST. PAUL") and not pioneer.chunks[
        -1
    ].endswith("***")
    # ids are stable across runs and the registry gives the same samples
    again = load_dataset("book", source=str(shared_data / "books" / "katrine.txt"), chunk_tokens=2048)
    assert again[0].id == samples[0].id and again[0].chunks == samples[0].chunks


def test_collections_and_errors(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"Tiny": "One line.\n\nTwo lines."}))
    [s] = load_books(tmp_path / "c.json", chunk_tokens=64)
    assert s.chunks == ("One line.\nTwo lines.",)
    (tmp_path / "c.jsonl").write_text(
        json.dumps({"title": "T", "text": "x."}) + "\n" + json.dumps({"text": "y"}) + "\n"
    )
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
    (tmp_path / "only-licence.txt").write_text(
        "*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\n"
    )
    with pytest.raises(EmptyDatasetError, match="no text after cleaning"):
        load_book(tmp_path / "only-licence.txt")


def test_chunk_chapters_follow_headings(shared_data):
    from memloop.eval.datasets.books import chunk_chapters

    assert chunk_chapters(["Preface text", "Chapter 1\nIt begins.", "more of it\nCHAPTER II\nnext", "tail"]) == [
        1,
        1,
        1,
        2,
    ]
    s = load_book(shared_data / "books" / "pride-and-prejudice.txt", chapters=True)
    chapters = s.metadata["chunk_chapters"]
    assert len(chapters) == len(s.chunks) and chapters[0] == 1 and chapters[-1] == 61
    assert all(a <= b for a, b in zip(chapters, chapters[1:]))
    assert "chunk_chapters" not in load_book(shared_data / "books" / "katrine.txt").metadata


def test_legacy_encodings(tmp_path):
    from memloop.eval.datasets.textfile import read_text

    (tmp_path / "cp1252.txt").write_bytes("\u201cQuoted\u201d caf\u00e9 \u2014 dash.\r\n".encode("cp1252"))
    assert read_text(tmp_path / "cp1252.txt") == "\u201cQuoted\u201d caf\u00e9 \u2014 dash.\n"
    (tmp_path / "latin1.txt").write_bytes("Gar\u00e7on \x81\n".encode("latin-1"))
    assert read_text(tmp_path / "latin1.txt") == "Gar\u00e7on \x81\n"
    (tmp_path / "utf16.txt").write_bytes("Hello, world.\r\nSecond line.".encode("utf-16"))
    assert read_text(tmp_path / "utf16.txt") == "Hello, world.\nSecond line."


def test_a_stray_byte_in_utf8_is_replaced_counted_and_said_not_mojibake(tmp_path, caplog):
    """One stray \\x81 in a UTF-8 French text once sent the whole file to Windows-1252: "CafÃ©, naÃ¯vetÃ©"."""
    from memloop.eval.datasets.textfile import read_text

    (tmp_path / "fr.txt").write_bytes("Café, naïveté, déjà vu.".encode() + b" \x81 " + "Fin — été.\r\n".encode())
    with caplog.at_level("WARNING", logger="memloop.eval.datasets.textfile"):
        assert read_text(tmp_path / "fr.txt", "book") == "Café, naïveté, déjà vu. \ufffd Fin — été.\n"
    assert "1 byte(s) that are not UTF-8 replaced by U+FFFD (the first at character 24)" in caplog.text
    assert "fr.txt" in caplog.text
    # JSONL records (their titles) are read the same way
    (tmp_path / "books.jsonl").write_bytes(b'{"title": "' + "Été".encode() + b'\xff", "text": "Une nuit."}\n')
    with caplog.at_level("WARNING", logger="memloop.eval.datasets.textfile"):
        assert read_text(tmp_path / "books.jsonl") == '{"title": "Été\ufffd", "text": "Une nuit."}\n'
    # a Latin-1 text with more accents than any UTF-8 sequence still decodes as Latin-1, as before
    (tmp_path / "latin.txt").write_bytes("Garçon, café, été.".encode("latin-1"))
    assert read_text(tmp_path / "latin.txt") == "Garçon, café, été."


CHAPTERED = (
    "A TALE\nBy Someone\nChapter 1\nAnna sailed to Crete at dawn.\nShe met Ben.\n"
    "Chapter 2\n"
    + "\n".join(f"Ben rowed the boat past island number {i} while Anna slept." for i in range(12))
    + "\nChapter 3\nThey came home."
)


def test_chunk_by_chapter_reads_chapters_as_chunks(tmp_path, caplog):
    """Seed 001: a chapter is a chapter. Chunks start at headings; front matter joins chapter 1; a
    chapter longer than chunk_tokens is cut at paragraphs into chunks of that chapter."""
    (tmp_path / "tale.txt").write_text(CHAPTERED.replace("\n", "\n\n"))
    s = load_book(tmp_path / "tale.txt", chunk_tokens=64, chunk_by="chapter")
    chapters = s.metadata["chunk_chapters"]
    assert s.chunks[0] == "A TALE\nBy Someone\nChapter 1\nAnna sailed to Crete at dawn.\nShe met Ben."
    assert s.chunks[-1] == "Chapter 3\nThey came home." and chapters[0] == 1 and chapters[-1] == 3
    assert chapters.count(2) > 1 and s.metadata["chapters"] == 3 and s.metadata["chunk_by"] == "chapter"
    assert all(
        c.startswith("Chapter 2") == (i == chapters.index(2)) for i, c in enumerate(s.chunks) if chapters[i] == 2
    )
    assert "\n".join(s.chunks) == CHAPTERED  # no text lost, none repeated
    # the same book in token chunks crosses chapter boundaries
    tokens = load_book(tmp_path / "tale.txt", chunk_tokens=64)
    assert any("Chapter 2" in c and not c.startswith("Chapter 2") for c in tokens.chunks)
    # no headings: token chunks, a log line and the metadata say so
    (tmp_path / "plain.txt").write_text("No headings here.\n\nJust text.")
    with caplog.at_level("WARNING", logger="memloop.eval.datasets.books"):
        p = load_book(tmp_path / "plain.txt", chunk_tokens=64, chunk_by="chapter")
    assert p.metadata["chunk_by"] == "tokens (no chapter headings)" and "chunk_chapters" not in p.metadata
    assert "has no chapter headings" in caplog.text and "'plain'" in caplog.text
    with pytest.raises(Exception, match="chunk_by"):
        load_dataset("book", source=str(tmp_path / "plain.txt"), chunk_by="paragraph")


def test_real_books_by_chapter(shared_data):
    pride = load_book(shared_data / "books" / "pride-and-prejudice.txt", chunk_by="chapter")
    chapters = pride.metadata["chunk_chapters"]
    assert pride.metadata["chapters"] == 61 and sorted(set(chapters)) == list(range(1, 62))
    starts = [c for c, (a, b) in zip(pride.chunks[1:], zip(chapters, chapters[1:])) if a != b]
    assert len(starts) == 60 and all(c.startswith("Chapter ") for c in starts)
    assert (
        load_book(shared_data / "books" / "katrine.txt", chunk_by="chapter").metadata["chunk_by"].startswith("tokens")
    )


def test_collections_carry_reference_summaries_and_their_chapter(tmp_path):
    text = CHAPTERED.replace("\n", "\n\n")
    rows = [
        {"title": "Tale", "text": text, "summary": "Ben rows past the islands.", "chapter": 2},
        {"title": "Tale", "text": text, "reference": "They return.", "chapter": 3},
        {"title": "Other", "text": "Just text."},
    ]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    a, b, c = load_books(tmp_path / "c.jsonl", chunk_tokens=64, chunk_by="chapter")
    assert a.gold == {"reference": "Ben rows past the islands."} and a.metadata["target_chapter"] == 2
    assert b.gold == {"reference": "They return."} and a.id != b.id and a.id.endswith("-ch2")
    assert c.gold is None and "target_chapter" not in c.metadata
    (tmp_path / "d.json").write_text(json.dumps({"Tale": {"text": text, "summary": "A tale."}, "Other": "x."}))
    d, e = load_books(tmp_path / "d.json")
    assert d.gold == {"reference": "A tale."} and e.gold is None
    for bad, match in (
        ({"summary": "S", "chapter": 9}, "chapter 9"),
        ({"summary": "", "chapter": 1}, "non-empty"),
        ({"chapter": 2}, "give the 'summary'"),
        ({"summary": "S", "chapter": "two"}, "chapter's number"),
    ):
        (tmp_path / "bad.jsonl").write_text(json.dumps({"title": "T", "text": text, **bad}))
        with pytest.raises(MissingFieldError, match=match):
            load_books(tmp_path / "bad.jsonl", chunk_tokens=64, chunk_by="chapter")


def test_text_followed_by_random_bytes_is_refused_as_binary(tmp_path):
    """A text whose tail is random bytes decoded as Windows-1252 and then took the chunker hours; the
    share of control and non-ASCII bytes over the whole file refuses it. Latin-1 prose still loads."""
    import random

    text = ("It was the best of times, it was the worst of times. " * 200).encode()
    rng = random.Random(3)
    noise = bytes(rng.randrange(1, 256) for _ in range(len(text)))  # no NUL (that one was always refused)
    (tmp_path / "tail.txt").write_bytes(text + noise)
    with pytest.raises(BinaryFileError, match="not text"):
        load_books(tmp_path / "tail.txt")
    (tmp_path / "latin.txt").write_bytes(("Le garçon était à la fenêtre. " * 300).encode("latin-1"))
    (sample,) = load_books(tmp_path / "latin.txt")
    assert "garçon était" in sample.chunks[0]
