"""The BooookScore chunker (Chang et al., 2024), reproduced boundary for boundary.

Algorithm (of the official release's `chunk.py`, restated):
1. the document is split on newlines and empty lines are dropped: each line is a paragraph;
2. if the whole document (paragraphs joined by newlines) fits, it is one chunk;
3. otherwise paragraphs are packed greedily, joined by a newline, while the chunk stays within the limit;
4. a paragraph that alone exceeds the limit is appended to the current chunk and the result is cut
   repeatedly: each step drops everything after the second-to-last sentence end ('.', '?', '!',
   or a quote right after one of them), falling back to commas when fewer than two sentence ends
   remain; each cut-off head becomes a chunk and the remainder carries into the next chunk.

Two departures. So that no text is ever lost and no chunk ever exceeds the limit: where the
official code finds fewer than two cut points even with commas it keeps the over-long text and
drops the remainder; here the text is cut at the last whitespace (or character) that fits instead.
Counting with the same tokenizer, the chunks therefore always satisfy
`"".join(chunks).replace("\\n", "") == "".join(paragraphs)`. And the official code knows only ASCII
punctuation; here the sentence ends and commas of other scripts count too (CJK `。！？，、`, fullwidth,
Devanagari `।`, Arabic `،؟`, ...), so a Chinese book is cut at its sentences rather than hard-cut. A
text of ASCII punctuation only (every English book) gets the official boundaries exactly.

The work is bounded for any text: a head far longer than the limit is never counted whole (a prefix
of a few times the limit's characters decides that it does not fit), so a text with no cut point at
all is tokenised a bounded number of times over, not once per chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from memloop.eval.datasets.errors import DatasetError
from memloop.eval.tokens import TokenCounter, TokenizerLike, token_counter

MIN_CHUNK_TOKENS = 8  # a single character is at most 4 byte-level BPE tokens; below this cuts cannot progress

# ASCII first (the official set); then the sentence ends of other scripts: CJK and fullwidth, the
# double marks, Devanagari's danda, Arabic and Urdu, Armenian, Ethiopic, Myanmar.
_ENDS = ".?!" + "。！？｡．‼⁇⁈⁉।॥؟۔։።။"
_COMMAS = "," + "，、､،၊"
_SENTENCE_ENDS = re.compile(rf"""[{_ENDS}]|(?<=[{_ENDS}])["']""")
_SENTENCE_OR_COMMA = re.compile(rf"""[{_ENDS}{_COMMAS}]|(?<=[{_ENDS}])["']""")


def split_paragraphs(text: str) -> list[str]:
    """Lines of `text` with empty ones dropped (the official chunker's notion of a paragraph)."""
    return [line for line in text.split("\n") if line]


# Token counts of growing prefixes are taken as monotone, within this many tokens (BPE may merge the
# last few characters of a longer prefix into fewer tokens; it never undoes more than a handful).
_SLACK = 16
_QUOTES = "\"'"


def _exceeds(text: str, start: int, limit: int, count: TokenCounter, first: int = 0) -> bool:
    """count(text[start:]) > limit, counting only a prefix of about `first` characters (default four per
    token of the limit), doubled until its count decides, when the text is long."""
    n = first or 4 * limit
    while start + n < len(text):
        if count(text[start : start + n]) > limit + _SLACK:
            return True
        n *= 2
    return count(text[start:]) > limit


