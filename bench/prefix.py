"""PRISM-style prefix-cache benchmark: K memory loops of N steps, against peers measured in the same run.

Each loop's prompt at step i is: instructions + memory schema (the same for every loop), the loop's
memory so far (amendments appended in order, never rewritten), and a new chunk. Step i+1 therefore
repeats step i's prompt up to the end of its memory -- the case PRISM's amendments are designed for.
The text is generated deterministically (seeded), and the same prompts go to every engine.

Two workloads (`WORKLOADS`): `papers` (the default) has the shape of the seed papers' runs -- every
loop reads the same book in chunks of about 1024 tokens, its memory grows by about 256 tokens of
revisions a step, and each step decodes up to 256 tokens, 32 loops of 8 steps, so prompts reach 3k
tokens; `short` is the earlier quick one (40-word chunks of a story of each loop's own, 16 tokens out).

  memloop, prefix cache on   -- K loops concurrently (continuous batching)
  memloop, prefix cache off  -- the same, every prompt token computed
  llama-cpp-python (--peer llama-cpp) -- the same GGUF in `.venv-peers`, its RAM prompt cache on,
                                the loops run one after another (it serves one request at a time)
  llama-server (--peer llama-server)  -- llama.cpp's server on the same GGUF and threads, 32 parallel
                                slots, continuous batching, `cache_prompt` and its host prompt cache
                                on, the loops concurrently through its OpenAI endpoint (bench/llama_cpp.py)

tokens/s = (prompt + decoded tokens) / wall seconds of the whole workload.

`cacheable_fraction` is the ceiling any prefix cache can reach on the workload: each prompt's
longest common prefix with any earlier prompt (loops advance step by step), in whole pages and
short of the last token (whose logits must be computed). `cached_fraction / cacheable_fraction` says
how much of that the engine actually served from its cache; the rest of the gap to 1.0 is the
workload itself (every new chunk and the previous step's amendments are new text).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
PEER_PYTHON = ROOT / ".venv-peers" / "bin" / "python"

INSTRUCTIONS = """You read a long story one chunk at a time and keep a structured memory of it.
The memory is a typed hierarchy described by the schema below. After each chunk you propose
revisions to the memory: each revision names a path in the memory, an operation (add a new path,
or update an existing one) and the new value. The memory is shown as amendments: later lines with
the same path replace earlier ones. Propose only what the chunk supports, keep values short, and
answer with one revision per line as JSON: {"path": ..., "op": "add" | "update", "value": ...}.

Schema:
class StoryMemory:
    characters: dict[str, list[str]]  # keyed by name; who they are and what they do
    events: dict[str, list[str]]      # keyed by a short event name; what happened and why
    places: dict[str, list[str]]      # keyed by place; what happens there
    relations: dict[str, str]         # keyed by "A -> B"; how A relates to B
    open_questions: list[str]         # what the story has not answered yet

