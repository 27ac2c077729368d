"""Accelerator figures of the benchmarks: decode's fraction of the HBM-bandwidth bound and prefill MFU.

    decode_hbm_fraction = (weight bytes + KV bytes a decode step must read) / step seconds / HBM bytes/s
    prefill_mfu         = model FLOPs of the prompt tokens / prefill seconds / peak bf16 FLOP/s

Both need the device's HBM bandwidth and peak bf16 rate, from the table below (per JAX device: one
GPU, one TPU chip). On CPU, or on a device the table does not know, the figures are null and so is
`accelerator` (an unknown accelerator is named in the log line, so it can be added).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    hbm_bytes_per_s: float
    peak_bf16_flops: float  # dense (no structured sparsity)


# (substrings that must all occur in jax's lower-cased `device_kind`, spec); the first match wins.
DEVICES: tuple[tuple[tuple[str, ...], DeviceSpec], ...] = (
    # NVIDIA H200 datasheet (SXM): 4.8 TB/s HBM3e, 989 TFLOPS BF16 dense (1,979 with sparsity)
    (("h200",), DeviceSpec("NVIDIA H200", 4.8e12, 989e12)),
    # NVIDIA H100 datasheet: PCIe 2.0 TB/s, 756 TFLOPS BF16 dense; NVL 3.9 TB/s, 835; SXM 3.35 TB/s, 989
    (("h100", "pcie"), DeviceSpec("NVIDIA H100 PCIe", 2.0e12, 756e12)),
    (("h100", "nvl"), DeviceSpec("NVIDIA H100 NVL", 3.9e12, 835e12)),
    (("h100",), DeviceSpec("NVIDIA H100 SXM", 3.35e12, 989e12)),
    # NVIDIA A100 datasheet: 40GB 1,555 GB/s, 80GB PCIe 1,935 GB/s, 80GB SXM 2,039 GB/s; 312 TFLOPS BF16 dense
    (("a100", "40gb"), DeviceSpec("NVIDIA A100 40GB", 1.555e12, 312e12)),
    (("a100", "pcie"), DeviceSpec("NVIDIA A100 80GB PCIe", 1.935e12, 312e12)),
    (("a100",), DeviceSpec("NVIDIA A100 80GB SXM", 2.039e12, 312e12)),
    # NVIDIA L4 datasheet: 300 GB/s GDDR6, 121 TFLOPS BF16 dense (242 with sparsity)
    (("l4",), DeviceSpec("NVIDIA L4", 300e9, 121e12)),
    # cloud.google.com/tpu/docs/v6e: 1,640 GB/s HBM, 918 TFLOPS BF16 per chip (device_kind "TPU v6 lite")
    (("v6",), DeviceSpec("TPU v6e", 1.64e12, 918e12)),
    # cloud.google.com/tpu/docs/v5e: 819 GB/s HBM, 197 TFLOPS BF16 per chip (device_kind "TPU v5 lite")
    (("v5 lite",), DeviceSpec("TPU v5e", 819e9, 197e12)),
    (("v5e",), DeviceSpec("TPU v5e", 819e9, 197e12)),
    # cloud.google.com/tpu/docs/v5p: 2,765 GB/s HBM, 459 TFLOPS BF16 per chip (device_kind "TPU v5")
    (("tpu v5",), DeviceSpec("TPU v5p", 2.765e12, 459e12)),
    # cloud.google.com/tpu/docs/v4: 1,200 GB/s HBM, 275 TFLOPS BF16 per chip
    (("tpu v4",), DeviceSpec("TPU v4", 1.2e12, 275e12)),
)


def device_spec(device_kind: str) -> DeviceSpec | None:
    kind = device_kind.lower()
    return next((spec for needles, spec in DEVICES if all(n in kind for n in needles)), None)


def this_accelerator(log: Callable[[str], None] = print) -> tuple[str, DeviceSpec] | None:
    """(device_kind, spec) of JAX's first device; None on CPU or for a device the table lacks."""
    import jax

    if jax.default_backend() == "cpu":
        return None
    kind = jax.devices()[0].device_kind
    spec = device_spec(kind)
    if spec is None:
        log(
            f"accelerator {kind!r} is not in bench/accelerators.py's table: decode_hbm_fraction and prefill_mfu "
            "are null; add its HBM bandwidth and peak bf16 FLOP/s there"
        )
        return None
    return kind, spec


def accelerator_field(found: tuple[str, DeviceSpec] | None) -> dict[str, Any] | None:
    if found is None:
        return None
    kind, spec = found
    return {"device_kind": kind, **asdict(spec)}


# ---------------------------------------------------------------------------------------------- counting


def macs_per_token(lm: Any) -> int:
    """Multiply-adds of the weight matrices for one decoded token (layers and output head)."""
    cfg = lm.config
    hd = cfg.head_dim
    per_layer = cfg.hidden_size * (2 * cfg.num_heads * hd + 2 * cfg.num_kv_heads * hd + 3 * cfg.intermediate_size)
    return cfg.num_layers * per_layer + cfg.vocab_size * cfg.hidden_size