def _largest_fitting(
    lengths: "_Candidates", text: str, start: int, limit: int, count: TokenCounter, guess: int
) -> int | None:
    """The index of the first (longest) candidate head that fits, as the official loop finds it scanning
    from the longest down; found instead around the candidate nearest `guess` characters, so that only
    a few heads near the limit are counted. None when no candidate fits."""
    m = len(lengths)
    counted: dict[int, int] = {}  # candidate index -> its head's count (each head is counted once)
    probe = max(2 * guess, 8 * limit)  # characters that settle whether a much longer head can fit

    def n_of(i: int) -> int:
        if i not in counted:
            n = lengths[i]
            if n > 2 * probe and count(text[start : start + probe]) > limit + _SLACK:
                counted[i] = limit + _SLACK + 1  # its prefix is already too long: never count the whole head
            else:
                counted[i] = count(text[start : start + n])
        return counted[i]

    def fits(i: int) -> bool:
        return n_of(i) <= limit

    lo, hi = 0, m - 1  # the first candidate no longer than the guess (lengths fall with the index)
    while lo < hi:
        mid = (lo + hi) // 2
        if lengths[mid] <= guess:
            hi = mid
        else:
            lo = mid + 1
    step = 1
    if fits(lo):  # gallop towards the longer heads until one does not fit
        fit, nofit = lo, -1
        while fit > 0:
            i = max(fit - step, 0)
            if not fits(i):
                nofit = i
                break
            fit, step = i, step * 2
    else:  # gallop towards the shorter heads until one fits
        nofit = lo
        while True:
            if nofit == m - 1:
                return None
            i = min(nofit + step, m - 1)
            if fits(i):
                fit = i
                break
            nofit, step = i, step * 2
    while fit - nofit > 1:  # the boundary between nofit (too long) and fit
        mid = (fit + nofit) // 2
        if fits(mid):
            fit = mid
        else:
            nofit = mid
    # a longer head may still fit where a prefix's count dipped: check those within the slack, as the
    # official loop would meet them first
    i = nofit
    while i >= 0:
        n = n_of(i)
        if n <= limit:
            fit = i
        elif n > limit + _SLACK:
            break
        i -= 1
    lengths.tokens = counted[fit]
    return fit


class _Candidates:
    """The lengths the official `truncate` loop tries for the head of `text[start:]`, longest first,
    without listing them: the whole rest; then the rest up to each sentence end but the last, from the
    second-to-last down to the first; then up to each comma (or sentence end) before the first sentence
    end but the last one there (or, with fewer than two sentence ends, before the end)."""

    def __init__(self, text: str, start: int, ends: list[int], marks: list[int]) -> None:
        import bisect

        def first(pos: list[int]) -> int:  # the first mark of the rest (a quote at its very start has no
            i = bisect.bisect_left(pos, start)  # punctuation before it there, as in the official code)
            return i + 1 if i < len(pos) and pos[i] == start and text[start] in _QUOTES else i

        self.start, self.total = start, len(text) - start
        self.tokens = 0  # the count of the head chosen (set by `_largest_fitting`)
        self.ends, self.marks = ends, marks
        a, b = first(ends), len(ends)
        self.e_hi, self.e_n = b, max(b - a - 1, 0)  # sentence-end heads: ends[b-2], ..., ends[a]
        ca = first(marks)
        cb = bisect.bisect_right(marks, ends[a]) if b - a >= 2 else len(marks)
        self.m_hi, self.m_n = cb, max(cb - ca - 1, 0)  # comma heads: marks[cb-2], ..., marks[ca]

    def __len__(self) -> int:
        return 1 + self.e_n + self.m_n

    def __getitem__(self, i: int) -> int:
        if i == 0:
            return self.total
        if i <= self.e_n:
            return self.ends[self.e_hi - 1 - i] + 1 - self.start
        return self.marks[self.m_hi - 1 - (i - self.e_n)] + 1 - self.start