Query: summarise the story once every chunk has been read.
"""

_NAMES = ["Anna", "Tomas", "Iris", "Bekele", "Mara", "Oskar", "Lin", "Ravi", "Sofia", "Jonah", "Ada", "Kofi"]
_PLACES = ["the harbour", "the mill", "the old library", "the ridge", "the market", "the lighthouse", "the farm"]
_VERBS = ["found", "hid", "carried", "lost", "repaired", "sold", "burned", "buried", "painted", "stole"]
_THINGS = ["a letter", "the lantern", "a silver key", "the map", "a wooden box", "the ledger", "a coat"]
_TAILS = ["before the storm", "at dawn", "without a word", "for the second time", "while the town slept"]


def _sentence(rng: random.Random) -> str:
    return (
        f"{rng.choice(_NAMES)} {rng.choice(_VERBS)} {rng.choice(_THINGS)} at {rng.choice(_PLACES)} "
        f"{rng.choice(_TAILS)}."
    )


def _chunk(rng: random.Random, words: int) -> str:
    out: list[str] = []
    while sum(len(s.split()) for s in out) < words:
        out.append(_sentence(rng))
    return " ".join(out)


def cacheable_tokens(token_lists: list[list[list[int]]], page_size: int) -> int:
    """Tokens a perfect page-granular prefix cache could serve: prompts in step-major order (every loop's
    step i before any step i+1, as concurrent loops submit them), each matched against all earlier ones."""
    import numpy as np

    order = [loop[i] for i in range(max(map(len, token_lists), default=0)) for loop in token_lists if i < len(loop)]
    seen: list[np.ndarray] = []
    total = 0
    for ids in order:
        cur = np.asarray(ids)
        best = 0
        for prev in seen:
            m = min(len(prev), len(cur))
            diff = np.flatnonzero(prev[:m] != cur[:m])
            best = max(best, int(diff[0]) if diff.size else m)
        total += min(best, len(cur) - 1) // page_size * page_size
        seen.append(cur)
    return total


def _amendment(rng: random.Random, step: int) -> str:
    name = rng.choice(_NAMES)
    return json.dumps(
        {
            "path": f"$.characters.'{name}'",
            "op": "add",
            "value": [f"{rng.choice(_VERBS)} {rng.choice(_THINGS)} (chunk {step})"],
        }
    )


# The workloads' settings; command-line options override any of them.
WORKLOADS: dict[str, dict[str, Any]] = {
    # ~1024-token chunks (768 words of the generated story) of one shared book, ~256 tokens of
    # revisions appended per step (8 amendments of ~32 tokens), up to 256 tokens out; 32 loops x 8 steps.
    # KV for all 32 loops at their longest (~3.6k tokens x 45 KB of f32 keys and values a token for
    # SmolLM2, 5.3 GB), as llama-server gets its 32 slots': at 3 GiB the full shape preempted and
    # evicted, caching 32% of its prompt tokens against a 51% ceiling (all of it at 6 GiB).
    "papers": {
        "samples": 32,
        "steps": 8,
        "max_tokens": 256,
        "chunk_words": 768,
        "revisions": 8,
        "shared_book": True,
        "kv_budget": 6 << 30,
    },
    "short": {
        "samples": 32,
        "steps": 4,
        "max_tokens": 16,
        "chunk_words": 40,
        "revisions": 2,
        "shared_book": False,
        "kv_budget": 1 << 30,
    },
}


def build_workload(
    samples: int, steps: int, chunk_words: int = 40, seed: int = 0, revisions: int = 2, shared_book: bool = False
) -> list[list[str]]:
    """prompts[k][i]: loop k's prompt at step i (deterministic); each step appends `revisions`
    amendments to the loop's memory. With `shared_book` every loop reads the same chunks (one book,
    many methods or settings over it); otherwise each loop reads a story of its own."""
    book = random.Random(seed * 1_000_003 - 1)
    chunks = [_chunk(book, chunk_words) for _ in range(steps)] if shared_book else None
    workload = []
    for k in range(samples):
        rng = random.Random(seed * 1_000_003 + k)
        memory: list[str] = []
        prompts = []
        for i in range(steps):
            chunk = chunks[i] if chunks is not None else _chunk(rng, chunk_words)
            prompts.append(
                f"{INSTRUCTIONS}\nMemory (amendments):\n"
                + "\n".join(memory)
                + f"\n\nChunk {i + 1}:\n{chunk}\n\nRevisions:\n"
            )
            memory.extend(_amendment(rng, i + 1) for _ in range(revisions))  # append-only memory
        workload.append(prompts)
    return workload


def workload_settings(name: str, **overrides: Any) -> dict[str, Any]:
    """A named workload's settings with the given (non-None) overrides; an unknown name is an error."""
    if name not in WORKLOADS:
        from memloop.engine.errors import EngineError

        raise EngineError(f"unknown workload {name!r}; choose one of {sorted(WORKLOADS)}")
    return {**WORKLOADS[name], **{k: v for k, v in overrides.items() if v is not None}}