def prefill_flops(lm: Any, tokens: int) -> float:
    """Model FLOPs of one causal prompt of `tokens` tokens: the matrices, and scores + values over the
    keys each query may see (t(t+1)/2 query-key pairs)."""
    cfg = lm.config
    attention = 2 * 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * tokens * (tokens + 1) / 2
    return 2.0 * macs_per_token(lm) * tokens + attention


def weight_bytes(lm: Any) -> int:
    """Bytes of every parameter array (a decode step reads each matrix once, whatever the batch)."""
    import jax

    return sum(int(x.nbytes) for x in jax.tree.leaves(lm.params))


def kv_bytes(lm: Any, keys: int) -> int:
    """Bytes of the keys and values of `keys` cached tokens, over every layer (in the model's dtype)."""
    import jax.numpy as jnp

    cfg = lm.config
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * jnp.dtype(lm.dtype).itemsize * keys


def decode_hbm_fraction(lm: Any, spec: DeviceSpec, steps: int, keys_read: int, seconds: float) -> float:
    """`steps` decode steps reading the weights once each and `keys_read` cached tokens' K/V in all."""
    return (steps * weight_bytes(lm) + kv_bytes(lm, keys_read)) / seconds / spec.hbm_bytes_per_s


def prefill_mfu(lm: Any, spec: DeviceSpec, tokens: int, seconds: float) -> float:
    return prefill_flops(lm, tokens) / seconds / spec.peak_bf16_flops


def decode_keys(prompt_lengths: list[int], steps: int) -> int:
    """Cached tokens read over `steps` decode steps: at step j a row attends its prompt and j + 1 tokens."""
    return sum(steps * p + steps * (steps + 1) // 2 for p in prompt_lengths)


# ---------------------------------------------------------------------------------------------- the engine


def engine_figures(
    engine: Any,
    spec: DeviceSpec,
    batch: int = 64,
    decode_steps: int = 64,
    prefill_tokens: int = 512,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Decode HBM fraction and prefill MFU of a serving engine (its scheduler, pages and attention
    backend), each the best of three runs after untimed passes, prefix cache cleared between runs.

    Decode time is the wall time of `batch` requests decoding `decode_steps` + 1 tokens minus that of
    the same requests decoding 1 (their prefill and first token), so it covers `decode_steps` steps;
    when noise makes that difference vanish the fraction is null, with a log line, never a made-up
    number.
    """
    lm = engine.lm
    text = "The river bends twice before it reaches the old mill, where the ledger of grain is kept. "
    long_prompt = engine.tokenizer.decode(engine.tokenizer.encode(text * (prefill_tokens // 16 + 1))[:prefill_tokens])
    short = [f"Item {i}: " + text for i in range(batch)]

    def timed(prompts: list[str], max_tokens: int, passes: int) -> float:
        # no stop tokens: every request decodes exactly max_tokens
        reqs = [
            {"prompt": p, "sampling": {"max_tokens": max_tokens, "stop_token_ids": []}, "json_schema": None}
            for p in prompts
        ]
        best = float("inf")
        for _ in range(passes):
            engine.clear_prefix_cache()
            t0 = time.perf_counter()
            engine.complete_many(reqs)
            best = min(best, time.perf_counter() - t0)
        return best

    # untimed passes compile every step shape first (requests reach the step loop one by one, so the
    # first steps' batch buckets vary from pass to pass); then the best of three
    workloads = (([long_prompt], 1), (short, 1), (short, decode_steps + 1))
    for prompts, max_tokens in workloads:
        timed(prompts, max_tokens, 2)
    prefill_s, first_s, all_s = (timed(prompts, max_tokens, 3) for prompts, max_tokens in workloads)
    decode_s = all_s - first_s
    lengths = [len(engine.tokenizer.encode(p)) for p in short]
    tokens = len(engine.tokenizer.encode(long_prompt))
    fraction = None
    if decode_s > 0:
        fraction = decode_hbm_fraction(lm, spec, decode_steps, decode_keys(lengths, decode_steps), decode_s)
    else:
        log(
            f"decoding {decode_steps} more tokens did not take measurably longer than decoding one "
            f"({decode_s:.3f} s difference): decode_hbm_fraction is null; raise decode_steps"
        )
    return {
        "decode_hbm_fraction": fraction,
        "prefill_mfu": prefill_mfu(lm, spec, tokens, prefill_s),
        "figures_batch": batch,
        "figures_decode_steps": decode_steps,
        "figures_prefill_tokens": tokens,
    }


# ---------------------------------------------------------------------------------------------- hosts and models


@dataclass(frozen=True)
class HostSpec:
    """An accelerator host: `chips` JAX devices of one kind, each with `hbm_bytes` of memory."""

    name: str
    device: DeviceSpec
    chips: int
    hbm_bytes: float  # per chip (datasheet)


def _spec(kind: str) -> DeviceSpec:
    spec = device_spec(kind)
    assert spec is not None, kind
    return spec


# Hosts a simulation can stand for (memory per chip from the same datasheets as `DEVICES`).
HOSTS: dict[str, HostSpec] = {
    h.name: h
    for h in (
        HostSpec("tpu-v5e-4", _spec("TPU v5 lite"), 4, 16e9),  # ct5lp-hightpu-4t: 4 chips of 16 GB
        HostSpec("tpu-v5e-8", _spec("TPU v5 lite"), 8, 16e9),
        HostSpec("tpu-v6e-4", _spec("TPU v6 lite"), 4, 32e9),
        HostSpec("tpu-v5p-4", _spec("TPU v5"), 4, 95e9),
        HostSpec("h100-8", _spec("NVIDIA H100 80GB HBM3"), 8, 80e9),
        HostSpec("h100-1", _spec("NVIDIA H100 80GB HBM3"), 1, 80e9),
        HostSpec("a100-8", _spec("NVIDIA A100-SXM4-80GB"), 8, 80e9),
        HostSpec("l4-1", _spec("NVIDIA L4"), 1, 24e9),
    )
}


@dataclass(frozen=True)
class ModelShape:
    """What a decode step reads and a prompt token costs: parameters (bf16) and the KV cache's shape."""

    name: str
    params: float
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    bytes_per_param: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_param

    def flops_per_token(self, context: float) -> float:
        """A prompt token's FLOPs: the weight matrices, and scores + values over `context` keys."""
        return 2.0 * self.params + 2 * 2 * self.layers * self.heads * self.head_dim * context


# Model shapes by size (the Llama 3 family's published configs: layers, heads, KV heads, head size).
MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("1b", 1.24e9, 16, 32, 8, 64),  # Llama-3.2-1B
        ModelShape("3b", 3.21e9, 28, 24, 8, 128),  # Llama-3.2-3B
        ModelShape("8b", 8.03e9, 32, 32, 8, 128),  # Llama-3.1-8B
        ModelShape("70b", 70.6e9, 80, 64, 8, 128),  # Llama-3.1-70B
    )
}


