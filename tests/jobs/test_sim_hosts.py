"""Simulated hosts that stand for named accelerator hosts: the latency model derived from datasheet
figures (`memloop.bench.accelerators.host_latency`), chosen by `memloop bench scale --host/--model-size` and
printed with the table."""

from __future__ import annotations

import pytest
from memloop.bench.accelerators import HOSTS, MODELS, HostModelError, host_latency
from memloop.jobs.errors import ConfigError
from memloop.jobs.sim.replay import Answer, LatencyModel
from memloop.jobs.sim.scale_sim import HostChoice, Recording, context_tokens, host_model, table


def test_a_tpu_v5e_4_serving_an_8b_model() -> None:
    m = LatencyModel.from_dict(host_latency("tpu-v5e-4", "8b", context_tokens=1000, mfu=0.4))
    bw = 4 * 819e9  # four v5e chips' HBM
    assert m.decode_s_base == pytest.approx(8.03e9 * 2 / bw)  # every bf16 weight read once per step: 4.9 ms
    assert 4.8e-3 < m.decode_s_base < 5.0e-3
    kv_per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16: 128 KiB
    assert m.decode_s_per_seq == pytest.approx(kv_per_token * 1000 / bw)
    flops = 2 * 8.03e9 + 4 * 32 * 32 * 128 * 500  # weights, and attention over half the context
    assert m.prefill_s_per_token == pytest.approx(flops / (4 * 197e12 * 0.4))
    assert m.speedup == 1.0 and "tpu-v5e-4" in m.source and "40% MFU" in m.source
    # a bandwidth share below the bound makes decode slower in proportion
    half = host_latency("tpu-v5e-4", "8b", context_tokens=1000, hbm_fraction=0.5)
    assert half["decode_s_base"] == pytest.approx(2 * m.decode_s_base)


def test_unknown_names_and_a_model_too_big_for_the_host_are_named() -> None:
    with pytest.raises(HostModelError, match="unknown host 'tpu-v9'"):
        host_latency("tpu-v9", "8b", context_tokens=100)
    with pytest.raises(HostModelError, match="unknown model size '13b'"):
        host_latency("tpu-v5e-4", "13b", context_tokens=100)
    with pytest.raises(HostModelError, match="pick a larger host"):  # 141 GB of weights over 64 GB of HBM
        host_latency("tpu-v5e-4", "70b", context_tokens=1000)
    assert host_latency("h100-8", "70b", context_tokens=1000)["decode_s_base"] > 0
    assert set(HOSTS) >= {"tpu-v5e-4", "h100-8"} and "8b" in MODELS


def _rec() -> Recording:
    answers = {"a": Answer("x", 900, 100, 200, "stop"), "b": Answer("y", 500, 0, 0, "stop")}
    return Recording("mem://rec", None, answers, 2, 1)  # type: ignore[arg-type]


def test_the_sweep_takes_the_context_from_the_recording_and_prints_the_host() -> None:
    rec = _rec()
    assert context_tokens(rec) == pytest.approx((900 + 100 + 500) / 2)
    m = host_model(rec, HostChoice("tpu-v5e-4", "8b"), print)
    assert m.to_dict() == LatencyModel.from_dict(host_latency("tpu-v5e-4", "8b", context_tokens=750)).to_dict()
    text = table({"label": "SIMULATION", "latency_model": m.to_dict(), "rows": []})
    assert "simulated host: tpu-v5e-4: 4 x TPU v5e" in text and "decode step 4.90 ms + 0.03 ms" in text
    with pytest.raises(ConfigError, match="--host/--model-size: unknown host"):
        host_model(rec, HostChoice("v5e"), print)
    with pytest.raises(ConfigError, match="--latency is the CPU fit's file"):
        host_model(rec, HostChoice(latency_path="/tmp/fit.json"), print)
