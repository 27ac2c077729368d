"""The prompt's attention (`prompt_attention`, the reference prefill's): it reads the call's own keys
instead of the cache's slots, and must give what attention over the whole cache gives."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from memloop.engine.model.decoder import contiguous_attention, prompt_attention

B, T, H, KV, HD, S, LAYERS = 2, 8, 4, 2, 16, 32, 3


def _inputs(per_layer: bool) -> tuple:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((B, T, H, HD)).astype(np.float32)
    k = rng.standard_normal((B, T, KV, HD)).astype(np.float32)
    v = rng.standard_normal((B, T, KV, HD)).astype(np.float32)
    # slots past T hold another prompt's keys: they must stay masked, and slots < T are overwritten
    old_k = rng.standard_normal((LAYERS, KV, B, S, HD)).astype(np.float32)
    old_v = rng.standard_normal((LAYERS, KV, B, S, HD)).astype(np.float32)
    cache = {"k": list(old_k), "v": list(old_v)} if per_layer else {"k": old_k, "v": old_v}
    return q, k, v, jax.tree.map(jax.numpy.asarray, cache)


@pytest.mark.parametrize("per_layer", [False, True])
@pytest.mark.parametrize(("window", "softcap"), [(None, None), (3, None), (None, 5.0)])
def test_prompt_attention_equals_attention_over_the_whole_cache(per_layer, window, softcap):
    q, k, v, cache = _inputs(per_layer)
    positions = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    extra = {k_: v_ for k_, v_ in (("window", window), ("softcap", softcap)) if v_ is not None}
    want, want_cache = contiguous_attention(positions)(q, k, v, cache, 1, **extra)
    got, got_cache = prompt_attention(positions)(q, k, v, cache, 1, **extra)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
    for name in ("k", "v"):
        for layer in range(LAYERS):
            np.testing.assert_array_equal(np.asarray(got_cache[name][layer]), np.asarray(want_cache[name][layer]))