class HostModelError(ValueError):
    """A host or model the table does not know, or a model that does not fit the host."""


def host_latency(
    host: str, model: str, *, context_tokens: float, max_batch: int = 32, mfu: float = 0.4, hbm_fraction: float = 1.0
) -> dict[str, Any]:
    """The latency model (`memloop.jobs.sim.replay.LatencyModel` fields) of `host` serving `model`, from the
    datasheet figures: a decode step reads every weight once plus each sequence's KV cache
    (`context_tokens` keys) at `hbm_fraction` of the host's HBM bandwidth; a prompt token costs its
    FLOPs at `mfu` of the host's peak bf16 rate. The weights are sharded over the host's chips."""
    if host not in HOSTS:
        raise HostModelError(f"unknown host {host!r}; use one of {', '.join(HOSTS)}")
    if model not in MODELS:
        raise HostModelError(f"unknown model size {model!r}; use one of {', '.join(MODELS)}")
    if not (0 < mfu <= 1 and 0 < hbm_fraction <= 1):
        raise HostModelError(f"mfu ({mfu}) and hbm_fraction ({hbm_fraction}) are fractions in (0, 1]")
    h, m = HOSTS[host], MODELS[model]
    need = m.weight_bytes + max_batch * m.kv_bytes_per_token * context_tokens
    if need > h.chips * h.hbm_bytes:
        raise HostModelError(
            f"{model} with {max_batch} sequences of {context_tokens:.0f} tokens needs "
            f"{need / 1e9:.0f} GB; {host} has {h.chips * h.hbm_bytes / 1e9:.0f} GB: pick a larger host"
        )
    bw = h.chips * h.device.hbm_bytes_per_s * hbm_fraction
    flops = h.chips * h.device.peak_bf16_flops * mfu
    source = (
        f"{host}: {h.chips} x {h.device.name} ({h.device.hbm_bytes_per_s / 1e9:.0f} GB/s HBM, "
        f"{h.device.peak_bf16_flops / 1e12:.0f} TFLOP/s bf16 each) serving a {model} model "
        f"({m.weight_bytes / 1e9:.1f} GB bf16 weights, {m.kv_bytes_per_token / 1024:.0f} KiB KV per token); "
        f"decode step = (weights + KV of {context_tokens:.0f} tokens per sequence) / HBM at "
        f"{hbm_fraction:.0%}; prefill = FLOPs at {mfu:.0%} MFU"
    )
    return {
        "prefill_s_per_token": m.flops_per_token(context_tokens / 2) / flops,
        "decode_s_base": m.weight_bytes / bw,
        "decode_s_per_seq": m.kv_bytes_per_token * context_tokens / bw,
        "max_batch": max_batch,
        "speedup": 1.0,
        "source": source,
    }
