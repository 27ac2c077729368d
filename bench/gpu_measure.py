"""The measurements of `bench gpu`, each on a built engine or model: correctness against transformers, decode
and prefill rates with their share of the device's bounds, transformers' own decode, the prefix workload, a
profile's top kernels; and the calibration that turns a step's work into expected seconds."""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from memloop.bench.gpu_models import TEXT, build_checkpoint, load_bf16, make_engine, prompt_ids
from memloop.bench.gpu_plan import Rates

PROMPTS = (
    "Summarise what the ledger records and who reads it.",
    "List the places the river passes.",
    "Describe the mill in one paragraph, then name its keeper.",
    "What happens each spring at the mill? Answer briefly.",
)
LOGITS_TOLERANCE = 2e-2  # relative L2 of bf16 logits through a few dozen layers (bf16 keeps ~3 digits)


# ---------------------------------------------------------------------------------------------- the device


@dataclass
class Device:
    """Where this run is: JAX's platform and device kind, torch's device, the datasheet spec (None on CPU)."""

    platform: str
    kind: str
    torch_device: str
    spec: Any
    interpret: bool  # Pallas kernels in the interpreter (CPU)

    @property
    def attention(self) -> str:
        """The kernel path: what `auto` picks on an accelerator; the GPU kernel in the interpreter on CPU."""
        return "pallas-gpu" if self.interpret else "auto"

    @staticmethod
    def here() -> "Device":
        import jax
        import torch
        from memloop.bench.accelerators import this_accelerator

        platform = jax.default_backend()
        found = this_accelerator(log=lambda line: None)
        torch_device = "cuda" if platform == "gpu" and torch.cuda.is_available() else "cpu"
        return Device(
            platform,
            jax.devices()[0].device_kind,
            torch_device,
            found[1] if found else None,
            interpret=platform == "cpu",
        )


