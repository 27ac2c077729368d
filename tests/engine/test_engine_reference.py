"""The Flax model against transformers (PyTorch, f32) loading the same GGUF."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from memloop.bench.model import PROMPTS as CHAT_PROMPTS
from memloop.bench.model import hf_greedy
from memloop.engine.model.decoder import forward, no_cache_attention
from memloop.engine.runner.reference import generate
from memloop.engine.sample.sampling import SamplingParams

# Both sides compute in f32 from identical de-quantised weights; only summation order differs
# (XLA vs oneDNN kernels, fused vs unfused softmax). Logits reach |40|; f32 rounding through 30
# layers gives ~1e-4 absolute. 2e-3 leaves room for other CPUs' kernels while a real defect
# (a wrong RoPE layout, a missed permutation, a norm epsilon) moves logits by > 0.1.
LOGIT_TOL = 2e-3


@pytest.fixture(scope="module")
def full_logits(lm):
    fn = jax.jit(lambda p, t, q: forward(p, lm.config, t, q, None, no_cache_attention(q))[0])

    def run(ids):
        # One padded shape for every prompt (one compile); causality keeps padding out of real rows.
        toks = np.zeros((1, 128), np.int32)
        toks[0, : len(ids)] = ids
        return np.asarray(fn(lm.params, jnp.asarray(toks), jnp.arange(128, dtype=jnp.int32)[None]))[0, : len(ids)]

    return run


@pytest.mark.parametrize("index", range(len(CHAT_PROMPTS)))
def test_logits_match_transformers(lm, hf_model, full_logits, index):
    ids = lm.tokenizer.chat_ids(CHAT_PROMPTS[index])
    ours = full_logits(ids)
    with torch.no_grad():
        ref = hf_model(torch.tensor([ids])).logits[0].numpy()
    diff = np.abs(ours - ref).max()
    assert diff < LOGIT_TOL, f"max abs logit diff {diff}"
    assert (ours.argmax(-1) == ref.argmax(-1)).all()


def test_greedy_matches_transformers_short(lm, hf_model):
    ids = lm.tokenizer.chat_ids(CHAT_PROMPTS[0])
    ours = generate(lm, [ids], SamplingParams(max_tokens=24, stop_token_ids=()))[0].token_ids
    assert ours == hf_greedy(hf_model, ids, 24)


@pytest.mark.slow
def test_greedy_200_tokens_match_transformers(lm, hf_model):
    prompts = [lm.tokenizer.chat_ids(m) for m in CHAT_PROMPTS]
    ours = generate(lm, prompts, SamplingParams(max_tokens=200, stop_token_ids=()))
    for ids, g in zip(prompts, ours):
        assert g.token_ids == hf_greedy(hf_model, ids, 200)


def test_chat_template_renders_roles(lm):
    text = lm.tokenizer.chat_text(CHAT_PROMPTS[4])
    assert text.count("<|im_start|>") == 5 and text.endswith("<|im_start|>assistant\n")
    assert "Das Wetter ist heute schön." in text
    assert lm.tokenizer.decode(lm.tokenizer.chat_ids(CHAT_PROMPTS[4]), skip_special_tokens=False) == text
