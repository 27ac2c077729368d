"""`memloop bench model`: the Flax model against transformers on the same GGUF, in one process.

Reports agreement (max |logit difference| over varied chat prompts, whether N greedy tokens are
identical) and speed: decode tokens/s at batch 1 and batch 32 and prefill tokens/s for memloop,
and the same for transformers' `generate` (PyTorch CPU). Speeds are only compared within one run.

Decode at long context is measured where memory loops decode: through the serving engine (paged KV
cache, prefix cache, scheduler), batch 1, after a prompt of 1k and 4k tokens that is already cached,
against the same measurement after a short prompt; at 4k also with the gather path the in-place
attention kernel replaced, and with float16 and int8 KV caches (`served_decode`), each with how much
of the f32 cache's greedy text at 4k it reproduces.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from memloop.bench.accelerators import (
    accelerator_field,
    decode_hbm_fraction,
    decode_keys,
    macs_per_token,
    prefill_mfu,
    this_accelerator,
)

PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You answer in JSON."},
        {"role": "user", "content": "Give the name and age of a fictional detective as an object."},
    ],
    [
        {
            "role": "user",
            "content": "Summarize: The committee met on Tuesday to approve the budget, "
            "but two members objected to the cost of the new library wing.",
        }
    ],
    [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}],
    [
        {"role": "user", "content": "Translate to German: The weather is lovely today."},
        {"role": "assistant", "content": "Das Wetter ist heute schön."},
        {"role": "user", "content": "And to Spanish?"},
    ],
]
LONG_TEXT = (
    "The river bends twice before it reaches the old mill, where the miller's daughter keeps the "
    "ledger of every sack of grain that passes through the village each autumn. "
)


@dataclass
class BenchSettings:
    greedy_tokens: int = 200
    decode_tokens: int = 64
    prefill_tokens: int = 512
    batch: int = 32
    hf_batch: bool = False  # also time transformers at batch 32 (slow on CPU)
    packed: bool = False  # memloop keeps Q4/Q8 layer matrices packed (see memloop.engine.model.decoder.load_model)
    dense: bool = False  # memloop with dense f32 weights only (no block-form kernel)
    dense_peer: bool = True  # also time memloop with dense f32 weights (XLA's dot), the pre-kernel engine
    quantize: str | None = None  # "int8": weight-only int8 layer matrices (memloop.engine.model.quantize)
    contexts: tuple[int, ...] = (1024, 4096)  # served batch-1 decode after prompts of these lengths
    gather_peer: bool = True  # also time served decode at the longest context with the gather path
    kv_types: tuple[str, ...] = (
        "float16",
        "int8",
    )  # also time served decode (short, longest context) with these caches
    f64_reference: bool = True  # also measure both f32 engines against transformers in float64 (8 bytes a weight)


def _matmul_paths(lm: Any, rows: dict[str, int]) -> dict[str, str]:
    """`matmul_path_<figure>`: which path the block matrices took for each figure's rows ("kernel" or
    "dequant-dot", memloop.engine.model.blocks.matmul_path), or "dense" for a model of f32 weights."""
    from memloop.engine.model.blocks import matmul_path

    blocks = _has_blocks(lm)
    return {f"matmul_path_{name}": matmul_path(n) if blocks else "dense" for name, n in rows.items()}


def _units(lm: Any, rows: dict[str, int]) -> dict[str, str | None]:
    """`matmul_unit_<figure>`: the unit the kernel multiplied on for each figure's rows ("amx-bf16": the AMX
    tiles; "avx512"/"avx2": vector FMAs; None: no kernel, XLA's dot; blocks.kernel_unit)."""
    from memloop.engine.model.blocks import kernel_unit

    blocks = _has_blocks(lm)
    return {f"matmul_unit_{name}": kernel_unit(n) if blocks else None for name, n in rows.items()}


def unit_ceiling_gmacs(unit: str | None, f32_gmacs: float, amx_gmacs: float) -> float:
    """The model multiply-adds per second a weight path can reach on its unit: the f32 GEMM rate for vector
    FMAs and XLA's dot; for the AMX tiles, their bf16 rate over the products one f32 multiply-add costs
    there (kernels.AMX_PRODUCTS: x and the weights in three bf16 pieces each)."""
    from memloop.engine import kernels

    return amx_gmacs / kernels.AMX_PRODUCTS if unit == "amx-bf16" else f32_gmacs


