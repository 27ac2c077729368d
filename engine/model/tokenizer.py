"""Tokenizer and chat template, from the GGUF metadata or a Hugging Face directory, via transformers.

Building a fast tokenizer from GGUF metadata takes seconds (transformers converts the vocabulary
and merges), so the converted tokenizer is saved once under `~/.cache/memloop/tokenizers/<key>`
(override the root with MEMLOOP_CACHE) keyed by the GGUF file's size, mtime and first megabyte, and
loaded from there afterwards. `Tokenizer.chat_ids` is the one chat-template path the engine uses.

transformers' GGUF conversion differs between releases: 5.17 builds a byte-level BPE vocabulary (GGUF
`tokenizer.ggml.model: gpt2`, SmolLM2's and Qwen's) with SentencePiece's byte-fallback decoder and takes
the BOS token for the EOS token, where 5.24 builds the byte-level one. llguidance then reads "Ġ" as two
UTF-8 bytes instead of a space, and constrained decoding rejects its own JSON. `_repair` makes the
converted tokenizer what the GGUF file says, whatever the release (`CONVERSION` salts the cache key, so
a tokenizer an older memloop converted is converted again).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from memloop.engine.assets import cache_root
from memloop.engine.errors import ModelFormatError, ModelNotFoundError, RequestError


class Tokenizer:
    """A thin wrapper over a transformers fast tokenizer with the engine's conventions."""

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        if not getattr(hf, "chat_template", None):
            self.chat_template = None
        else:
            self.chat_template = hf.chat_template
        self.eos_token_id: int | None = hf.eos_token_id
        self.bos_token_id: int | None = hf.bos_token_id
        # Whether the checkpoint's tokenizer starts a text with BOS (GGUF `tokenizer.ggml.add_bos_token`,
        # tokenizer_config.json `add_bos_token`): Gemma does and needs it; Qwen and SmolLM2 do not.
        # Asked of its behaviour, not the attribute: a saved-and-reloaded fast tokenizer keeps the BOS in
        # its post-processor but reports add_bos_token False.
        probe = list(hf.encode("a", add_special_tokens=True))
        self.add_bos: bool = (
            hf.bos_token_id is not None
            and bool(probe)
            and probe[0] == hf.bos_token_id
            and probe[1:] == list(hf.encode("a", add_special_tokens=False))
        )
        self.pad_token_id: int = hf.pad_token_id if hf.pad_token_id is not None else (hf.eos_token_id or 0)
        self.vocab_size = len(hf)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Tokens that end a turn: EOS plus the chat template's end-of-turn marker if it is a single token."""
        ids = {self.eos_token_id} if self.eos_token_id is not None else set()
        for marker in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
            tid = self.hf.convert_tokens_to_ids(marker)
            if isinstance(tid, int) and tid != self.hf.unk_token_id and tid is not None and tid >= 0:
                ids.add(tid)
        return tuple(sorted(ids))

    def encode(self, text: str) -> list[int]:
        """Raw text to ids, without special tokens added (token counts, pieces of a prompt)."""
        return list(self.hf.encode(text, add_special_tokens=False))

    def prompt_ids(self, text: str) -> list[int]:
        """A completion prompt's ids: the text, after BOS where the checkpoint's tokenizer adds one
        (chat prompts get theirs from the chat template)."""
        ids = self.encode(text)
        return [self.bos_token_id, *ids] if self.add_bos and self.bos_token_id is not None else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def chat_ids(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """Render messages with the model's chat template and tokenize (the one chat path)."""
        if self.chat_template is None:
            raise RequestError("this model has no chat template; send a raw `prompt` instead of `messages`.")
        for m in messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise RequestError(f"each chat message needs 'role' and 'content'; got {m!r}.")
        text = self.chat_text(messages, add_generation_prompt)
        return list(self.hf.encode(text, add_special_tokens=False))

    def chat_text(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.hf.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))


CONVERSION = 2  # bump when `_from_gguf` changes what it saves


def _gguf_key(path: Path) -> str:
    st = path.stat()
    h = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{CONVERSION}".encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
    return h.hexdigest()[:24]


def _from_gguf(path: Path) -> Any:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    target = cache_root() / "tokenizers" / _gguf_key(path)
    if (target / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(target))
    try:
        hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as exc:
        raise ModelFormatError(f"cannot build a tokenizer from {path} ({type(exc).__name__}: {exc}).") from exc
    _repair(hf, path)
    # Save to a temporary sibling then rename, so a concurrent reader never sees half a directory.
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        hf.save_pretrained(str(tmp))
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process won the race; its copy is identical
    return hf


def _repair(hf: Any, path: Path) -> None:
    """Make a tokenizer transformers converted from `path` match the GGUF's own description: a byte-level BPE
    (`gpt2`) vocabulary decodes byte-level with no byte fallback, and EOS/BOS are the GGUF's token ids."""
    from memloop.engine.model.weights import read_gguf_metadata
    from tokenizers import decoders

    meta = read_gguf_metadata(path)
    backend = hf.backend_tokenizer
    if meta.get("tokenizer.ggml.model") == "gpt2":
        if type(backend.decoder).__name__ != "ByteLevel":
            backend.decoder = decoders.ByteLevel()
        if getattr(backend.model, "byte_fallback", False):
            backend.model.byte_fallback = False
    for role in ("eos", "bos"):
        tid = meta.get(f"tokenizer.ggml.{role}_token_id")
        if isinstance(tid, int) and 0 <= tid < len(hf) and getattr(hf, f"{role}_token_id") != tid:
            setattr(hf, f"{role}_token", hf.convert_ids_to_tokens(tid))


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Tokenizer for a GGUF file, a Hugging Face directory or a short model name (memloop.engine.assets.MODELS)."""
    from memloop.engine.assets import resolve_model
    from transformers import AutoTokenizer

    path = resolve_model(path)
    if not path.exists():
        raise ModelNotFoundError(f"{path} does not exist; cannot load its tokenizer.")
    if path.is_dir():
        try:
            return Tokenizer(AutoTokenizer.from_pretrained(str(path)))
        except Exception as exc:
            raise ModelFormatError(f"cannot load the tokenizer in {path} ({type(exc).__name__}: {exc}).") from exc
    return Tokenizer(_from_gguf(path))
