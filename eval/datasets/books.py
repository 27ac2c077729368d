"""Books: plain-text and Project Gutenberg files, cleaned and chunked like BooookScore.

Cleaning keeps what the official pipeline expects, one paragraph per line: Gutenberg header and
licence footer removed, BOM and CRLF normalised, hard-wrapped lines of a paragraph joined with a space.

Chunks are token chunks (`chunk_by="tokens"`, the BooookScore chunker) or chapters
(`chunk_by="chapter"`, seed 001): chunks start at the book's chapter headings, a chapter longer than
`chunk_tokens` is cut at paragraph boundaries into several chunks of that chapter, and
metadata['chunk_chapters'] gives each chunk's chapter. A book without headings falls back to token
chunks, with a log line and metadata['chunk_by'] saying so.

Reference summaries (seed 001's chapter summaries, BookSum-style): a JSON/JSONL collection may give
a book its `summary` (gold `{"reference": summary}`, scored by ROUGE and KGScore) and the `chapter`
it summarises (metadata['target_chapter']); a book without one has gold None (BooookScore is
reference-free).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from memloop.eval.datasets.chunker import chunk_paragraphs, split_paragraphs
from memloop.eval.datasets.errors import (
    DatasetError,
    DatasetNotFoundError,
    EmptyDatasetError,
    MissingFieldError,
    UnknownFormatError,
)
from memloop.eval.datasets.records import parse_json
from memloop.eval.datasets.sample import Sample, slug
from memloop.eval.datasets.textfile import MAX_DATA_FILE_BYTES, read_text
from memloop.eval.tokens import TokenizerLike

TEXT_SUFFIXES = (".txt", ".text", ".md")

# The current markers, and the end of the "small print" licence that opens 1990s Gutenberg files.
_START = re.compile(
    r"^(?:\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG.*|\*END\*THE SMALL PRINT!.*)$", re.IGNORECASE | re.MULTILINE
)
_END = re.compile(r"^\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.IGNORECASE | re.MULTILINE)
_END_LINE = re.compile(r"^\s*End of (?:the )?Project Gutenberg.*$", re.IGNORECASE | re.MULTILINE)
_CREDITS = re.compile(r"^(?:Produced by|E-text prepared by|Transcribed from)\b", re.IGNORECASE)
_BLANK_LINES = re.compile(r"\n[ \t]*\n")
_CHAPTER = re.compile(r"^(?:CHAPTER|Chapter|BOOK|Book|PART|Part)\s+(?:[IVXLCDM]+|\d+|[A-Z][a-z]+)\b")
SUMMARY_FIELDS = ("summary", "reference", "summary_text")  # a collection's reference summary, by its usual names
ChunkBy = Literal["tokens", "chapter"]
log = logging.getLogger(__name__)


def chunk_chapters(chunks: Iterable[str]) -> list[int]:
    """The chapter (1-based, by `Chapter N`-style heading lines) in which each chunk starts; text before
    the first heading counts as chapter 1. Used by chapter-wise methods (metadata['chunk_chapters'])."""
    out, seen = [], 0
    for chunk in chunks:
        lines = chunk.split("\n")
        out.append(max(1, seen + 1 if _CHAPTER.match(lines[0]) else seen))
        seen += sum(1 for line in lines if _CHAPTER.match(line))
    return out


def split_chapters(paragraphs: list[str]) -> list[list[str]]:
    """The paragraphs grouped by chapter, each group starting at a `Chapter N`-style heading; text
    before the first heading joins the first chapter (as `chunk_chapters` counts it). [] when the
    book has no heading."""
    starts = [i for i, p in enumerate(paragraphs) if _CHAPTER.match(p)]
    if not starts:
        return []
    bounds = [0, *starts[1:], len(paragraphs)]
    return [paragraphs[a:b] for a, b in zip(bounds, bounds[1:])]


def chapter_chunks(
    paragraphs: list[str], chunk_tokens: int, tokenizer: TokenizerLike = None
) -> tuple[list[str], list[int]] | None:
    """(chunks, chapter of each chunk) with chunks that never cross a chapter heading; None without headings."""
    chapters = split_chapters(paragraphs)
    if not chapters:
        return None
    chunks: list[str] = []
    numbers: list[int] = []
    for n, chapter in enumerate(chapters, 1):
        pieces = chunk_paragraphs(chapter, chunk_tokens, tokenizer)
        chunks += pieces
        numbers += [n] * len(pieces)
    return chunks, numbers


def strip_gutenberg(text: str) -> str:
    """The book between Project Gutenberg's START and END markers (the whole text when there are none).

    A first line ending in '***' (the tail of a cut START marker) and a last line starting with
    '***' are dropped too, as are the volunteers' credits directly after the START marker.
    """
    start, end = _START.search(text), _END.search(text)
    body = text[start.end() if start else 0 : end.start() if end else len(text)]
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
        paragraphs = (
            " ".join(line.strip() for line in block.split("\n") if line.strip()) for block in _BLANK_LINES.split(body)
        )
    else:
        paragraphs = (line.rstrip() for line in body.split("\n"))
    return "\n".join(p for p in paragraphs if p)


@dataclass(frozen=True)
class BookRecord:
    """One book of a collection: its text, and optionally the reference summary of one of its chapters."""

    title: str
    text: str
    summary: str | None = None
    chapter: int | None = None  # the chapter `summary` summarises (1-based, by chapter heading)


def book_sample(
    title: str,
    text: str,
    chunk_tokens: int = 2048,
    tokenizer: TokenizerLike = None,
    source: str | None = None,
    chapters: bool = False,
    chunk_by: ChunkBy = "tokens",
    summary: str | None = None,
    chapter: int | None = None,
    max_chunks: int | None = None,
) -> Sample:
    """A book Sample from cleaned text. Gold is `{"reference": summary}` when a reference summary is
    given, else None (BooookScore is reference-free). With `max_chunks`, token chunking stops after
    one chunk more than that (`memloop.eval.datasets.truncate` then sees that chunks were dropped): a run
    of a book's first chunks does not chunk the whole book."""
    paragraphs = split_paragraphs(text)
    if not paragraphs:
        raise EmptyDatasetError(
            f"book {title!r} has no text after cleaning: check that it is a book and not only a Gutenberg licence"
        )
    metadata: dict[str, Any] = {
        "title": title,
        "chunk_tokens": chunk_tokens,
        "paragraphs": len(paragraphs),
        "chars": len(text),
        "chunk_by": chunk_by,
    }
    by_chapter = chapter_chunks(paragraphs, chunk_tokens, tokenizer) if chunk_by == "chapter" else None
    if by_chapter is not None:
        chunks, metadata["chunk_chapters"] = by_chapter
        metadata["chapters"] = max(by_chapter[1])
    else:
        if chunk_by == "chapter":
            log.warning(
                "book %r has no chapter headings (`Chapter N`, `CHAPTER IV`, `Part Two` ...): read in "
                "%d-token chunks instead of chapters",
                title,
                chunk_tokens,
            )
            metadata["chunk_by"] = "tokens (no chapter headings)"
        chunks = chunk_paragraphs(
            paragraphs, chunk_tokens, tokenizer, max_chunks=max_chunks + 1 if max_chunks and chapter is None else None
        )
        if max_chunks and chapter is None and len(chunks) > max_chunks:
            metadata["total_chunks"] = None  # not chunked further: unknown
        if chapters or chapter is not None:
            metadata["chunk_chapters"] = chunk_chapters(chunks)
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:10]
    if source:
        metadata["source"] = source
    sample_id = f"book/{slug(title)}-{digest}"
    if chapter is not None:
        if chapter not in metadata["chunk_chapters"]:
            raise MissingFieldError(
                f"book {title!r}: its summary is of chapter {chapter}, but the book's chunks hold "
                f"chapters {sorted(set(metadata['chunk_chapters']))}; check the chapter number"
            )
        metadata["target_chapter"] = chapter
        sample_id += f"-ch{chapter}"
    gold = {"reference": summary} if summary else None
    return Sample(id=sample_id, task="book", chunks=tuple(chunks), query=None, gold=gold, metadata=metadata)


