"""A GGUF tokenizer as transformers 5.17 converts it (byte-fallback decoder on a byte-level BPE, the BOS token
taken for EOS) is repaired to what the GGUF file says, so llguidance reads its tokens' bytes right."""

from __future__ import annotations

import llguidance.hf
from memloop.engine.model.tokenizer import _repair, load_tokenizer
from tokenizers import decoders


def _as_transformers_5_17_converts_it(hf) -> None:
    backend = hf.backend_tokenizer
    backend.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("▁", " "), decoders.ByteLevel()]
    )
    backend.model.byte_fallback = True
    hf.eos_token = hf.bos_token


def test_a_byte_level_vocabulary_converted_with_byte_fallback_is_repaired(smollm2_gguf):
    hf = load_tokenizer(smollm2_gguf).hf
    space = hf.convert_tokens_to_ids("Ġ")
    _as_transformers_5_17_converts_it(hf)
    assert llguidance.hf.from_tokenizer(hf, n_vocab=len(hf)).decode_bytes([space]) == "Ġ".encode()  # the break
    _repair(hf, smollm2_gguf)
    assert type(hf.backend_tokenizer.decoder).__name__ == "ByteLevel" and not hf.backend_tokenizer.model.byte_fallback
    assert hf.eos_token == "<|im_end|>" and hf.bos_token == "<|im_start|>"  # the GGUF's own ids (2 and 1)
    assert llguidance.hf.from_tokenizer(hf, n_vocab=len(hf)).decode_bytes([space]) == b" "
    assert hf.decode(hf.encode('{"a": 1}', add_special_tokens=False)) == '{"a": 1}'