def _row_limit(lm: Any) -> dict[str, Any]:
    """`kernel_max_rows` (the most rows a call sends to the kernel here) and where it comes from: measured on
    this host by `memloop bench rows`, or the instruction set's table (memloop.engine.model.blocks)."""
    from memloop.engine import kernels
    from memloop.engine.model.blocks import kernel_max_rows, kernel_max_rows_source

    if not _has_blocks(lm) or not kernels.available():
        return {"kernel_max_rows": None, "kernel_max_rows_source": "no kernel path (dense weights)"}
    return {"kernel_max_rows": kernel_max_rows(), "kernel_max_rows_source": kernel_max_rows_source()}


def _has_blocks(lm: Any) -> bool:
    from memloop.engine.model.blocks import BlockMatrix

    return isinstance(lm.params["embed"], BlockMatrix) or any(
        isinstance(w, BlockMatrix) for layer in (lm.params["layers"] if lm.per_layer else []) for w in layer.values()
    )


# Every side of a speed comparison (memloop, its dense peer, transformers, llama.cpp) is timed this
# many times after its warm-up, and its figure is the best of them: one statistic over the same runs.
TIMED_RUNS = 2
TIMING = f"best of {TIMED_RUNS} timed runs after a warm-up, every side alike"


def _timed(fn: Callable[[], Any], repeat: int = TIMED_RUNS) -> float:
    """The fastest of `repeat` calls of `fn`, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def hf_greedy(hf_model: Any, ids: list[int], n: int) -> list[int]:
    """n greedy tokens from transformers with its KV cache, never stopping early (generate() would
    stop at EOS): the reference memloop's greedy decoding is compared against."""
    import torch

    out_ids: list[int] = []
    with torch.no_grad():
        out = hf_model(torch.tensor([ids]), use_cache=True)
        for _ in range(n):
            tok = int(out.logits[0, -1].argmax())
            out_ids.append(tok)
            out = hf_model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
    return out_ids


