"""BookSum chapters (seed 001's task): summarise chapter k of a book with the whole book at hand.

Reads BookSum's chapter-level rows (Kryściński et al., 2021) as the release and its hub copy
`kmfoda/booksum` give them, one row per (chapter, reference summary):
`bid` (the book), `chapter_path` (`.../<bid>-chapters/<n>.txt`, or `chapters_<a>_to_<b>.txt` for an
aggregate of several chapters), `chapter` (the chapter's text), `summary_text` (the reference),
`source` (the study guide the summary comes from), `book_id` (`<title>.<chapter name>`) and
`is_aggregate`. The file is JSONL/JSON/Parquet/CSV-converted Parquet, a dataset directory, or the hub id.

Each book's full text is rebuilt in reading order from the units BookSum has (single chapters,
aggregates of several, a play's acts and scenes; `memloop.eval.datasets.booksum_units`), so no chapter is
lost when one exists only inside an aggregate, and every row, aggregate or not, is a target. A
sample targets one unit k: its chunks are the whole book (the units before k, k's own text, the units
after k; each cut to `chunk_tokens` at paragraph boundaries; metadata['chunk_chapters'] gives each
chunk's part number), metadata['target_chapter'] = k, and its gold the reference of that unit
(`{"reference": summary_text}`). The knowledge graph is built from the whole book, as the paper
builds it (section 3.2), and retrieval leaves out edges from parts after k (`memloop.eval.kg.chapter_edges`).

Which (chapter, reference) pairs are eligible follows the paper's appendix B: books the paper
excluded (train/test overlap, non-narrative texts, story collections) are left out, as are
summaries that are empty or of fewer than `min_summary_words` words (memloop's threshold for the
paper's "just a few words"), chapters over `max_chapter_tokens` (16,384) and summaries over
`max_summary_tokens` (1,024) tokens, counted in one fixed tokenizer whatever the model under test, so
that every model is scored on the same chapters. The paper's limits are its LongT5 model's, so T5
SentencePiece tokens; no package memloop installs ships that tokenizer and nothing is downloaded, so the
default is memloop's choice, cl100k_base (GPT-4's, the paper's other summariser), and
`eligibility_tokenizer` takes the path of a local Hugging Face tokenizer folder instead (e.g. a copy of
t5-base's, which LongT5 shares) to count as the paper's model did; recorded as
metadata['eligibility_tokenizer']. `samples` of them (100, as in table 1) are drawn at random with
`seed`, recorded in each sample's metadata.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memloop.eval.datasets.booksum_units import Part, Position, Unit, rebuild, unit_span
from memloop.eval.datasets.chunker import chunk_paragraphs, split_paragraphs
from memloop.eval.datasets.errors import DatasetError, EmptyDatasetError, MissingFieldError
from memloop.eval.datasets.records import Record, read_records
from memloop.eval.datasets.sample import Sample, slug
from memloop.eval.tokens import TokenCounter, TokenizerLike, token_counter

HUB_ID = "kmfoda/booksum"
# Appendix B: books in both train and validation/test, non-narrative texts, story collections.
PAPER_EXCLUDED_BOOKS = frozenset(
    {
        1130,
        1526,
        1783,
        1798,
        61,
        1232,
        1404,
        3207,
        3420,
        3755,
        4320,
        7370,
        11224,
        13434,
        34901,
        221,
        416,
        610,
        1429,
        15859,
    }
)
ELIGIBILITY_TOKENIZER = "cl100k_base"  # memloop's choice: the paper's LongT5 counted T5 SentencePiece tokens


class EligibilityTokenizerError(DatasetError):
    """`eligibility_tokenizer` names no tokenizer memloop can load here."""


def eligibility_counter(tokenizer: str = ELIGIBILITY_TOKENIZER) -> TokenCounter:
    """Appendix B's token count, the same whatever model is under test: a tiktoken encoding by name
    (cl100k_base, offline) or a local Hugging Face tokenizer folder (never downloaded)."""
    try:
        return token_counter(None if tokenizer == ELIGIBILITY_TOKENIZER else tokenizer)
    except Exception as exc:  # an unknown encoding name, a folder transformers cannot read
        raise EligibilityTokenizerError(
            f"eligibility_tokenizer {tokenizer!r} cannot be loaded ({exc}); give 'cl100k_base' or the path of a "
            "Hugging Face tokenizer folder on this machine (e.g. a copy of t5-base's tokenizer, the paper's LongT5 "
            "tokenizer); nothing is downloaded"
        ) from None


def eligibility_tokens(text: str) -> int:
    """Tokens of `text` for appendix B's length filters in the default tokenizer (cl100k_base)."""
    return eligibility_counter()(text)