def environment() -> dict[str, Any]:
    import importlib.metadata as md
    import platform as host

    import jax

    versions = {}
    for name in ("jax", "jaxlib", "flax", "transformers", "torch", "numpy", "safetensors", "tokenizers"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    devices = jax.devices()
    return {
        "python": host.python_version(),
        "versions": versions,
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
    }


# ---------------------------------------------------------------------------------------------- calibration


def calibrate(dev: Device, matrix_n: int, tokenizer_dir: Path, work_dir: Path) -> tuple[Rates, dict[str, Any]]:
    """This device's bf16 matmul rate, copy rate, and a toy model's compile and step seconds."""
    import jax
    import jax.numpy as jnp

    n = matrix_n
    a = jnp.ones((n, n), jnp.bfloat16)
    mm = jax.jit(lambda x: x @ x)
    mm(a).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(3):
        out = mm(a)
    out.block_until_ready()
    flop_rate = 3 * 2 * n**3 / (time.perf_counter() - t0)
    x = jnp.ones((n * n * 4,), jnp.bfloat16)
    cp = jax.jit(lambda v: v + 1)
    cp(x).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(3):
        y = cp(x)
    y.block_until_ready()
    byte_rate = 3 * 2 * x.nbytes / (time.perf_counter() - t0)

    path = build_checkpoint("tiny-llama", work_dir / "calibration", tokenizer_dir, dev.torch_device)
    lm = load_bf16(path)
    engine = make_engine(lm, dev.attention, dev.interpret, max_batch=4, prefill_chunk=64, pages=256)
    try:
        req = {"prompt": lm.tokenizer.encode(TEXT)[:16], "sampling": {"max_tokens": 9, "stop_token_ids": []}}
        t0 = time.perf_counter()
        engine.complete(req)
        first = time.perf_counter() - t0
        engine.clear_prefix_cache()
        t0 = time.perf_counter()
        engine.complete(req)
        warm = time.perf_counter() - t0
    finally:
        engine.shutdown()
    rates = Rates(
        flop_rate=flop_rate, byte_rate=byte_rate, step_overhead_s=warm / 10, compile_s=max(first - warm, 0.05) / 2
    )
    return rates, {
        "matmul_tflops": flop_rate / 1e12,
        "copy_gb_per_s": byte_rate / 1e9,
        "tiny_first_call_s": first,
        "tiny_warm_call_s": warm,
    }


# ---------------------------------------------------------------------------------------------- measurements


def correctness(lm: Any, engines: dict[str, Any], hf: Any, torch_device: str, greedy_tokens: int) -> dict[str, Any]:
    """Logits and greedy tokens of the engine against transformers on the same device and checkpoint."""
    import jax
    import jax.numpy as jnp
    import torch
    from memloop.engine.model.decoder import forward, no_cache_attention

    ids = [lm.tokenizer.encode(TEXT + p) for p in PROMPTS]
    fwd = jax.jit(lambda p, t, q: forward(p, lm.config, t, q, None, no_cache_attention(q))[0])
    rel = []
    with torch.no_grad():
        for row in ids:
            ours = np.asarray(fwd(lm.params, jnp.asarray([row]), jnp.arange(len(row))[None])[0, -1], np.float32)
            ref = hf(torch.tensor([row], device=torch_device)).logits[0, -1].float().cpu().numpy()
            rel.append(float(np.linalg.norm(ours - ref) / np.linalg.norm(ref)))
    out: dict[str, Any] = {
        "prompts": len(ids),
        "logits_rel_l2_max": max(rel),
        "logits_rel_l2": rel,
        "logits_tolerance": LOGITS_TOLERANCE,
        "logits_within_tolerance": max(rel) <= LOGITS_TOLERANCE,
    }
    refs = [hf_greedy(hf, row, greedy_tokens, torch_device) for row in ids]
    for path, engine in engines.items():
        results = engine.complete_many(
            [
                {
                    "prompt": row,
                    "sampling": {"max_tokens": greedy_tokens, "temperature": 0.0, "stop_token_ids": [], "logprobs": 1},
                }
                for row in ids
            ]
        )
        out[path] = greedy_agreement(
            [[e["id"] for e in r["logprobs"]] for r in results],
            [[e["logprob"] for e in r["logprobs"]] for r in results],
            refs,
        )
    return out


def hf_greedy(hf: Any, ids: list[int], n: int, torch_device: str) -> tuple[list[int], list[np.ndarray]]:
    """n greedy tokens from transformers with its KV cache, and the log-probabilities of each step."""
    import torch

    tokens, logps = [], []
    with torch.no_grad():
        out = hf(torch.tensor([ids], device=torch_device), use_cache=True)
        for _ in range(n):
            lp = torch.log_softmax(out.logits[0, -1].float(), -1)
            tok = int(lp.argmax())
            tokens.append(tok)
            logps.append(lp.cpu().numpy())
            out = hf(torch.tensor([[tok]], device=torch_device), past_key_values=out.past_key_values, use_cache=True)
    return tokens, logps


def greedy_agreement(
    ours: list[list[int]], our_logprobs: list[list[float]], refs: list[tuple[list[int], list[np.ndarray]]]
) -> dict[str, Any]:
    """Per prompt: tokens agreeing before the first divergence, where it is, and transformers' log-probability
    gap there (its top token over ours: near 0 is a near-tie that bf16 rounding may flip); the largest
    difference of our chosen tokens' log-probabilities from transformers' while the tokens agree."""
    agree, first, gaps, lp_diff = [], [], [], 0.0
    for toks, lps, (ref_toks, ref_lps) in zip(ours, our_logprobs, refs):
        n = next((i for i, (a, b) in enumerate(zip(toks, ref_toks)) if a != b), min(len(toks), len(ref_toks)))
        agree.append(n)
        first.append(None if n == len(ref_toks) else n)
        if n < len(ref_toks) and n < len(toks):
            gaps.append(float(ref_lps[n][ref_toks[n]] - ref_lps[n][toks[n]]))
        for i in range(n):
            lp_diff = max(lp_diff, abs(float(lps[i]) - float(ref_lps[i][toks[i]])))
    return {
        "tokens_compared": sum(len(r[0]) for r in refs),
        "tokens_agreeing": sum(agree),
        "first_divergence": first,
        "logprob_gap_at_divergence": gaps,
        "max_abs_logprob_diff_while_agreeing": lp_diff,
    }


def timed_requests(engine: Any, prompts: list[list[int]], max_tokens: int, passes: int) -> tuple[float, float]:
    """(seconds of the first, compiling pass; best of `passes` timed ones), prefix cache cleared before each."""
    reqs = [{"prompt": p, "sampling": {"max_tokens": max_tokens, "stop_token_ids": []}} for p in prompts]
    times = []
    for _ in range(passes + 1):
        engine.clear_prefix_cache()
        t0 = time.perf_counter()
        engine.complete_many(reqs)
        times.append(time.perf_counter() - t0)
    return times[0], min(times[1:])


def decode_figures(engine: Any, dev: Device, batch: int, context: int, steps: int, passes: int) -> dict[str, Any]:
    """Decode tokens/s of `batch` rows at `context` tokens: (steps + 1 tokens) minus (1 token) wall time."""
    from memloop.bench.accelerators import decode_hbm_fraction, decode_keys

    prompts = [prompt_ids(engine.tokenizer, context, marker=i) for i in range(batch)]
    first_compile, first = timed_requests(engine, prompts, 1, passes)
    all_compile, full = timed_requests(engine, prompts, steps + 1, passes)
    decode_s = full - first
    out: dict[str, Any] = {
        "batch": batch,
        "context": context,
        "decode_steps": steps,
        "compile_s": max(0.0, first_compile - first) + max(0.0, all_compile - full),
    }
    if decode_s <= 0:
        out.update(
            tokens_per_s=None,
            hbm_fraction=None,
            note=f"decoding {steps} more tokens took no measurable time ({decode_s:.4f} s): raise decode_steps",
        )
        return out
    out["tokens_per_s"] = batch * steps / decode_s
    out["step_ms"] = 1e3 * decode_s / steps
    out["hbm_fraction"] = (
        decode_hbm_fraction(engine.lm, dev.spec, steps, decode_keys([context] * batch, steps), decode_s)
        if dev.spec
        else None
    )
    return out


def prefill_figures(engine: Any, dev: Device, tokens: int, passes: int) -> dict[str, Any]:
    from memloop.bench.accelerators import prefill_mfu

    compile_pass, best = timed_requests(engine, [prompt_ids(engine.tokenizer, tokens)], 1, passes)
    return {
        "tokens": tokens,
        "seconds": best,
        "tokens_per_s": tokens / best,
        "compile_s": max(0.0, compile_pass - best),
        "mfu": prefill_mfu(engine.lm, dev.spec, tokens, best) if dev.spec else None,
    }


def transformers_decode(
    hf: Any, tokenizer: Any, torch_device: str, batch: int, context: int, steps: int
) -> dict[str, Any]:
    """transformers' generate as its users run it for speed: bf16, SDPA, the static cache, greedy."""
    import torch

    ids = torch.tensor([prompt_ids(tokenizer, context, marker=i) for i in range(batch)], device=torch_device)

    def generate(n: int) -> float:
        if torch_device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                cache_implementation="static",
                pad_token_id=0,
            )
        if torch_device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    generate(steps + 1)  # warm-up (the static cache's compiled graphs, when transformers compiles them)
    full = min(generate(steps + 1) for _ in range(2))
    first = min(generate(1) for _ in range(2))
    decode_s = full - first
    out: dict[str, Any] = {
        "batch": batch,
        "context": context,
        "decode_steps": steps,
        "tokens_per_s": batch * steps / decode_s if decode_s > 0 else None,
    }
    if decode_s <= 0:
        out["note"] = f"decoding {steps} more tokens took no measurable time ({decode_s:.4f} s): raise decode_steps"
    return out