def load_book(
    path: str | Path,
    chunk_tokens: int = 2048,
    tokenizer: TokenizerLike = None,
    unwrap: bool = True,
    chapters: bool = False,
    chunk_by: ChunkBy = "tokens",
    max_chunks: int | None = None,
) -> Sample:
    """One plain-text or Gutenberg file as a chunked book Sample."""
    p = Path(path)
    return book_sample(
        p.stem,
        clean_book(read_text(p, "book"), unwrap=unwrap),
        chunk_tokens,
        tokenizer,
        source=str(p),
        chapters=chapters,
        chunk_by=chunk_by,
        max_chunks=max_chunks,
    )


def _record(where: str, title: Any, row: dict[str, Any]) -> BookRecord:
    """A collection entry with its optional reference summary and chapter, checked."""
    summaries = [row[k] for k in SUMMARY_FIELDS if row.get(k) is not None]
    if summaries and (not isinstance(summaries[0], str) or not summaries[0].strip()):
        raise MissingFieldError(f"{where}: the reference summary must be non-empty text")
    chapter = row.get("chapter")
    if chapter is not None and (isinstance(chapter, bool) or not isinstance(chapter, int) or chapter < 1):
        raise MissingFieldError(
            f"{where}: 'chapter' must be the summarised chapter's number (1, 2 ...), got {chapter!r}"
        )
    if chapter is not None and not summaries:
        raise MissingFieldError(f"{where}: 'chapter' names the chapter a summary covers; give the 'summary' too")
    return BookRecord(str(title), row["text"], summaries[0] if summaries else None, chapter)