@dataclass(frozen=True)
class ChapterRow:
    book: str  # BookSum's `bid`
    title: str
    unit: str  # the chapter file (one chapter, or an aggregate of several)
    span: tuple[Position, Position]  # first and last position the unit covers (chapter, or act and scene)
    text: str
    summary: str
    source: str  # the study guide the reference comes from
    where: str


def _span(row: Record, where: str) -> tuple[Position, Position]:
    """(first, last) position of a row, from its chapter file name (else its summary id)."""
    for field in ("chapter_path", "summary_id", "book_id"):
        value = row.get(field)
        if isinstance(value, str):
            name = Path(value).stem if field == "chapter_path" else value.rsplit(".", 1)[-1]
            span = unit_span(name)
            if span is not None:
                return span
    raise MissingFieldError(
        f"{where}: cannot tell which chapter this is: 'chapter_path' (e.g. '.../1232-chapters/3.txt' "
        "or '.../act_1_scene_2.txt') or 'summary_id' (e.g. 'chapter 3') must carry its number"
    )


def parse_row(row: Record, where: str) -> ChapterRow:
    text = row.get("chapter")
    if not isinstance(text, str) or not text.strip():
        raise MissingFieldError(
            f"{where}: 'chapter' (the chapter's text) is missing or empty: this reader takes "
            "BookSum's chapter-level rows (bid, chapter_path, chapter, summary_text, source)"
        )
    book = row.get("bid")
    if book is None or isinstance(book, bool):
        raise MissingFieldError(f"{where}: missing 'bid' (the book's id), which groups chapters into books")
    summary = row.get("summary_text")
    book_id = row.get("book_id")
    title = book_id.rsplit(".", 1)[0] if isinstance(book_id, str) and "." in book_id else str(book_id or book)
    unit = row.get("chapter_path")
    span = _span(row, where)
    return ChapterRow(
        str(book),
        title,
        str(unit) if unit else f"{book}:{span[0]}-{span[1]}",
        span,
        text,
        summary.strip() if isinstance(summary, str) else "",
        str(row.get("source") or ""),
        where,
    )


def rebuild_books(rows: list[ChapterRow]) -> dict[str, tuple[list[Part], dict[str, tuple[int, int]]]]:
    """book -> (its parts in reading order, unit -> the range of parts it covers); `booksum_units.rebuild`."""
    units: dict[str, dict[str, ChapterRow]] = {}
    for r in rows:
        units.setdefault(r.book, {}).setdefault(r.unit, r)
    return {
        book: rebuild([Unit(r.unit, r.span[0], r.span[1], r.text) for r in by_unit.values()])
        for book, by_unit in units.items()
    }


