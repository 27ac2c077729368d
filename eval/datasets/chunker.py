"""The BooookScore chunker (Chang et al., 2024), reproduced boundary for boundary.

Algorithm (of the official release's `chunk.py`, restated):
1. the document is split on newlines and empty lines are dropped: each line is a paragraph;
2. if the whole document (paragraphs joined by newlines) fits, it is one chunk;
3. otherwise paragraphs are packed greedily, joined by a newline, while the chunk stays within the limit;
4. a paragraph that alone exceeds the limit is appended to the current chunk and the result is cut
   repeatedly: each step drops everything after the second-to-last sentence end ('.', '?', '!',
   or a quote right after one of them), falling back to commas when fewer than two sentence ends
   remain; each cut-off head becomes a chunk and the remainder carries into the next chunk.

One departure, made so that no text is ever lost and no chunk ever exceeds the limit: where the
official code finds fewer than two cut points even with commas it keeps the over-long text and
drops the remainder; here the text is cut at the last whitespace (or character) that fits instead.
Counting with the same tokenizer, the chunks therefore always satisfy
`"".join(chunks).replace("\\n", "") == "".join(paragraphs)`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from eval.datasets.errors import DatasetError
from eval.tokens import TokenCounter, TokenizerLike, token_counter

MIN_CHUNK_TOKENS = 8  # a single character is at most 4 byte-level BPE tokens; below this cuts cannot progress

_SENTENCE_ENDS = re.compile(r"""[.?!]|(?<=[.?!])["']""")
_SENTENCE_OR_COMMA = re.compile(r"""[.?!,]|(?<=[.?!])["']""")


def split_paragraphs(text: str) -> list[str]:
    """Lines of `text` with empty ones dropped (the official chunker's notion of a paragraph)."""
    return [line for line in text.split("\n") if line]


def _last_two(pattern: re.Pattern[str], text: str) -> list[int]:
    positions = [m.start() for m in pattern.finditer(text)]
    return positions[-2:]


def _hard_cut(text: str, limit: int, count: TokenCounter) -> int:
    """Length of the longest prefix within `limit` tokens, moved back to a whitespace when there is one."""
    lo, hi = 1, len(text)
    while lo < hi:  # largest n with count(text[:n]) <= limit (token counts grow with prefix length)
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    space = text.rfind(" ", 0, lo)
    return space + 1 if space > 0 else lo


def truncate(text: str, limit: int, count: TokenCounter) -> tuple[str, str]:
    """Cut `text` from the end at punctuation until it fits; returns (head, remainder)."""
    head = text
    while count(head) > limit:
        cuts = _last_two(_SENTENCE_ENDS, head)
        if len(cuts) < 2:
            cuts = _last_two(_SENTENCE_OR_COMMA, head)
        if len(cuts) < 2:
            head = head[: _hard_cut(head, limit, count)]
            break
        head = head[: cuts[0] + 1]
    return head, text[len(head):]


def chunk_paragraphs(paragraphs: Sequence[str], chunk_tokens: int, tokenizer: TokenizerLike = None) -> list[str]:
    """Chunks of at most `chunk_tokens` tokens, exactly as the BooookScore chunker draws them."""
    if chunk_tokens < MIN_CHUNK_TOKENS:
        raise DatasetError(f"chunk size {chunk_tokens} is too small: use at least {MIN_CHUNK_TOKENS} tokens")
    count = token_counter(tokenizer)
    paragraphs = [p for p in paragraphs if p]
    if any("\n" in p for p in paragraphs):
        raise DatasetError("paragraphs must not contain newlines: split the text with split_paragraphs() first")
    whole = "\n".join(paragraphs)
    if count(whole) <= chunk_tokens:
        return [whole] if whole else []
    chunks: list[str] = []
    current = ""
    for para in paragraphs:
        candidate = f"{current}\n{para}" if current else para
        if count(para) > chunk_tokens:
            head, rest = truncate(candidate, chunk_tokens, count)
            chunks.append(head)
            while count(rest) > chunk_tokens:
                head, rest = truncate(rest, chunk_tokens, count)
                chunks.append(head)
            current = rest
        elif count(candidate) > chunk_tokens:
            chunks.append(current)
            current = para
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks


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
        return {"chunks": self.chunks, "max_chunk_tokens": self.max_chunk_tokens,
                "text_tokens": self.text_tokens, "chunk_tokens": self.chunk_tokens}


def chunk_stats(paragraphs: Sequence[str], chunks: Sequence[str], tokenizer: TokenizerLike = None) -> ChunkStats:
    """Token accounting in the official loss check's terms: both sides with line breaks removed."""
    count = token_counter(tokenizer)
    return ChunkStats(
        chunks=len(chunks),
        max_chunk_tokens=max((count(c) for c in chunks), default=0),
        text_tokens=count("".join(p for p in paragraphs if p)),
        chunk_tokens=count("".join(chunks).replace("\n", "")),
    )
