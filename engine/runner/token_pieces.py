"""Output tokens as the pieces a log-probability answer names: each token's text, its exact bytes and
its character offset in the returned text.

A token can hold part of a UTF-8 character (byte-level BPE splits emoji and accented letters), so a
token's text alone cannot rebuild the output: `bytes` are the token's own bytes (from the
tokenizer's byte alphabet, or a `<0xHH>` byte-fallback piece), `token` is their UTF-8 decoding with
U+FFFD for an incomplete character, and `text_offset` is the character of the returned text where
the token starts (an incomplete character is counted once it is complete). Special tokens (end of
turn, BOS) are left out of the returned text, so they take no characters.
"""

from __future__ import annotations

import codecs
import re
from typing import Any, Sequence

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenPieces:
    """Token id -> (text, bytes) for one Hugging Face tokenizer; pieces are cached (the vocabulary bounds them)."""

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        self.special = frozenset(hf.all_special_ids)
        self._byte_of: dict[str, int] | None = None
        if type(getattr(hf.backend_tokenizer, "decoder", None)).__name__ == "ByteLevel":
            from transformers.convert_slow_tokenizer import bytes_to_unicode

            self._byte_of = {ch: b for b, ch in bytes_to_unicode().items()}
        self._cache: dict[int, bytes] = {}

    def bytes_of(self, token_id: int) -> bytes:
        raw = self._cache.get(token_id)
        if raw is None:
            raw = self._cache[token_id] = self._bytes(token_id)
        return raw

    def _bytes(self, token_id: int) -> bytes:
        piece = self.hf.convert_ids_to_tokens(token_id)
        if token_id in self.special or not isinstance(piece, str):
            return (piece if isinstance(piece, str) else self.hf.decode([token_id])).encode("utf-8")
        if self._byte_of is not None and all(ch in self._byte_of for ch in piece):
            return bytes(self._byte_of[ch] for ch in piece)
        byte = _BYTE_PIECE.fullmatch(piece)
        if byte:  # SentencePiece byte fallback
            return bytes([int(byte.group(1), 16)])
        if piece.startswith("▁") or "▁" in piece:  # SentencePiece word boundary
            return piece.replace("▁", " ").encode("utf-8")
        return self.hf.decode([token_id], skip_special_tokens=False).encode("utf-8")

    def text_of(self, token_id: int) -> str:
        return self.bytes_of(token_id).decode("utf-8", errors="replace")

    def entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        return {
            "id": int(token_id),
            "token": self.text_of(token_id),
            "bytes": list(self.bytes_of(token_id)),
            "logprob": float(logprob),
        }

    def entries(
        self, ids: Sequence[int], picked: Sequence[tuple[float, Sequence[tuple[int, float]]]], cut: int | None = None
    ) -> list[dict[str, Any]]:
        """One entry per token of `ids`, {id, token, bytes, logprob, text_offset, top_logprobs: [{id,
        token, bytes, logprob}]}, where `picked[i]` is token i's (log-probability, [(id,
        log-probability)]). `cut`: the length of the returned text when a stop string ended it (the
        tokens starting at or after it are left out; the last one kept may run past it)."""
        stream, out = EntryStream(self), []
        for tid, (logprob, top) in zip(ids, picked):
            if cut is not None and stream.offset >= cut:
                break
            out.append(stream.add(tid, logprob, top))
        return out


class EntryStream:
    """`TokenPieces.entries` one token at a time (a streamed answer's log-probabilities): the same
    entries, with the same character offsets."""

    def __init__(self, pieces: TokenPieces) -> None:
        self.pieces = pieces
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.offset = 0  # characters of the returned text before the next token

    def add(self, token_id: int, logprob: float, top: Sequence[tuple[int, float]]) -> dict[str, Any]:
        entry = self.pieces.entry(token_id, logprob)
        entry["text_offset"] = self.offset
        entry["top_logprobs"] = [self.pieces.entry(t, lp) for t, lp in top]
        if token_id not in self.pieces.special:
            self.offset += len(self.decoder.decode(self.pieces.bytes_of(token_id)))
        return entry