def _book_id(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def load_booksum(
    path: str | Path = HUB_ID,
    split: str = "test",
    revision: str | None = None,
    config_name: str | None = None,
    samples: int | None = 100,
    seed: int = 0,
    max_chapter_tokens: int = 16384,
    max_summary_tokens: int = 1024,
    min_summary_words: int = 10,
    exclude_paper_books: bool = True,
    chunk_tokens: int = 2048,
    tokenizer: TokenizerLike = None,
    limit: int | None = None,
    eligibility_tokenizer: str = ELIGIBILITY_TOKENIZER,
) -> list[Sample]:
    """`samples` (None: all) eligible chapters of BookSum's `split`, drawn with `seed` (see the module docstring)."""
    if samples is not None and samples < 1:
        raise DatasetError(f"samples must be at least 1 or None for every eligible chapter (got {samples})")
    if chunk_tokens < 1 or max_chapter_tokens < 1:
        raise DatasetError("chunk_tokens and max_chapter_tokens must be positive")
    count = eligibility_counter(eligibility_tokenizer)
    rows = [
        parse_row(rec, where)
        for where, rec in read_records(path, "BookSum file", split=split, revision=revision, config_name=config_name)
    ]
    if not rows:
        raise EmptyDatasetError(f"BookSum file {path} has no rows")
    books = rebuild_books(rows)
    eligible = []
    for r in rows:
        if exclude_paper_books and _book_id(r.book) in PAPER_EXCLUDED_BOOKS:
            continue
        if len(r.summary.split()) < min_summary_words or count(r.summary) > max_summary_tokens:
            continue
        if count(r.text) > max_chapter_tokens:
            continue
        eligible.append((r, books[r.book][1][r.unit][0] + 1))
    if not eligible:
        raise EmptyDatasetError(
            f"BookSum file {path}: no chapter passes the filters (chapter <= {max_chapter_tokens} "
            f"{eligibility_tokenizer} tokens, summary of {min_summary_words} words to {max_summary_tokens} tokens)"
        )
    eligible.sort(key=lambda e: (e[0].book, e[1], e[0].source, e[0].where))
    drawn = eligible if samples is None or samples >= len(eligible) else random.Random(seed).sample(eligible, samples)
    out = [
        _sample(*books[r.book], r, chunk_tokens, tokenizer, seed, len(eligible), eligibility_tokenizer)
        for r, _ in drawn
    ]
    return out[:limit] if limit is not None else out


def _sample(
    parts: list[Part],
    covers: dict[str, tuple[int, int]],
    target: ChapterRow,
    chunk_tokens: int,
    tokenizer: TokenizerLike,
    seed: int,
    eligible: int,
    eligibility_tokenizer: str,
) -> Sample:
    """The whole book with the target unit's own text in its place: parts before it, it, parts after it."""
    first, last = covers[target.unit]
    texts = [p.text for p in parts[:first]] + [target.text] + [p.text for p in parts[last + 1 :]]
    k = first + 1
    chunks: list[str] = []
    numbers: list[int] = []
    for n, text in enumerate(texts, 1):
        pieces = chunk_paragraphs(split_paragraphs(text), chunk_tokens, tokenizer)
        chunks += pieces
        numbers += [n] * len(pieces)
    metadata: dict[str, Any] = {
        "book": target.book,
        "title": target.title,
        "chapters": len(texts),
        "target_chapter": k,
        "target_unit": target.unit,
        "chunk_chapters": numbers,
        "chunk_tokens": chunk_tokens,
        "book_units": [p.name for p in parts[:first]] + [target.unit] + [p.name for p in parts[last + 1 :]],
        "summary_source": target.source,
        "source": target.where,
        "draw_seed": seed,
        "eligible": eligible,
        "eligibility_tokenizer": eligibility_tokenizer,
    }
    span = f"{k}" if last == first else f"{k}-{last + 1}"  # an aggregate: the parts it spans in the full book
    sid = f"booksum/{slug(target.book)}-ch{span}" + (f"-{slug(target.source)}" if target.source else "")
    return Sample(
        id=sid,
        task="booksum",
        chunks=tuple(chunks),
        query="Summarize the chapter.",
        gold={"reference": target.summary},
        metadata=metadata,
    )


def truncate_sample(sample: Sample, n_chunks: int) -> Sample:
    """A reduced run's sample: the target chapter kept (its first chunks if it alone is longer) with the
    chunks just before it, n_chunks in all, so the summarised chapter is still the one the reference covers
    (the parts after it, which the full run's graph is built from too, are left out)."""
    chapters = list(sample.metadata["chunk_chapters"])
    k = sample.metadata["target_chapter"]
    own = [i for i, c in enumerate(chapters) if c == k][:n_chunks]
    before = [i for i, c in enumerate(chapters) if c < k][len(own) - n_chunks :] if n_chunks > len(own) else []
    keep = before + own
    meta = dict(
        sample.metadata,
        chunk_chapters=[chapters[i] for i in keep],
        max_chunks=n_chunks,
        total_chunks=len(sample.chunks),
    )
    return dataclasses.replace(sample, chunks=tuple(sample.chunks[i] for i in keep), metadata=meta)