def _hard_cut(text: str, start: int, end: int, limit: int, count: TokenCounter) -> int:
    """Length of the longest head of `text[start:end]` within `limit` tokens, moved back to a whitespace when
    there is one (the text is never sliced past the bracket that holds the cut)."""
    lo, hi = 1, end - start
    n = 4 * limit  # the prefix that fits is short: bracket it from the start, not by halving a long text
    while n < hi and count(text[start : start + n]) <= limit:
        lo, n = n, n * 2
    hi = min(hi, n)
    while lo < hi:  # largest n with count(text[:n]) <= limit (token counts grow with prefix length)
        mid = (lo + hi + 1) // 2
        if count(text[start : start + mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    space = text.rfind(" ", start, start + lo)
    return space + 1 - start if space > start else lo


def cut_long(text: str, limit: int, count: TokenCounter, max_chunks: int | None = None) -> tuple[list[str], str]:
    """The official truncate loop on an over-long `text` (chunks cut from its start until the rest fits),
    in time linear in its length: cut points are found once, and only heads near the limit are counted.
    Stops after `max_chunks` chunks. Returns (chunks, the rest)."""
    ends = [m.start() for m in _SENTENCE_ENDS.finditer(text)]
    marks = [m.start() for m in _SENTENCE_OR_COMMA.finditer(text)]
    chunks: list[str] = []
    pos = 0
    per_token = 4.0  # characters per token, from the last chunk: where the next cut is looked for first
    while True:
        lengths = _Candidates(text, pos, ends, marks)
        i = _largest_fitting(lengths, text, pos, limit, count, int(limit * per_token))
        if i is None:  # not even the shortest head fits: cut that head where the limit falls
            end = pos + _hard_cut(text, pos, pos + lengths[len(lengths) - 1], limit, count)
        else:
            end = pos + lengths[i]
        chunks.append(text[pos:end])
        if i is not None:
            per_token = max(1.0, (end - pos) / max(1, lengths.tokens))
        pos = end
        if (max_chunks is not None and len(chunks) >= max_chunks) or not _exceeds(
            text, pos, limit, count, int(limit * per_token * 1.25)
        ):
            return chunks, text[pos:]


def truncate(text: str, limit: int, count: TokenCounter) -> tuple[str, str]:
    """Cut `text` from the end at punctuation until it fits; returns (head, remainder)."""
    if count(text) <= limit:
        return text, ""
    chunks, _ = cut_long(text, limit, count, max_chunks=1)
    return chunks[0], text[len(chunks[0]) :]


def chunk_paragraphs(
    paragraphs: Sequence[str], chunk_tokens: int, tokenizer: TokenizerLike = None, max_chunks: int | None = None
) -> list[str]:
    """Chunks of at most `chunk_tokens` tokens, exactly as the BooookScore chunker draws them; with
    `max_chunks`, only the first that many (the rest of the text is not chunked)."""
    if chunk_tokens < MIN_CHUNK_TOKENS:
        raise DatasetError(f"chunk size {chunk_tokens} is too small: use at least {MIN_CHUNK_TOKENS} tokens")
    count = token_counter(tokenizer)
    paragraphs = [p for p in paragraphs if p]
    if any("\n" in p for p in paragraphs):
        raise DatasetError("paragraphs must not contain newlines: split the text with split_paragraphs() first")
    whole = "\n".join(paragraphs)
    if not _exceeds(whole, 0, chunk_tokens, count):
        return [whole] if whole else []
    chunks: list[str] = []
    current = ""
    for para in paragraphs:
        if max_chunks is not None and len(chunks) >= max_chunks:
            return chunks[:max_chunks]
        candidate = f"{current}\n{para}" if current else para
        if _exceeds(para, 0, chunk_tokens, count):
            left = None if max_chunks is None else max_chunks - len(chunks)
            heads, current = cut_long(candidate, chunk_tokens, count, left)
            chunks += heads
        elif count(candidate) > chunk_tokens:
            chunks.append(current)
            current = para
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks if max_chunks is None else chunks[:max_chunks]


def chunk_text(text: str, chunk_tokens: int, tokenizer: TokenizerLike = None) -> list[str]:
    """`chunk_paragraphs(split_paragraphs(text), ...)`."""
    return chunk_paragraphs(split_paragraphs(text), chunk_tokens, tokenizer)


@dataclass(frozen=True)
class ChunkStats:
    """What `memloop data chunk --json` prints. text_tokens == chunk_tokens means nothing was lost."""

    chunks: int
    max_chunk_tokens: int
    text_tokens: int
    chunk_tokens: int

    def as_dict(self) -> dict[str, int]:
        return {
            "chunks": self.chunks,
            "max_chunk_tokens": self.max_chunk_tokens,
            "text_tokens": self.text_tokens,
            "chunk_tokens": self.chunk_tokens,
        }


def chunk_stats(paragraphs: Sequence[str], chunks: Sequence[str], tokenizer: TokenizerLike = None) -> ChunkStats:
    """Token accounting in the official loss check's terms: both sides with line breaks removed."""
    count = token_counter(tokenizer)
    return ChunkStats(
        chunks=len(chunks),
        max_chunk_tokens=max((count(c) for c in chunks), default=0),
        text_tokens=count("".join(p for p in paragraphs if p)),
        chunk_tokens=count("".join(chunks).replace("\n", "")),
    )
