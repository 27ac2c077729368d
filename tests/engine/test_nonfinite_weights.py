"""NaN weights never go unnoticed: a tensor holding non-finite values is refused at load, naming the
tensor, whichever form it loads in; and a model whose logits overflow at run time fails the request
with an engine error rather than answering an empty completion.

The files are copies of the bundled SmolLM2 GGUF with bytes overwritten, as a bad download or disk
would leave them: 8 MB of 0xFF in the embedding (Q8_0) or a layer matrix's bytes (Q4_1), whose f16
scales then read as NaN; and a final norm of 3e38 (finite, so it loads) that overflows the logits.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from memloop.engine.errors import ModelFormatError, NonFiniteLogitsError


def _tensor(path: Path, name: str):
    import gguf

    return next(t for t in gguf.GGUFReader(path).tensors if t.name == name)


def _overwrite(src: Path, dst: Path, name: str, data: bytes | None = None, limit: int = 8 << 20) -> Path:
    """A copy of `src` with tensor `name`'s first bytes (up to `limit`) replaced by `data` (0xFF by default)."""
    shutil.copyfile(src, dst)
    t = _tensor(src, name)
    n = min(int(t.n_bytes), limit)
    with dst.open("r+b") as f:
        f.seek(int(t.data_offset))
        f.write(data if data is not None else b"\xff" * n)
    return dst


@pytest.mark.parametrize(
    "form, name",
    [("dense", "token_embd.weight"), ("packed", "blk.0.ffn_gate.weight"), ("blocks", "blk.0.ffn_gate.weight")],
)
def test_a_tensor_of_0xff_bytes_is_refused_at_load_naming_it(smollm2_gguf, tmp_path, name, form) -> None:
    from memloop.engine.model.weights import load_weights

    bad = _overwrite(smollm2_gguf, tmp_path / "ff.gguf", name)
    with pytest.raises(ModelFormatError, match=rf"tensor {name} in .* non-finite|tensor {name} in .* not finite"):
        load_weights(bad, packed=form == "packed", blocks=form == "blocks")


def test_block_scales_are_checked_without_dequantising() -> None:
    from memloop.engine.model.blocks import BLOCK_BYTES, nonfinite_blocks

    raw = np.zeros((4, 2 * BLOCK_BYTES["Q6_K"]), np.uint8)  # 4 rows of 2 Q6_K super-blocks, all scales 0
    assert nonfinite_blocks(raw, "Q6_K") == 0
    raw[1, BLOCK_BYTES["Q6_K"] + 208 : BLOCK_BYTES["Q6_K"] + 210] = 0xFF  # row 1's second block: its d is NaN
    raw[3, 0:2] = 0xFF  # a code byte, not a scale: still finite
    assert nonfinite_blocks(raw, "Q6_K") == 1


@pytest.mark.slow
def test_logits_that_overflow_fail_the_request_with_an_engine_error(smollm2_gguf, tmp_path) -> None:
    """Before, the request answered 200 with empty content (argmax over NaN picks token 0)."""
    from memloop.engine.core.engine import Engine, EngineConfig
    from memloop.engine.model.decoder import load_model

    norm = _tensor(smollm2_gguf, "output_norm.weight")
    huge = np.full(int(norm.n_elements), 3e38, np.float32).tobytes()
    path = _overwrite(smollm2_gguf, tmp_path / "overflow.gguf", "output_norm.weight", huge)
    eng = Engine(EngineConfig(num_pages=64, page_size=16, max_batch=2, prefill_chunk=64), model=load_model(path))
    try:
        for sampling in ({"max_tokens": 3, "temperature": 0.0}, {"max_tokens": 3, "temperature": 0.8, "top_k": 5}):
            with pytest.raises(NonFiniteLogitsError, match="hold NaN or infinity"):
                eng.complete({"prompt": "One, two,", "sampling": sampling}, timeout=300)
        stats = eng.stats()
        assert stats["failed_requests"] == 2 and stats["requests"] == 0 and stats["running"] == 0
        # through `memloop serve`: an engine error (500), not 200 with empty content and logprob null
        import httpx
        from memloop.engine.serve.server import create_app

        from tests.http_server import serve_app

        with serve_app(create_app(eng, "smollm2")) as url:
            r = httpx.post(
                f"{url}/v1/chat/completions",
                timeout=300,
                json={
                    "model": "smollm2",
                    "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": 3,
                    "logprobs": True,
                },
            )
        assert r.status_code == 500 and r.json()["error"]["type"] == "engine_error"
        assert "hold NaN or infinity" in r.json()["error"]["message"]
    finally:
        eng.shutdown()
