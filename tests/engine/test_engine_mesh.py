"""Tensor-parallel layout over 4 simulated CPU devices equals the single-device model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine.model.decoder import LoadedModel, forward, no_cache_attention
from memloop.engine.model.mesh import make_mesh, param_specs, shard_params
from memloop.engine.runner.reference import generate
from memloop.engine.sample.sampling import SamplingParams

pytestmark = pytest.mark.skipif(
    len(jax.devices()) < 4, reason="needs XLA_FLAGS=--xla_force_host_platform_device_count=4"
)


@pytest.fixture(scope="module")
def lm(smollm2_gguf):
    """Dense weights: block-form matrices are for the single-device CPU kernel (shard_params refuses them)."""
    from memloop.engine.model.decoder import load_model

    return load_model(smollm2_gguf, blocks=False)


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(4)


@pytest.fixture(scope="module")
def sharded(lm, mesh):
    return shard_params(lm.params, lm.config, mesh)


def test_layout_splits_what_divides(lm, mesh, sharded):
    specs = param_specs(lm.config, mesh, False)
    assert specs["layers"]["w_gate"][1] == "tp" and specs["embed"][0] == "tp"  # [L, out, in]
    assert specs["layers"]["wq"][1] is None  # 9 heads do not split over 4 devices
    layers = sharded["layers"]
    if isinstance(layers, list):  # per-layer weights (CPU default): each layer's own spec
        assert len(layers) == 30
        gate = layers[7]["w_gate"]
        assert gate.addressable_shards[0].data.shape == (1536 // 4, 576)
    else:
        gate = layers["w_gate"]
        assert gate.addressable_shards[0].data.shape == (30, 1536 // 4, 576)
    assert len(gate.sharding.device_set) == 4


def test_sharded_forward_equals_single_device(lm, mesh, sharded):
    ids = lm.tokenizer.chat_ids([{"role": "user", "content": "Describe a lighthouse in one sentence."}])
    toks = jnp.asarray([ids], jnp.int32)
    pos = jnp.arange(len(ids), dtype=jnp.int32)[None]
    fn = jax.jit(lambda p, t, q: forward(p, lm.config, t, q, None, no_cache_attention(q))[0])
    single = np.asarray(fn(lm.params, toks, pos))
    with jax.set_mesh(mesh):
        out = fn(sharded, toks, pos)
    assert len(out.sharding.device_set) == 4
    multi = np.asarray(out)
    assert np.abs(single - multi).max() < 2e-3  # only the all-reduce's summation order differs
    assert (single.argmax(-1) == multi.argmax(-1)).all()


def test_sharded_generate_equals_single_device(lm, mesh, sharded):
    prompts = [[{"role": "user", "content": "Name three colors."}]]
    s = SamplingParams(max_tokens=12)
    tp = LoadedModel(
        config=lm.config,
        module=lm.module,
        params=sharded,
        tokenizer=lm.tokenizer,
        dtype=lm.dtype,
        path=lm.path,
        mesh=mesh,
    )
    assert generate(tp, prompts, s)[0].token_ids == generate(lm, prompts, s)[0].token_ids
