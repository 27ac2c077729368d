"""Weight-only int8 (memloop.engine.model.quantize): what the blocks keep, and greedy output on the bundled model."""

from __future__ import annotations

import numpy as np
import pytest
from memloop.engine.errors import RequestError
from memloop.engine.model.quantize import int8_blocks, quantize_layers


def _dequant(b):
    q, d, m = b["q"], b["d"], b["m"]
    return (q.astype(np.float32).reshape(*q.shape[:-1], -1, 32) * d[..., None] + m[..., None]).reshape(q.shape)


def test_gguf_4bit_levels_land_on_codes():
    """Q4_1-style blocks (16 levels d*k + m) come back to float rounding: 255 = 15 x 17 steps."""
    r = np.random.default_rng(0)
    d = r.uniform(0.001, 0.05, (6, 4, 1)).astype(np.float32)
    m = r.uniform(-0.5, 0.0, (6, 4, 1)).astype(np.float32)
    k = r.integers(0, 16, (6, 4, 32))
    k[..., 0], k[..., 1] = 0, 15  # each block spans its full range, as a quantiser's blocks do
    w = (d * k + m).reshape(6, 128)
    assert np.abs(_dequant(int8_blocks(w)) - w).max() < 1e-6


def test_error_is_at_most_half_a_step_and_shapes_keep():
    w = np.random.default_rng(1).standard_normal((2, 8, 64)).astype(np.float32)  # [layers, out, in]
    b = int8_blocks(w)
    assert b["q"].shape == w.shape and b["q"].dtype == np.int8 and b["d"].shape == b["m"].shape == (2, 8, 2)
    step = np.repeat(b["d"], 32, axis=-1)
    assert (np.abs(_dequant(b) - w) <= step / 2 + 1e-6).all()
    assert np.abs(_dequant(b) - w).max() > 0  # random weights are approximated, not kept


def test_bad_inputs_are_named():
    with pytest.raises(RequestError, match="blocks of 32"):
        int8_blocks(np.zeros((4, 40), np.float32))
    with pytest.raises(RequestError, match="int8"):
        quantize_layers({}, "int4")


@pytest.mark.slow
def test_int8_keeps_greedy_output(smollm2_gguf):
    """On the bundled Q4_1 SmolLM2 the int8 model decodes dense f32's greedy tokens on the test prompts."""
    from memloop.bench.model import PROMPTS
    from memloop.engine.model.decoder import load_model
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams

    s = SamplingParams(max_tokens=24)
    dense = load_model(smollm2_gguf, blocks=False)
    int8 = load_model(smollm2_gguf, quantize="int8")
    assert set(int8.params["layers"][0]["wq"]) == {"q", "d", "m"}
    want = [g.token_ids for g in generate(dense, PROMPTS, s)]
    assert [g.token_ids for g in generate(int8, PROMPTS, s)] == want