def _books_from_json(p: Path) -> Iterable[BookRecord]:
    """`{title: text}` (the official release's book dict, as JSON), `{title: {"text", "summary"}}`, or JSONL
    rows with title/id and text; a `summary` (or `reference`, `summary_text`) and its `chapter` are optional."""
    raw = read_text(p, "book collection", limit=MAX_DATA_FILE_BYTES)
    if p.suffix == ".jsonl":
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            row = parse_json(
                line,
                lambda exc: f"{p}:{n} is not JSON ({exc.msg}): each line must be an object with 'title' and 'text'",
            )
            title = row.get("title") or row.get("id") if isinstance(row, dict) else None
            if not title or not isinstance(row.get("text"), str):
                raise MissingFieldError(f"{p}:{n} lacks 'title' (or 'id') and 'text': each line must carry both")
            yield _record(f"{p}:{n}", title, row)
        return
    data = parse_json(raw, lambda exc: f"{p} is not JSON ({exc.msg}): a book collection is an object {{title: text}}")
    if not isinstance(data, dict) or not all(
        isinstance(v, str) or (isinstance(v, dict) and isinstance(v.get("text"), str)) for v in data.values()
    ):
        raise MissingFieldError(
            f"{p} must be a JSON object mapping each book title to its full text "
            '(or to {"text": ..., "summary": ...})'
        )
    for title, value in data.items():
        yield BookRecord(title, value) if isinstance(value, str) else _record(f"{p} [{title!r}]", title, value)


def load_books(
    source: str | Path | Iterable[str | Path],
    chunk_tokens: int = 2048,
    tokenizer: TokenizerLike = None,
    unwrap: bool = True,
    limit: int | None = None,
    chapters: bool = False,
    chunk_by: ChunkBy = "tokens",
    max_chunks: int | None = None,
) -> list[Sample]:
    """Books from a file, a directory of .txt files (sorted by name), a JSON/JSONL collection, or a list of paths.

    `chapters=True` adds metadata['chunk_chapters'] (the chapter each token chunk starts in);
    `chunk_by="chapter"` makes the chunks follow the chapter headings (see the module docstring)."""
    if chunk_by not in ("tokens", "chapter"):
        raise DatasetError(f"chunk_by must be 'tokens' or 'chapter', got {chunk_by!r}")
    if not isinstance(source, (str, Path)):
        paths = [Path(s) for s in source]
        samples = [load_book(p, chunk_tokens, tokenizer, unwrap, chapters, chunk_by, max_chunks) for p in paths[:limit]]
    else:
        p = Path(source)
        if not p.exists():
            raise DatasetNotFoundError(
                f"book source {p} does not exist: pass a .txt file, a directory of them, or a JSON collection"
            )
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in TEXT_SUFFIXES)
            if not files:
                raise EmptyDatasetError(
                    f"directory {p} holds no {'/'.join(TEXT_SUFFIXES)} files: put the books there as plain text"
                )
            samples = [
                load_book(f, chunk_tokens, tokenizer, unwrap, chapters, chunk_by, max_chunks) for f in files[:limit]
            ]
        elif p.suffix.lower() in (".json", ".jsonl"):
            books = list(_books_from_json(p))[:limit]
            if not books:
                raise EmptyDatasetError(f"{p} holds no books")
            samples = [
                book_sample(
                    b.title,
                    clean_book(b.text, unwrap=unwrap),
                    chunk_tokens,
                    tokenizer,
                    source=str(p),
                    chapters=chapters,
                    chunk_by=chunk_by,
                    summary=b.summary,
                    chapter=b.chapter,
                    max_chunks=max_chunks,
                )
                for b in books
            ]
        elif p.suffix.lower() in TEXT_SUFFIXES or not p.suffix:
            samples = [load_book(p, chunk_tokens, tokenizer, unwrap, chapters, chunk_by, max_chunks)]
        else:
            raise UnknownFormatError(
                f"{p}: unknown book format {p.suffix!r}: use .txt, a directory of .txt, .json or .jsonl"
            )
    return samples
