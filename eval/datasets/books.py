"""Books: plain-text and Project Gutenberg files, cleaned and chunked like BooookScore.

Cleaning keeps what the official pipeline expects, one paragraph per line: Gutenberg header and
licence footer removed, BOM and CRLF normalised, hard-wrapped lines of a paragraph joined with a space.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Iterable

from eval.datasets.chunker import chunk_paragraphs, split_paragraphs
from eval.datasets.errors import DatasetNotFoundError, EmptyDatasetError, MissingFieldError, UnknownFormatError
from eval.datasets.sample import Sample, slug
from eval.datasets.textfile import read_text
from eval.tokens import TokenizerLike

TEXT_SUFFIXES = (".txt", ".text", ".md")

# The current markers, and the end of the "small print" licence that opens 1990s Gutenberg files.
_START = re.compile(r"^(?:\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG.*|\*END\*THE SMALL PRINT!.*)$",
                    re.IGNORECASE | re.MULTILINE)
_END = re.compile(r"^\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.IGNORECASE | re.MULTILINE)
_END_LINE = re.compile(r"^\s*End of (?:the )?Project Gutenberg.*$", re.IGNORECASE | re.MULTILINE)
_CREDITS = re.compile(r"^(?:Produced by|E-text prepared by|Transcribed from)\b", re.IGNORECASE)
_BLANK_LINES = re.compile(r"\n[ \t]*\n")
_CHAPTER = re.compile(r"^(?:CHAPTER|Chapter|BOOK|Book|PART|Part)\s+(?:[IVXLCDM]+|\d+|[A-Z][a-z]+)\b")


def chunk_chapters(chunks: Iterable[str]) -> list[int]:
    """The chapter (1-based, by `Chapter N`-style heading lines) in which each chunk starts; text before
    the first heading counts as chapter 1. Used by chapter-wise methods (metadata['chunk_chapters'])."""
    out, seen = [], 0
    for chunk in chunks:
        lines = chunk.split("\n")
        out.append(max(1, seen + 1 if _CHAPTER.match(lines[0]) else seen))
        seen += sum(1 for line in lines if _CHAPTER.match(line))
    return out


def strip_gutenberg(text: str) -> str:
    """The book between Project Gutenberg's START and END markers (the whole text when there are none).

    A first line ending in '***' (the tail of a cut START marker) and a last line starting with
    '***' are dropped too, as are the volunteers' credits directly after the START marker.
    """
    start, end = _START.search(text), _END.search(text)
    body = text[start.end() if start else 0: end.start() if end else len(text)]
    tail = list(_END_LINE.finditer(body))  # "End of the Project Gutenberg EBook of ...": the footer starts here
    if tail:
        body = body[: tail[-1].start()]
    lines = body.strip("\n").split("\n")
    if not start and lines and lines[0].rstrip().endswith("***"):
        lines = lines[1:]
    if not end and lines and lines[-1].lstrip().startswith("***"):
        lines = lines[:-1]
    body = "\n".join(lines).strip("\n")
    blocks = _BLANK_LINES.split(body)
    if blocks and _CREDITS.match(blocks[0].strip()):
        body = "\n\n".join(blocks[1:])
    return body


def clean_book(text: str, unwrap: bool = True) -> str:
    """Normalised book text with one paragraph per line.

    `unwrap=True` joins the hard-wrapped lines of each blank-line-separated paragraph with spaces
    (Gutenberg wraps at ~70 columns); `unwrap=False` keeps every line as its own paragraph.
    """
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    body = strip_gutenberg(text)
    if unwrap:
        paragraphs = (" ".join(line.strip() for line in block.split("\n") if line.strip()) for block in _BLANK_LINES.split(body))
    else:
        paragraphs = (line.rstrip() for line in body.split("\n"))
    return "\n".join(p for p in paragraphs if p)


def book_sample(title: str, text: str, chunk_tokens: int = 2048, tokenizer: TokenizerLike = None,
                source: str | None = None, chapters: bool = False) -> Sample:
    """A book Sample from cleaned text. Gold is None: BooookScore is reference-free."""
    paragraphs = split_paragraphs(text)
    if not paragraphs:
        raise EmptyDatasetError(f"book {title!r} has no text after cleaning: check that it is a book and not only a Gutenberg licence")
    chunks = chunk_paragraphs(paragraphs, chunk_tokens, tokenizer)
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:10]
    metadata = {"title": title, "chunk_tokens": chunk_tokens, "paragraphs": len(paragraphs), "chars": len(text)}
    if source:
        metadata["source"] = source
    if chapters:
        metadata["chunk_chapters"] = chunk_chapters(chunks)
    return Sample(id=f"book/{slug(title)}-{digest}", task="book", chunks=tuple(chunks), query=None, gold=None, metadata=metadata)


def load_book(path: str | Path, chunk_tokens: int = 2048, tokenizer: TokenizerLike = None, unwrap: bool = True,
              chapters: bool = False) -> Sample:
    """One plain-text or Gutenberg file as a chunked book Sample."""
    p = Path(path)
    return book_sample(p.stem, clean_book(read_text(p, "book"), unwrap=unwrap), chunk_tokens, tokenizer, source=str(p),
                       chapters=chapters)


def _books_from_json(p: Path) -> Iterable[tuple[str, str]]:
    """`{title: text}` (the official release's book dict, as JSON) or JSONL rows with title/id and text."""
    raw = read_text(p, "book collection")
    if p.suffix == ".jsonl":
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UnknownFormatError(f"{p}:{n} is not JSON ({exc.msg}): each line must be an object with 'title' and 'text'") from None
            title = row.get("title") or row.get("id") if isinstance(row, dict) else None
            if not title or not isinstance(row.get("text"), str):
                raise MissingFieldError(f"{p}:{n} lacks 'title' (or 'id') and 'text': each line must carry both")
            yield str(title), row["text"]
        return
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UnknownFormatError(f"{p} is not JSON ({exc.msg}): a book collection is an object {{title: text}}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise MissingFieldError(f"{p} must be a JSON object mapping each book title to its full text")
    yield from data.items()


def load_books(source: str | Path | Iterable[str | Path], chunk_tokens: int = 2048, tokenizer: TokenizerLike = None,
               unwrap: bool = True, limit: int | None = None, chapters: bool = False) -> list[Sample]:
    """Books from a file, a directory of .txt files (sorted by name), a JSON/JSONL collection, or a list of paths.

    `chapters=True` adds metadata['chunk_chapters'] (the chapter each chunk starts in)."""
    if not isinstance(source, (str, Path)):
        paths = [Path(s) for s in source]
        samples = [load_book(p, chunk_tokens, tokenizer, unwrap, chapters) for p in paths[:limit]]
    else:
        p = Path(source)
        if not p.exists():
            raise DatasetNotFoundError(f"book source {p} does not exist: pass a .txt file, a directory of them, or a JSON collection")
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in TEXT_SUFFIXES)
            if not files:
                raise EmptyDatasetError(f"directory {p} holds no {'/'.join(TEXT_SUFFIXES)} files: put the books there as plain text")
            samples = [load_book(f, chunk_tokens, tokenizer, unwrap, chapters) for f in files[:limit]]
        elif p.suffix.lower() in (".json", ".jsonl"):
            books = list(_books_from_json(p))[:limit]
            if not books:
                raise EmptyDatasetError(f"{p} holds no books")
            samples = [book_sample(t, clean_book(x, unwrap=unwrap), chunk_tokens, tokenizer, source=str(p), chapters=chapters)
                       for t, x in books]
        elif p.suffix.lower() in TEXT_SUFFIXES or not p.suffix:
            samples = [load_book(p, chunk_tokens, tokenizer, unwrap, chapters)]
        else:
            raise UnknownFormatError(f"{p}: unknown book format {p.suffix!r}: use .txt, a directory of .txt, .json or .jsonl")
    return samples