def prefix_workload(engine: Any, workload_name: str, loops: int, steps: int | None) -> dict[str, Any]:
    from memloop.bench.prefix import build_workload, run_engine, workload_settings

    ws = workload_settings(workload_name, samples=loops, steps=steps)
    workload = build_workload(
        ws["samples"], ws["steps"], ws["chunk_words"], revisions=ws["revisions"], shared_book=ws["shared_book"]
    )
    engine.clear_prefix_cache()
    engine.reset_counters()
    result = run_engine(engine, workload, ws["max_tokens"])
    stats = engine.stats()
    return {
        "loops": loops,
        "steps": ws["steps"],
        "max_tokens": ws["max_tokens"],
        "wall_s": result["wall_s"],
        "tokens_per_s": result["tokens_per_s"],
        "prompt_tokens": result["prompt_tokens"],
        "cached_tokens": result["cached_tokens"],
        "decoded_tokens": result["decoded_tokens"],
        "preemptions": stats["preemptions"],
        "engine_time_split": {k: stats[k] for k in ("compute_s", "compile_s", "host_s", "idle_s")},
    }


def profile(engine: Any, batch: int, context: int, prefill_tokens: int, work_dir: Path) -> dict[str, Any]:
    """A JAX profile of one decode call (a cached prompt, 2 tokens out) and one prefill; top ten kernels each."""
    import jax

    decode = [
        {"prompt": prompt_ids(engine.tokenizer, context, marker=i), "sampling": {"max_tokens": 2, "stop_token_ids": []}}
        for i in range(batch)
    ]
    prefill = [
        {
            "prompt": prompt_ids(engine.tokenizer, prefill_tokens, marker=batch + 1),
            "sampling": {"max_tokens": 1, "stop_token_ids": []},
        }
    ]
    out: dict[str, Any] = {}
    for name, reqs, clear in (("decode", decode, False), ("prefill", prefill, True)):
        engine.complete_many(reqs)  # compiled and (for decode) cached before the trace
        if clear:
            engine.clear_prefix_cache()
        trace_dir = Path(tempfile.mkdtemp(dir=work_dir, prefix=f"trace-{name}-"))
        with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
            engine.complete_many(reqs)
        out[name] = top_kernels(trace_dir)
    return out


def top_kernels(trace_dir: Path, n: int = 10) -> list[dict[str, Any]]:
    """The `n` event names with the most total time in a Perfetto trace JAX wrote: the device's kernels
    where the trace has a device process (GPU, TPU), else the XLA ops of the host's threads (CPU)."""
    files = sorted(trace_dir.rglob("*.trace.json.gz"))
    if not files:
        raise FileNotFoundError(f"JAX wrote no Perfetto trace under {trace_dir}")
    with gzip.open(files[-1], "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    device = {pid for pid, name in names.items() if "/device:" in name and "cpu" not in name.lower()}
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        if device and e.get("pid") not in device:
            continue
        if not device and not _xla_op(e):
            continue
        totals[e["name"]] += float(e["dur"])
        counts[e["name"]] += 1
    ranked = sorted(totals, key=totals.get, reverse=True)[:n]
    return [{"name": k[:160], "total_us": round(totals[k], 1), "calls": counts[k]} for k in ranked]


def _xla_op(event: dict[str, Any]) -> bool:
    """On CPU the trace has no device process: keep the events XLA's runtime names for ops (they carry an
    `hlo_op` or `hlo_module` argument), not Python's or the profiler's own."""
    args = event.get("args") or {}
    return "hlo_op" in args or "hlo_module" in args or "long_name" in args