def run_loops(workload: list[list[str]], step: Callable[[str], dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """All loops concurrently (a thread each), each loop's steps in order: every step's answer, loop-major,
    and the wall time; the engine and its peers are timed the same way."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(workload)) as pool:
        results = [r for rs in pool.map(lambda prompts: [step(p) for p in prompts], workload) for r in rs]
    return results, time.perf_counter() - t0


def workload_totals(wall: float, prompt: int, cached: int | None, decoded: int, texts: list[str]) -> dict[str, Any]:
    """What a workload's run reports, whoever served it: token totals, wall time and the texts."""
    return {
        "wall_s": wall,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "decoded_tokens": decoded,
        "tokens_per_s": (prompt + decoded) / wall,
        "texts": texts,
    }


def run_engine(engine: Any, workload: list[list[str]], max_tokens: int) -> dict[str, Any]:
    """All loops concurrently; each loop's steps in order. Returns token totals and wall time."""
    sampling = {"max_tokens": max_tokens, "temperature": 0.0}
    results, wall = run_loops(workload, lambda p: engine.complete({"prompt": p, "sampling": sampling}))
    prompt = sum(r["usage"]["prompt_tokens"] for r in results)
    cached = sum(r["usage"]["cached_tokens"] for r in results)
    decoded = sum(r["usage"]["decoded_tokens"] for r in results)
    return workload_totals(wall, prompt, cached, decoded, [r["text"] for r in results])


# use_extra_bufts=False: llama.cpp's AMX weight-repacking buffers (chosen automatically on CPUs with
# AMX) crash with a segmentation fault in this kind of VM; the plain CPU kernels are used instead.
_PEER_SCRIPT = r"""
import json, sys, time
import llama_cpp.llama_cpp as C
_defaults = C.llama_model_default_params
def _params():
    p = _defaults()
    p.use_extra_bufts = False
    return p
C.llama_model_default_params = _params
from llama_cpp import Llama, LlamaRAMCache
spec = json.load(open(sys.argv[1]))
llm = Llama(model_path=spec["model"], n_ctx=spec["n_ctx"], n_threads=spec["threads"], n_batch=512,
            verbose=False, seed=0)
llm.set_cache(LlamaRAMCache(capacity_bytes=spec["cache_bytes"]))
prompt = decoded = 0
t0 = time.perf_counter()
for prompts in spec["workload"]:
    for p in prompts:
        out = llm(p, max_tokens=spec["max_tokens"], temperature=0.0, top_k=1)
        prompt += out["usage"]["prompt_tokens"]
        decoded += out["usage"]["completion_tokens"]
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "prompt_tokens": prompt, "decoded_tokens": decoded,
                  "tokens_per_s": (prompt + decoded) / wall}))
"""


def ensure_peers() -> Path:
    """The llama-cpp-python environment, built by `make peers` on first use (compiles for ~10 minutes)."""
    if not PEER_PYTHON.exists():
        print("building .venv-peers (llama-cpp-python compiles for about 10 minutes) ...", file=sys.stderr, flush=True)
        # only this environment: `make peers` would also compile llama.cpp's binaries, which this peer does not use
        subprocess.run(["make", "-C", str(ROOT), ".venv-peers/.installed"], check=True)
    return PEER_PYTHON


def run_llama_cpp(model_path: Path, workload: list[list[str]], max_tokens: int, threads: int) -> dict[str, Any]:
    """The same workload through llama-cpp-python in its own environment (a subprocess, never imported here)."""
    python = ensure_peers()
    spec = {
        "model": str(model_path),
        "workload": workload,
        "max_tokens": max_tokens,
        "threads": threads,
        "n_ctx": 4096,
        "cache_bytes": 2 << 30,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        from memloop.bench.llama_cpp import peer_env

        proc = subprocess.run([str(python), "-c", _PEER_SCRIPT, f.name], capture_output=True, text=True, env=peer_env())
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        from memloop.engine.errors import EngineError

        raise EngineError(
            f"the llama-cpp-python peer failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}; "
            "rebuild it with `rm -rf .venv-peers && make peers`"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


PEERS = (None, "llama-cpp", "llama-server")
MAX_BATCH = 32  # memloop decodes up to 32 sequences together; llama-server gets as many slots


def main(
    workload_name: str = "papers",
    peer: str | None = None,
    emit=print,
    cache_off: bool = True,
    warmup: bool = True,
    kv_dtype: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Run the named workload (settings overridden by `overrides`: samples, steps, max_tokens,
    chunk_words, revisions, shared_book, kv_budget) on memloop with the cache on and off, and `peer`.

    `cache_off=False` skips the cache-off engine (its fields are null); `warmup=False` skips the
    untimed pass, so the timed one also compiles each new step shape (`engine_time_split.compile_s`
    says how long; it counts against memloop). Both exist for the full `papers` shape on a 2-core
    host, where each memloop pass takes about 30 minutes. `kv_dtype` is memloop's KV-cache type
    (None: the compute dtype, f32 on CPU; llama-server keeps its own default, f16)."""
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig
    from memloop.engine.model.decoder import load_model

    if peer not in PEERS:
        from memloop.engine.errors import EngineError

        raise EngineError(f"unknown peer {peer!r}; choose one of {sorted(p for p in PEERS if p)}")
    server_failed = None
    if peer == "llama-server":  # find the peer and check it runs the model before the long memloop part
        from memloop.bench.llama_cpp import SERVER, cannot_run_line, peer_binary, peer_cannot_run

        peer_binary(SERVER)
        server_failed = peer_cannot_run(SERVER, None)
        if server_failed is not None:  # said first; memloop's figures follow, the peer's are null
            emit(cannot_run_line(SERVER, server_failed))
    ws = workload_settings(workload_name, **overrides)
    samples, steps, max_tokens, kv_budget = ws["samples"], ws["steps"], ws["max_tokens"], ws["kv_budget"]
    workload = build_workload(
        samples, steps, ws["chunk_words"], revisions=ws["revisions"], shared_book=ws["shared_book"]
    )
    from memloop.engine.attention.pallas import resolve_backend

    # a Pallas kernel (the accelerator default) reads per-layer pools in place: the unrolled layout
    lm = load_model(None, unroll=True if resolve_backend().kernel else None)
    results: dict[str, Any] = {
        "workload": workload_name,
        **{k: v for k, v in ws.items() if k != "kv_budget"},
        "kv_budget_bytes": kv_budget,
        "kv_dtype": kv_dtype or lm.dtype.name,
        "weight_path": lm.weight_path["weights"],
        "kernel_isa": lm.weight_path["isa"],
    }
    runs = {}
    passes = [("cache_on", True)] + ([("cache_off", False)] if cache_off else [])
    for name, cache_on in passes:
        engine = Engine(
            EngineConfig(kv_budget=kv_budget, max_batch=MAX_BATCH, prefix_cache=cache_on, kv_dtype=kv_dtype), model=lm
        )
        try:
            # steady state: one untimed pass compiles every step shape the workload reaches (one
            # program per bucket, a few seconds each for the CPU engine's unrolled layers)
            warm = run_engine(engine, workload, max_tokens) if warmup else None
            engine.clear_prefix_cache()
            engine.reset_counters()
            runs[name] = run_engine(engine, workload, max_tokens)
            runs[name]["warmup_s"] = warm["wall_s"] if warm else None
            stats = engine.stats()
            runs[name]["preemptions"] = stats["preemptions"]
            runs[name]["time_split"] = {k: stats[k] for k in ("wall_s", "compute_s", "compile_s", "host_s", "idle_s")}
        finally:
            engine.shutdown()
        r = runs[name]
        warm_note = f"untimed warm-up pass {r['warmup_s']:.1f} s" if warmup else "no warm-up pass"
        emit(
            f"memloop {name}: {r['tokens_per_s']:.1f} tokens/s ({r['prompt_tokens']} prompt, {r['cached_tokens']} "
            f"cached, {r['decoded_tokens']} decoded tokens in {r['wall_s']:.1f} s; {warm_note}; "
            f"engine time split {r['time_split']})"
        )
    on, off = runs["cache_on"], runs.get("cache_off")
    if off is None:
        emit("memloop cache_off: not run (--no-cache-off)")
    page_size = EngineConfig().page_size
    cacheable = cacheable_tokens([[lm.tokenizer.encode(p) for p in loop] for loop in workload], page_size)
    results.update(
        cached_fraction=on["cached_tokens"] / on["prompt_tokens"],
        cacheable_fraction=cacheable / on["prompt_tokens"],
        cached_of_cacheable=on["cached_tokens"] / max(cacheable, 1),
        prompt_tokens=on["prompt_tokens"],
        tokens_per_s=on["tokens_per_s"],
        tokens_per_s_cache_off=off and off["tokens_per_s"],
        ratio_vs_cache_off=off and on["tokens_per_s"] / off["tokens_per_s"],
        greedy_identical_cache_on_off=off and on["texts"] == off["texts"],
        wall_s=on["wall_s"],
        wall_s_cache_off=off and off["wall_s"],
        warmup_s=on["warmup_s"],
        decoded_tokens=on["decoded_tokens"],
        preemptions=on["preemptions"],
        engine_time_split=on["time_split"],
    )
    results.update(accelerator_figures(lm, kv_budget, emit))
    if peer == "llama-cpp":
        from memloop.bench.llama_cpp import host_threads

        lc = run_llama_cpp(lm.path, workload, max_tokens, host_threads())
        emit(
            f"llama-cpp-python: {lc['tokens_per_s']:.1f} tokens/s ({lc['prompt_tokens']} prompt, "
            f"{lc['decoded_tokens']} decoded tokens in {lc['wall_s']:.1f} s)"
        )
        results.update(
            llama_cpp_tokens_per_s=lc["tokens_per_s"],
            llama_cpp_wall_s=lc["wall_s"],
            ratio_vs_llama_cpp=on["tokens_per_s"] / lc["tokens_per_s"],
        )
    if peer == "llama-server" and server_failed is None:
        results.update(llama_server_figures(lm, workload, max_tokens, on, emit))
    elif peer == "llama-server":
        results.update(llama_server_error=server_failed, llama_server_tokens_per_s=None, ratio_vs_llama_server=None)
    return results


def llama_server_figures(
    lm: Any, workload: list[list[str]], max_tokens: int, on: dict[str, Any], emit=print
) -> dict[str, Any]:
    """The workload through llama-server (memloop.bench.llama_cpp) against memloop's cache-on run `on`."""
    from memloop.bench.llama_cpp import gguf_path, host_threads, run_llama_server

    longest = max(lm.tokenizer.count_tokens(p) for loop in workload for p in loop)
    ls = run_llama_server(gguf_path(lm.path), workload, max_tokens, host_threads(), longest, slots=MAX_BATCH)
    same = sum(a == b for a, b in zip(ls["texts"], on["texts"]))
    emit(
        f"llama-server ({ls['slots']} slots, {ls['ctx_per_slot']} tokens each): {ls['tokens_per_s']:.1f} tokens/s "
        f"({ls['prompt_tokens']} prompt, {ls['cached_tokens']} cached, {ls['decoded_tokens']} decoded tokens in "
        f"{ls['wall_s']:.1f} s; {same}/{len(ls['texts'])} outputs identical to memloop's)"
    )
    return {
        "llama_server_tokens_per_s": ls["tokens_per_s"],
        "llama_server_wall_s": ls["wall_s"],
        "llama_server_prompt_tokens": ls["prompt_tokens"],
        "llama_server_cached_tokens": ls["cached_tokens"],
        "llama_server_decoded_tokens": ls["decoded_tokens"],
        "llama_server_slots": ls["slots"],
        "llama_server_outputs_identical_fraction": same / len(ls["texts"]),
        "ratio_vs_llama_server": on["tokens_per_s"] / ls["tokens_per_s"],
    }


def accelerator_figures(lm: Any, kv_budget: float, emit=print) -> dict[str, Any]:
    """`accelerator`, `decode_hbm_fraction` (batch 64) and `prefill_mfu` of the serving engine on this
    device (its default attention backend: the platform's Pallas kernel); all null on CPU."""
    from memloop.bench.accelerators import accelerator_field, engine_figures, this_accelerator
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig

    found = this_accelerator(emit)
    out: dict[str, Any] = {"accelerator": accelerator_field(found), "decode_hbm_fraction": None, "prefill_mfu": None}
    if found is None:
        return out
    engine = Engine(EngineConfig(kv_budget=kv_budget, max_batch=64, prefix_cache=True), model=lm)
    try:
        out.update(engine_figures(engine, found[1], batch=64, log=emit))
        out["attention"] = engine.attention.kind
    finally:
        engine.shutdown()
    emit(
        f"{found[1].name} ({out['attention']} attention): decode at batch 64 reaches "
        f"{out['decode_hbm_fraction']} of the HBM bound, prefill MFU {out['prefill_mfu']}"
    )
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
