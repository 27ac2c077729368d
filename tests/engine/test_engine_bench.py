"""The model benchmark's arithmetic: multiply-adds per token and the compute ceiling it reports."""

from __future__ import annotations

import math

import pytest
from memloop.bench.accelerators import (
    decode_hbm_fraction,
    decode_keys,
    device_spec,
    kv_bytes,
    macs_per_token,
    prefill_flops,
    prefill_mfu,
    this_accelerator,
    weight_bytes,
)


def _matrix_weights(lm) -> int:
    """Weights of every matrix a decoded token multiplies by: layer matrices and the output head."""
    total = 0
    for layer in lm.params["layers"]:
        for key in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"):
            w = layer[key]
            total += w.shape[0] * w.shape[1]
    head = lm.params.get("lm_head", lm.params["embed"])
    return total + head.shape[0] * head.shape[1]


def test_macs_per_token_counts_every_matrix(lm):
    assert macs_per_token(lm) == _matrix_weights(lm)
    assert 130e6 < macs_per_token(lm) < 140e6  # SmolLM2-135M: 106M in layers + 28M tied head


@pytest.mark.slow
def test_served_decode_rate_with_the_gather_path(lm):
    """The gather-path peer is a real served decode, through the engine's `attention: gather` backend."""
    from memloop.bench.model import served_decode

    out = served_decode(lm, 64, 3, gather=True)
    assert out.tokens_per_s > 0 and out.text


def test_served_prefill_times_a_prompt_the_prefix_cache_misses(lm):
    """bench model's `served_prefill_tps`: the serving engine prefills the whole prompt each timed
    request (a different first token each time), never a cached copy of the one before."""
    from memloop.bench.model import served_prefill

    ids = lm.tokenizer.encode("The river town kept its records in a ledger by the mill. " * 6)
    rate, cached = served_prefill(lm, ids, repeat=2)
    assert cached == 0 and rate > 0


# ------------------------------------------------------------------ accelerator figures (bench/accelerators.py)


@pytest.mark.parametrize(
    "kind,name",
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("NVIDIA H200", "NVIDIA H200"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"),
        ("NVIDIA L4", "NVIDIA L4"),
        ("TPU v5 lite", "TPU v5e"),
        ("TPU v5", "TPU v5p"),
        ("TPU v4", "TPU v4"),
        ("TPU v6 lite", "TPU v6e"),
    ],
)
def test_known_devices_by_their_jax_device_kind(kind, name):
    spec = device_spec(kind)
    assert spec is not None and spec.name == name
    assert 1e11 < spec.hbm_bytes_per_s < 1e13 and 1e14 < spec.peak_bf16_flops < 2e15


def test_no_accelerator_on_cpu():
    assert device_spec("cpu") is None and device_spec("NVIDIA GeForce GTX 1080") is None
    assert this_accelerator(log=lambda _: None) is None  # the test host is CPU


def test_figures_count_weights_kv_and_flops(lm):
    spec = device_spec("TPU v5 lite")
    assert weight_bytes(lm) > 4 * 130e6 * 0.1  # every parameter array (block form or dense)
    cfg = lm.config
    assert kv_bytes(lm, 10) == 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4 * 10  # f32 cache
    assert decode_keys([5, 7], 3) == sum(p + j + 1 for p in (5, 7) for j in range(3))
    # one second for one step reading only the weights: the fraction is weight bytes / bandwidth
    assert math.isclose(decode_hbm_fraction(lm, spec, 1, 0, 1.0), weight_bytes(lm) / spec.hbm_bytes_per_s)
    assert prefill_flops(lm, 1) == 2 * macs_per_token(lm) + 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * 2
    assert math.isclose(prefill_mfu(lm, spec, 512, 2.0), prefill_flops(lm, 512) / 2.0 / spec.peak_bf16_flops)


def test_f64_reference_measures_both_f32_engines_against_the_exact_logits(lm, hf_model):
    """memloop's f32 logits and transformers' are each compared with transformers in float64; the
    two f32 answers differ from it by summation order only, far below a logit's size."""
    import jax.numpy as jnp
    import numpy as np
    import torch
    from memloop.bench.model import f64_agreement
    from memloop.engine.model.decoder import forward, no_cache_attention

    ids = [lm.tokenizer.chat_ids([{"role": "user", "content": "What is the capital of France?"}])]
    q = jnp.arange(len(ids[0]))[None]
    ours = [np.asarray(forward(lm.params, lm.config, jnp.asarray(ids), q, None, no_cache_attention(q))[0])[0]]
    with torch.no_grad():
        ref = [hf_model(torch.tensor(ids)).logits[0].numpy()]
    lines: list[str] = []
    out = f64_agreement(hf_model, ids, ours, ref, lines.append)
    assert 0 < out["max_abs_logit_diff_vs_f64"] < 1e-3
    assert 0 < out["hf_max_abs_logit_diff_vs_f64"] < 1e-3
    assert out["hf_max_abs_logit_diff_vs_f64"] != out["max_abs_logit_diff_vs_f64"]
    assert "float64" in lines[0]
    assert next(hf_model.parameters()).dtype == torch.float32  # the reference itself is left in f32


@pytest.mark.slow  # a real engine measured at batch 1 (about 40 s on 2 cores)
def test_a_bench_result_records_the_weight_path_it_ran(lm):
    """Kernel or dense, and the ISA the kernels were built for: a figure says which engine it measured."""
    from memloop.bench.engine_latency import measure
    from memloop.jobs.sim.replay import LatencyModel

    from tests.engine.kernel_gate import kernels_expected

    fit = measure(["The keeper lit the lamp."], batches=(1,), decode_tokens=2, log=lambda _: None)
    if kernels_expected():
        from memloop.engine import kernels

        assert (fit["weight_path"], fit["kernel_isa"]) == ("kernel", kernels.isa())
    else:
        assert (fit["weight_path"], fit["kernel_isa"]) == ("dense", None)
    assert (fit["weight_path"], fit["kernel_isa"]) == (lm.weight_path["weights"], lm.weight_path["isa"])
    assert LatencyModel.from_dict(fit).max_batch == fit["max_batch"]  # the notes do not break the fit's reader