def _ours_prefill_decode(lm: Any, ids_batch: list[list[int]], steps: int, in_place: bool = True) -> tuple[float, float]:
    """Seconds for one prefill of the batch and for `steps` decode steps after it (compiled beforehand).
    `in_place`: decode attention as the serving engine does it (the CPU kernel where it applies),
    not XLA's attention over the contiguous cache."""
    import jax
    import jax.numpy as jnp
    from memloop.engine.model.decoder import init_contiguous_cache
    from memloop.engine.runner.reference import DECODE_CHUNK, decode_chunk, prefill
    from memloop.engine.sample.sampling import SamplingParams, next_pow2, row_arrays, seed_keys

    cfg = lm.config
    b = len(ids_batch)
    t = max(16, next_pow2(max(len(x) for x in ids_batch)))
    # the cache generate() would allocate: every prompt token plus every decoded one
    s = max(t, next_pow2(max(len(x) for x in ids_batch) + steps + 1))
    tokens = np.zeros((b, t), np.int32)
    lengths = np.zeros((b,), np.int32)
    for i, x in enumerate(ids_batch):
        tokens[i, : len(x)] = x
        lengths[i] = len(x)
    params = [SamplingParams(max_tokens=steps + 1, stop_token_ids=())] * b
    temps, top_k, top_p = row_arrays(params)
    keys = seed_keys(params)
    stop = jnp.full((1,), -2, jnp.int32)
    budget = jnp.full((b,), steps + 1, jnp.int32)

    def run() -> tuple[float, float]:
        cache = init_contiguous_cache(cfg, b, s, lm.dtype, per_layer=lm.per_layer)
        jax.block_until_ready(cache)
        t0 = time.perf_counter()
        first, _, cache = prefill(
            lm.params,
            cfg,
            cache,
            jnp.asarray(tokens),
            jnp.asarray(lengths),
            temps,
            top_k,
            top_p,
            keys,
            cap=0,
            full=False,
        )
        first.block_until_ready()
        t1 = time.perf_counter()
        last, pos = first, jnp.asarray(lengths)
        stp, done = jnp.ones((b,), jnp.int32), jnp.zeros((b,), bool)
        left = steps
        while left > 0:
            out, last, pos, stp, done, cache = decode_chunk(
                lm.params,
                cfg,
                cache,
                last,
                pos,
                stp,
                done,
                budget,
                stop,
                temps,
                top_k,
                top_p,
                keys,
                cap=0,
                full=False,
                in_place=in_place,
            )
            left -= DECODE_CHUNK
        out.block_until_ready()
        return t1 - t0, time.perf_counter() - t1

    run()  # compile
    runs = [run() for _ in range(TIMED_RUNS)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


@dataclass(frozen=True)
class Served:
    tokens_per_s: float
    text: str  # the greedy output of the timed request


def served_decode(lm: Any, context: int, tokens: int, gather: bool = False, kv_dtype: str | None = None) -> Served:
    """Batch-1 greedy decode tokens/s through the serving engine after a `context`-token prompt
    that is in the prefix cache: (tokens - 1) / (time of a request for `tokens` - time for 1), so
    neither prefill nor the first step counts. `gather` serves with `attention: gather`, the path
    the decode kernels (C++ on CPU, Pallas on TPU/GPU) replaced; the backend is a static argument
    of the engine step, so its programs are compiled apart from the kernel's."""
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig

    tok = lm.tokenizer
    prompt = tok.decode(tok.encode(LONG_TEXT * (context // 25 + 1))[:context]) if context else PROMPTS[0][0]["content"]
    pages = (tok.count_tokens(prompt) + tokens) // 16 + 16
    eng = Engine(
        EngineConfig(
            num_pages=pages,
            page_size=16,
            max_batch=1,
            prefill_chunk=512,
            kv_dtype=kv_dtype,
            attention="gather" if gather else "auto",
        ),
        model=lm,
    )
    try:
        request = lambda n: {"prompt": prompt, "sampling": {"max_tokens": n, "temperature": 0.0, "stop_token_ids": []}}
        text = eng.complete(request(tokens))["text"]  # prefill into the prefix cache, compile every shape
        t1 = _timed(lambda: eng.complete(request(1)))
        tn = _timed(lambda: eng.complete(request(tokens)))
    finally:
        eng.shutdown()
    return Served((tokens - 1) / max(tn - t1, 1e-9), text)


def served_prefill(lm: Any, ids: list[int], repeat: int = TIMED_RUNS) -> tuple[float, int]:
    """Prefill tokens/s through the serving engine (its paged, chunked prefill: the path a memory loop's
    chunk and the memory the prefix cache misses take) for a prompt of `len(ids)` tokens, and the prompt
    tokens the prefix cache served over the timed requests (0: every token was prefilled). Every request's
    first token differs, so the cache misses from the start; a first request of the same length compiles.
    Timed to the first token (`max_tokens` 1)."""
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig

    vocab = lm.config.vocab_size
    eng = Engine(EngineConfig(num_pages=len(ids) // 16 + 16, page_size=16, max_batch=1), model=lm)
    firsts = iter(range(1, vocab))
    cached = 0

    def request() -> None:
        nonlocal cached
        prompt = [(ids[0] + next(firsts)) % vocab, *ids[1:]]
        out = eng.complete({"prompt": prompt, "sampling": {"max_tokens": 1, "temperature": 0.0, "stop_token_ids": []}})
        cached += out["usage"]["cached_tokens"]

    try:
        request()  # compiles the prefill's shapes
        cached = 0
        seconds = _timed(request, repeat)
        return len(ids) / seconds, cached
    finally:
        eng.shutdown()


def _common_prefix_chars(a: str, b: str) -> float:
    """The fraction of `a` that `b` reproduces before the first difference."""
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return n / max(len(a), 1)


def f32_gemm_gmacs(size: int = 1536, repeat: int = 5) -> float:
    """The best f32 matrix-multiply rate XLA sustains on this host now (GMAC/s): the compute ceiling
    a large-batch decode step can approach, measured in the same run as the decode speeds."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((size, size), jnp.float32)
    b = jnp.ones((size, size), jnp.float32)
    fn = jax.jit(lambda a, b: a @ b)
    fn(a, b).block_until_ready()
    seconds = _timed(lambda: fn(a, b).block_until_ready(), repeat)
    return size**3 / seconds / 1e9


def f64_agreement(
    hf: Any,
    prompt_ids: list[list[int]],
    ours: list[np.ndarray],
    ref: list[np.ndarray],
    log: Callable[[str], None] = print,
) -> dict[str, float]:
    """Both f32 engines' largest |logit difference| from transformers run in float64 on the same weights.

    Two f32 forwards differ by their summation orders, so their difference alone cannot say which is
    off: the float64 run is the near-exact answer both approximate (transformers' f32 logits are ~1e-4
    from it on SmolLM2, the size of memloop's difference to them). Near: transformers' Llama code keeps
    RMSNorm, the rotary angles and the softmax in float32 even in a float64 model, a floor of ~3e-5 on
    SmolLM2 (docs/bench-log.md, the logits' op-by-op table)."""
    import copy

    import torch

    exact = copy.deepcopy(hf).double()
    with torch.no_grad():
        truth = [exact(torch.tensor([ids])).logits[0].numpy() for ids in prompt_ids]
    del exact
    out = {
        "max_abs_logit_diff_vs_f64": max(float(np.abs(o - t).max()) for o, t in zip(ours, truth)),
        "hf_max_abs_logit_diff_vs_f64": max(float(np.abs(r - t).max()) for r, t in zip(ref, truth)),
    }
    log(
        f"max |logit diff| from transformers in float64: memloop {out['max_abs_logit_diff_vs_f64']:.3g}, "
        f"transformers in f32 {out['hf_max_abs_logit_diff_vs_f64']:.3g}"
    )
    return out


def run_model_bench(
    path: Path | None = None, settings: BenchSettings = BenchSettings(), log: Callable[[str], None] = print
) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import torch
    from memloop.engine import kernels
    from memloop.engine.model.decoder import forward, load_model, no_cache_attention
    from memloop.engine.runner.reference import DECODE_CHUNK, generate
    from memloop.engine.sample.sampling import SamplingParams, next_pow2
    from transformers import AutoModelForCausalLM

    lm = load_model(path, packed=settings.packed, blocks=False if settings.dense else None, quantize=settings.quantize)
    log(
        f"memloop model loaded from {lm.path} ({jax.default_backend()}, {lm.dtype.name}, "
        f"{'GGUF block weights + CPU kernel' if _has_blocks(lm) else 'dense weights'})"
    )
    hf = AutoModelForCausalLM.from_pretrained(str(lm.path.parent), gguf_file=lm.path.name, dtype=torch.float32).eval()
    log(f"transformers reference loaded (torch {torch.__version__}, {torch.get_num_threads()} threads)")
    tok = lm.tokenizer
    prompt_ids = [tok.chat_ids(m) for m in PROMPTS]

    # --- agreement: logits on every prompt, then greedy tokens
    fwd = jax.jit(lambda p, t, q: forward(p, lm.config, t, q, None, no_cache_attention(q))[0])
    ours_logits = [np.asarray(fwd(lm.params, jnp.asarray([ids]), jnp.arange(len(ids))[None]))[0] for ids in prompt_ids]
    with torch.no_grad():
        ref_logits = [hf(torch.tensor([ids])).logits[0].numpy() for ids in prompt_ids]
    max_diff = max(float(np.abs(o - r).max()) for o, r in zip(ours_logits, ref_logits))
    log(f"max |logit diff| over {len(prompt_ids)} prompts: {max_diff:.3g}")
    exact = (
        f64_agreement(hf, prompt_ids, ours_logits, ref_logits, log)
        if settings.f64_reference
        else {"max_abs_logit_diff_vs_f64": None, "hf_max_abs_logit_diff_vs_f64": None}
    )

    n = settings.greedy_tokens
    ours_greedy = [g.token_ids for g in generate(lm, prompt_ids, SamplingParams(max_tokens=n, stop_token_ids=()))]
    identical = True
    first_mismatch = None
    for k, ids in enumerate(prompt_ids):
        ref_ids = hf_greedy(hf, ids, n)
        if ref_ids != ours_greedy[k]:
            identical = False
            first_mismatch = first_mismatch or (
                k,
                next(i for i, (a, b) in enumerate(zip(ref_ids, ours_greedy[k])) if a != b),
            )
    log(
        f"{n} greedy tokens x {len(prompt_ids)} prompts identical: {identical}"
        + (f" (first mismatch prompt {first_mismatch[0]} token {first_mismatch[1]})" if first_mismatch else "")
    )

    # --- speed: memloop
    steps = max(DECODE_CHUNK, settings.decode_tokens // DECODE_CHUNK * DECODE_CHUNK)
    _, dec1 = _ours_prefill_decode(lm, [prompt_ids[0]], steps)
    decode_b1 = steps / dec1
    batch_ids = [prompt_ids[i % len(prompt_ids)] for i in range(settings.batch)]
    _, dec32 = _ours_prefill_decode(lm, batch_ids, steps)
    decode_b32 = settings.batch * steps / dec32
    long_ids = tok.encode(LONG_TEXT * (settings.prefill_tokens // 30 + 1))[: settings.prefill_tokens]
    pre, _ = _ours_prefill_decode(lm, [long_ids], DECODE_CHUNK)
    prefill_tps = len(long_ids) / pre
    prefill_rows = max(16, next_pow2(len(long_ids)))  # the rows of the prefill's weight calls (its padded bucket)
    served_prefill_tps, _ = served_prefill(lm, long_ids)
    log(
        f"memloop: decode b1 {decode_b1:.1f} tok/s, b{settings.batch} {decode_b32:.1f} tok/s, "
        f"prefill {prefill_tps:.0f} tok/s ({len(long_ids)}-token prompt), through the serving engine "
        f"{served_prefill_tps:.0f} tok/s"
    )
    accelerator = this_accelerator(log)
    figures: dict[str, Any] = {
        "accelerator": accelerator_field(accelerator),
        "decode_hbm_fraction": None,
        "prefill_mfu": None,
    }
    if accelerator is not None:  # the batch decode above, and the prefill of the long prompt
        spec = accelerator[1]
        keys = decode_keys([len(x) for x in batch_ids], steps)
        figures.update(
            decode_hbm_fraction=round(decode_hbm_fraction(lm, spec, steps, keys, dec32), 4),
            prefill_mfu=round(prefill_mfu(lm, spec, len(long_ids), pre), 4),
        )
        log(
            f"{spec.name}: decode at batch {settings.batch} reaches {figures['decode_hbm_fraction']:.1%} of the HBM "
            f"bound, prefill {figures['prefill_mfu']:.1%} MFU"
        )
    outputs = {c: served_decode(lm, c, steps + 1) for c in (0, *settings.contexts)}
    served = {c: o.tokens_per_s for c, o in outputs.items()}
    log(
        "memloop served decode b1: "
        + ", ".join(f"{'short' if c == 0 else f'ctx {c}'} {v:.1f} tok/s" for c, v in served.items())
    )
    longest = max(settings.contexts) if settings.contexts else 0
    gather_tps = (
        served_decode(lm, longest, steps + 1, gather=True).tokens_per_s if settings.gather_peer and longest else None
    )
    if gather_tps is not None:
        log(f"memloop served decode b1 at ctx {longest} with the gather path: {gather_tps:.1f} tok/s")
    kv_fields: dict[str, Any] = {}
    for kv in settings.kv_types if longest else ():
        runs = {c: served_decode(lm, c, steps + 1, kv_dtype=kv) for c in (0, longest)}
        same = _common_prefix_chars(outputs[longest].text, runs[longest].text)
        name = {"float16": "f16"}.get(kv, kv)
        kv_fields.update(
            {
                f"kv_{name}_decode_tps_b1_short": round(runs[0].tokens_per_s, 2),
                f"kv_{name}_decode_tps_b1_ctx_longest": round(runs[longest].tokens_per_s, 2),
                f"kv_{name}_ratio_ctx_longest_vs_short": round(runs[longest].tokens_per_s / runs[0].tokens_per_s, 3),
                f"kv_{name}_greedy_text_same_as_f32_ctx_longest": round(same, 3),
            }
        )
        log(
            f"memloop served decode b1 with a {kv} KV cache: short {runs[0].tokens_per_s:.1f}, ctx {longest} "
            f"{runs[longest].tokens_per_s:.1f} tok/s; greedy text at ctx {longest} the same as the f32 cache's for "
            f"{same:.0%} of its length"
        )
    gmacs = f32_gemm_gmacs()
    units = _units(lm, {"b1": 1, f"b{settings.batch}": settings.batch, "prefill": prefill_rows})
    amx_gmacs = kernels.amx_peak_gmacs() if "amx-bf16" in units.values() else None
    unit_b32, unit_prefill = units[f"matmul_unit_b{settings.batch}"], units["matmul_unit_prefill"]
    ceiling_b32 = unit_ceiling_gmacs(unit_b32, gmacs, amx_gmacs or 0.0) * 1e9 / macs_per_token(lm)
    ceiling_prefill = unit_ceiling_gmacs(unit_prefill, gmacs, amx_gmacs or 0.0) * 1e9 / macs_per_token(lm)
    if amx_gmacs:
        log(
            f"host AMX bf16 tiles {amx_gmacs:.0f} GMAC/s ({amx_gmacs / kernels.AMX_PRODUCTS:.0f} GMAC/s of f32-level "
            f"products at {kernels.AMX_PRODUCTS} bf16 products each)"
        )
    log(
        f"host f32 GEMM {gmacs:.1f} GMAC/s: batch {settings.batch} decode on {unit_b32 or 'XLA dot'} cannot exceed "
        f"{ceiling_b32:.0f} tok/s ({ceiling_b32 / decode_b1:.1f}x memloop's batch 1); prefill on "
        f"{unit_prefill or 'XLA dot'} cannot exceed {ceiling_prefill:.0f} tok/s"
    )
    peer: dict[str, Any] = {}
    if settings.dense_peer and _has_blocks(lm):
        dense = load_model(path, blocks=False)
        _, d1 = _ours_prefill_decode(dense, [prompt_ids[0]], steps)
        _, d32 = _ours_prefill_decode(dense, batch_ids, steps)
        dpre, _ = _ours_prefill_decode(dense, [long_ids], DECODE_CHUNK)
        peer = {
            "dense_decode_tps_b1": round(steps / d1, 2),
            "dense_decode_tps_b32": round(settings.batch * steps / d32, 2),
            "dense_prefill_tps": round(len(long_ids) / dpre, 1),
        }
        del dense
        log(
            f"memloop with dense f32 weights: decode b1 {peer['dense_decode_tps_b1']:.1f} tok/s, "
            f"b{settings.batch} {peer['dense_decode_tps_b32']:.1f} tok/s, prefill {peer['dense_prefill_tps']:.0f} tok/s"
        )

    # --- speed: transformers generate (same prompts, greedy, forced length)
    def hf_gen(ids_batch: list[list[int]], new: int) -> None:
        width = max(len(x) for x in ids_batch)
        inp = torch.full((len(ids_batch), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(inp)
        for i, x in enumerate(ids_batch):  # left padding, as transformers expects for decoder-only batches
            inp[i, width - len(x) :] = torch.tensor(x)
            mask[i, width - len(x) :] = 1
        with torch.no_grad():
            hf.generate(
                inp,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
            )

    hf_gen([prompt_ids[0]], 2)  # warm-up
    hf_t1 = _timed(lambda: hf_gen([prompt_ids[0]], 1))
    hf_tn = _timed(lambda: hf_gen([prompt_ids[0]], steps + 1))
    hf_decode_b1 = steps / max(hf_tn - hf_t1, 1e-9)
    hf_prefill_tps = len(long_ids) / _timed(lambda: hf_gen([long_ids], 1))
    result: dict[str, Any] = {
        "max_abs_logit_diff": max_diff,
        **exact,
        "greedy_tokens_identical": identical,
        "greedy_tokens": n,
        "prompts": len(prompt_ids),
        "decode_tps_b1": round(decode_b1, 2),
        "batch": settings.batch,
        "decode_tps_b32": round(decode_b32, 2),
        "prefill_tps": round(prefill_tps, 1),
        # the same prompt through the serving engine's paged prefill, the prefix cache missing (served_prefill)
        "served_prefill_tps": round(served_prefill_tps, 1),
        "hf_decode_tps_b1": round(hf_decode_b1, 2),
        "hf_prefill_tps": round(hf_prefill_tps, 1),
        "ratio_decode_b1_vs_hf": round(decode_b1 / hf_decode_b1, 2),
        "ratio_decode_b32_vs_b1": round(decode_b32 / decode_b1, 2),
        "ratio_prefill_vs_hf": round(prefill_tps / hf_prefill_tps, 2),
        "ratio_served_prefill_vs_hf": round(served_prefill_tps / hf_prefill_tps, 2),
        "f32_gemm_gmacs": round(gmacs, 1),
        "decode_tps_b32_ceiling": round(ceiling_b32, 1),
        "ratio_b32_ceiling_vs_b1": round(ceiling_b32 / decode_b1, 2),
        "ratio_b32_vs_ceiling": round(decode_b32 / ceiling_b32, 3),
        # the ceilings above and here are the units' own (unit_ceiling_gmacs): AMX bf16 where the tiles ran
        "amx_bf16_gmacs": round(amx_gmacs, 1) if amx_gmacs else None,
        "prefill_tps_ceiling": round(ceiling_prefill, 1),
        "ratio_prefill_vs_ceiling": round(prefill_tps / ceiling_prefill, 3),
        **units,
        "decode_tps_b1_served_short": round(served[0], 2),
        **{
            f"decode_tps_b1_ctx{c // 1024}k" if c % 1024 == 0 else f"decode_tps_b1_ctx{c}": round(v, 2)
            for c, v in served.items()
            if c
        },
        **(
            {
                f"ratio_ctx{longest // 1024}k_vs_short"
                if longest % 1024 == 0
                else f"ratio_ctx{longest}_vs_short": round(served[longest] / served[0], 3)
            }
            if longest
            else {}
        ),
        **kv_fields,
        **(
            {
                "gather_decode_tps_b1_ctx_longest": round(gather_tps, 2),
                "ratio_ctx_longest_kernel_vs_gather": round(served[longest] / gather_tps, 2),
            }
            if gather_tps
            else {}
        ),
        **peer,
        **(
            {
                "ratio_decode_b1_vs_dense": round(decode_b1 / peer["dense_decode_tps_b1"], 2),
                "ratio_decode_b32_vs_dense": round(decode_b32 / peer["dense_decode_tps_b32"], 2),
                "ratio_prefill_vs_dense": round(prefill_tps / peer["dense_prefill_tps"], 2),
            }
            if peer
            else {}
        ),
        **figures,
        "backend": jax.default_backend(),
        "dtype": lm.dtype.name,
        "weights": "gguf-blocks"
        if _has_blocks(lm)
        else ("int8" if settings.quantize else ("packed" if settings.packed else "dense")),
        "packed": settings.packed,
        "weight_path": lm.weight_path["weights"],  # kernel or dense: which path the figures above ran
        "kernel_isa": lm.weight_path["isa"],
        # per figure, the path its weight products took (blocks.matmul_path: the kernel or the in-graph
        # de-quantisation + XLA's dot, chosen by the rows of the call; "dense" for f32 weights)
        **_matmul_paths(lm, {"b1": 1, f"b{settings.batch}": settings.batch, "prefill": prefill_rows}),
        **_row_limit(lm),
        "timing": TIMING,
    }
    if settings.hf_batch:
        short = max(8, steps // 4)
        hf_gen(batch_ids, 2)  # warm-up, as every side has
        t1 = _timed(lambda: hf_gen(batch_ids, 1))
        tn = _timed(lambda: hf_gen(batch_ids, short + 1))
        result["hf_decode_tps_b32"] = round(settings.batch * short / max(tn - t1, 1e-9), 2)
        result["ratio_decode_b32_vs_hf"] = round(decode_b32 / result["hf_decode_tps_b32"], 2)
    log(
        f"transformers: decode b1 {hf_decode_b1:.1f} tok/s, prefill {hf_prefill_tps:.0f} tok/s; "
        f"memloop/transformers decode b1 = {result['ratio_decode_b1_vs_hf']}x, "
        f"memloop b{settings.batch}/b1 = {result['ratio_decode_b32_vs_b1']}x"
    )
    return result
