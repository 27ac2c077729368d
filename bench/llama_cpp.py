"""llama.cpp as the speed peer: `llama-server` (OpenAI endpoint, parallel slots, continuous batching)
and `llama-batched-bench` (raw batched decode rates), both built by `make peers` from the llama.cpp
vendored in the pinned llama-cpp-python sdist, CPU only, into `.peers/bin/`.

- `run_openai_workload` drives a memory-loop workload through any OpenAI-compatible
  `/v1/completions` endpoint (llama-server here; memloop's own server in the tests), measured as
  `memloop.bench.prefix.run_engine` measures memloop: all loops concurrently, each loop's steps in order,
  greedy, (prompt + decoded tokens) / wall seconds of the whole workload. It sends the exact prompt
  *text* memloop gets (memloop's server takes text only; both tokenise it with the GGUF's own
  vocabulary) and counts tokens from each server's `usage` fields, so a tokeniser difference
  shows up as a differing `prompt_tokens`, never as a silently different rate.
- `serving(...)` runs a server process for the duration of a `with` block: a free port on
  127.0.0.1, `/health` awaited before anything is timed, the process always killed on the way out.
- `batched_bench` runs `llama-batched-bench --output-format jsonl` and `parse_batched_bench`
  reads its rows (the markdown table of versions without jsonl as well).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from memloop.bench.prefix import run_loops, workload_totals
from memloop.engine.errors import EngineError

ROOT = Path(__file__).resolve().parents[1]
# MEMLOOP_PEERS_BIN: binaries built elsewhere (`make peer-binaries` puts them in .peers/bin)
PEERS_BIN = Path(os.environ.get("MEMLOOP_PEERS_BIN") or ROOT / ".peers" / "bin")
SERVER = "llama-server"
BATCHED_BENCH = "llama-batched-bench"
# A peer runs as its users run it: the caller's environment, llama.cpp's own defaults (its OpenMP
# threads spin while waiting). A variant is only ever an extra, labelled measurement, never the
# denominator of a ratio: passive waiting costs llama.cpp most of its batch-1 speed on a quiet host.
PEER_VARIANTS: dict[str, dict[str, str]] = {"passive": {"OMP_WAIT_POLICY": "PASSIVE"}}


def peer_env(variant: str | None = None) -> dict[str, str]:
    """The environment a peer process gets: the caller's, plus a named variant's settings."""
    if variant is not None and variant not in PEER_VARIANTS:
        raise PeerError(f"unknown peer variant {variant!r}; choose one of {sorted(PEER_VARIANTS)}")
    return {**os.environ, **PEER_VARIANTS.get(variant or "", {})}


class PeerError(EngineError):
    """A llama.cpp peer could not be built, started or run."""


class PeerMissingError(PeerError):
    """A peer binary is not where `make peers` puts it."""


class PeerServerError(PeerError):
    """A peer server did not come up, died, or answered a request with an error."""


def host_threads() -> int:
    """The threads memloop computes with: every core this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def peer_build(bin_dir: Path = PEERS_BIN) -> str:
    """Which build of the peer binaries runs here, as `make peers` recorded it (bench/build_peers.py):
    "native" or "portable"; "unrecorded" for binaries built before it recorded the build."""
    try:
        return str(json.loads((bin_dir / "build.json").read_text())["build"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unrecorded (rebuild with `rm -rf .peers/bin && make peers` to record it)"


def peer_binary(name: str, bin_dir: Path = PEERS_BIN, build: bool = True) -> Path:
    """Path of a llama.cpp binary; built with `make peer-binaries` on first use when `build`."""
    path = bin_dir / name
    if not path.is_file() and build and bin_dir == PEERS_BIN:
        print(
            f"compiling llama.cpp's {SERVER} and {BATCHED_BENCH} with `make peer-binaries` "
            "(CMake, 2 jobs: about 15 minutes on a 2-core host) ...",
            file=sys.stderr,
            flush=True,
        )
        # the GGUF the build's check-run loads: the bundled one, wherever this environment installed it
        done = subprocess.run(["make", "-C", str(ROOT), "peer-binaries", f"PEER_GGUF={gguf_path(None)}"])
        if done.returncode != 0:
            raise PeerError(
                f"`make peer-binaries` failed (exit {done.returncode}); see its output above, fix the "
                "cause (cmake and a C++ compiler are needed) and run `make peers` again"
            )
    if not path.is_file():
        raise PeerMissingError(f"{path} is missing; build llama.cpp's peers with `make peers`")
    return path


def peer_cannot_run(name: str, model: str | os.PathLike | None, bin_dir: Path = PEERS_BIN) -> str | None:
    """Why the peer binary `name` (SERVER or BATCHED_BENCH) cannot run `model` here, or None when it can:
    the check `make peer-binaries` runs on every build (a 32-token prompt, 8 decoded tokens; for the
    server, one completion through its endpoint), run again before a bench's long memloop part, since
    binaries built on another host, or before the check existed, may crash at model load here."""
    from memloop.bench.build_peers import batched_check_command, runs, served_check

    path, threads = gguf_path(model), min(2, host_threads())
    if name == BATCHED_BENCH:
        ok, why = runs(batched_check_command(bin_dir, path, threads))
    elif name == SERVER:
        ok, why = served_check(bin_dir, path, threads)
    else:
        raise PeerError(f"no check-run for {name!r}; the peers are {SERVER} and {BATCHED_BENCH}")
    return None if ok else why


def cannot_run_line(name: str, reason: str) -> str:
    """The first line a bench prints when its peer cannot run on this host."""
    return (
        f"PEER CANNOT RUN ON THIS HOST: llama.cpp's {name} ({peer_build()} build) failed its check-run, so "
        f"this bench gives memloop's figures and no ratio against it: {reason.splitlines()[0][:600]}; "
        "rebuild with `rm -rf .peers/bin && make peer-binaries` (it falls back to a portable build)"
    )


def gguf_path(model: str | os.PathLike | None) -> Path:
    """The GGUF file a model setting names (None: the bundled SmolLM2); llama.cpp reads GGUF only."""
    from memloop.engine.assets import resolve_model

    path = resolve_model(model)
    if not (path.is_file() and path.suffix == ".gguf"):
        raise PeerError(
            f"llama.cpp's peers need a GGUF file, and {path} is not one; pass --model a .gguf "
            "file or a packaged model name"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, chars: int = 1500) -> str:
    return path.read_text(errors="replace")[-chars:].strip() if path.exists() else ""


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within the block a SIGTERM raises KeyboardInterrupt in the main thread, so cleanup code runs.
    Python's default SIGTERM ends the process at once: a bench stopped that way left its peer server
    running on both cores. A handler the caller installed is left in force."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def serving(
    cmd: list[str], port: int, name: str, startup_s: float = 300, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run the server `cmd` (listening on 127.0.0.1:`port`) until the block ends; yields its base URL
    once `/health` answers 200. A server that exits or stays unhealthy raises PeerServerError with
    the tail of its output; the process is killed on every way out of the block, a SIGTERM included."""
    with sigterm_unwinds():
        with _serving(cmd, port, name, startup_s, env) as url:
            yield url


@contextlib.contextmanager
def _serving(cmd: list[str], port: int, name: str, startup_s: float, env: dict[str, str] | None) -> Iterator[str]:
    import httpx

    url = f"http://127.0.0.1:{port}"
    with tempfile.NamedTemporaryFile("w+b", prefix=f"{name}-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise PeerServerError(
                    f"{name} exited with status {proc.returncode} before it was healthy; its "
                    f"output ends:\n{_tail(log_path)}\n(command: {' '.join(cmd)}); fix the cause "
                    "above, or rebuild the peers with `rm -rf .peers/bin && make peers`"
                )
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise PeerServerError(
                    f"{name} was not healthy within {startup_s:.0f} s; its output ends:\n"
                    f"{_tail(log_path)}\n(command: {' '.join(cmd)}); a large model on a busy host "
                    "loads slowly: retry when the host is quieter"
                )
            time.sleep(0.25)
        yield url
    finally:
        from memloop.bench.build_peers import stop

        stop(proc)
        log_path.unlink(missing_ok=True)


def run_openai_workload(
    base_url: str,
    workload: list[list[str]],
    max_tokens: int,
    extra: dict[str, Any] | None = None,
    timeout_s: float = 3600,
) -> dict[str, Any]:
    """All loops concurrently (one client thread each), each loop's steps in order, through
    `/v1/completions`: greedy, `max_tokens` at most, `extra` fields added to every request body.
    Returns what `memloop.bench.prefix.run_engine` returns, tokens from the server's `usage` (cached
    tokens where the server reports them, else None), texts in loop-major order."""
    import httpx

    def post(client: httpx.Client, prompt: str) -> dict[str, Any]:
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, **(extra or {})}
        r = client.post("/v1/completions", json=body)
        if r.status_code != 200:
            raise PeerServerError(f"{base_url}/v1/completions answered {r.status_code}: {r.text[:500]}")
        return r.json()

    with httpx.Client(
        base_url=base_url,
        timeout=timeout_s,
        limits=httpx.Limits(max_connections=len(workload), max_keepalive_connections=len(workload)),
    ) as c:
        results, wall = run_loops(workload, lambda p: post(c, p))
    usage = [r["usage"] for r in results]
    prompt = sum(u["prompt_tokens"] for u in usage)
    decoded = sum(u["completion_tokens"] for u in usage)
    details = [u.get("prompt_tokens_details") or {} for u in usage]
    cached = sum(d["cached_tokens"] for d in details) if all("cached_tokens" in d for d in details) else None
    return workload_totals(wall, prompt, cached, decoded, [r["choices"][0]["text"] for r in results])


def llama_server_command(
    binary: Path, model: Path, port: int, threads: int, slots: int, ctx: int, cache_ram_mib: int = 4096
) -> list[str]:
    """llama-server on 127.0.0.1, CPU, `slots` parallel slots with continuous batching, `ctx` tokens of
    KV in all (ctx / slots per slot), its host-memory prompt cache (`--cache-ram`) on."""
    return [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(threads),
        "-tb",
        str(threads),
        "-np",
        str(slots),
        "-c",
        str(ctx),
        "--cont-batching",
        "--cache-ram",
        str(cache_ram_mib),
        "--no-webui",
    ]


def run_llama_server(
    model: Path,
    workload: list[list[str]],
    max_tokens: int,
    threads: int,
    longest_prompt: int,
    slots: int = 32,
    variant: str | None = None,
) -> dict[str, Any]:
    """The workload through llama-server with `slots` slots, each with room for the longest prompt
    (`longest_prompt` tokens, counted by memloop's tokenizer) plus the output; `cache_prompt` on
    every request. One untimed request warms it up (page faults of the weights) before timing."""
    binary = peer_binary(SERVER)
    per_slot = (longest_prompt + max_tokens + 64 + 255) // 256 * 256  # margin for a BOS and tokenizer differences
    port = free_port()
    cmd = llama_server_command(binary, model, port, threads, slots, slots * per_slot)
    extra = {"cache_prompt": True, "top_k": 1}  # top_k 1: greedy whatever llama.cpp's sampler chain does at temp 0
    with serving(cmd, port, SERVER, env=peer_env(variant)) as url:
        run_openai_workload(url, [["Warm-up."]], 4, extra)
        out = run_openai_workload(url, workload, max_tokens, extra)
    out.update(slots=slots, ctx_per_slot=per_slot)
    return out


_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|" + r"\s*([\d.]+)\s*\|" * 6)
_TABLE_KEYS = ("pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed")


def parse_batched_bench(output: str) -> list[dict[str, float]]:
    """The result rows of llama-batched-bench's output (its jsonl lines, or its markdown table), each
    with pp (prompt tokens), tg (decoded tokens), pl (parallel sequences), speed_tg (decode tokens/s
    over all sequences), speed_pp, t_pp, t_tg, n_kv. Log lines around them are ignored."""
    rows: list[dict[str, float]] = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            rows.append(json.loads(line))
        elif m := _ROW.match(line):
            rows.append({k: float(v) if "." in v else int(v) for k, v in zip(_TABLE_KEYS, m.groups())})
    if not rows:
        raise PeerError(
            "llama-batched-bench printed no result rows; its output ends:\n"
            f"{output[-1500:]}\n(rebuild it with `rm -rf .peers/bin && make peers`)"
        )
    return rows


def batched_bench(
    model: Path,
    threads: int,
    prompt_lengths: list[int],
    decode_tokens: int,
    batches: list[int],
    variant: str | None = None,
    binary: Path | None = None,
) -> list[dict[str, float]]:
    """Run llama-batched-bench (CPU, `threads` threads) for every prompt length x batch; rows as
    `parse_batched_bench` gives them. Prompts are separate per sequence (not shared)."""
    binary = binary or peer_binary(BATCHED_BENCH)
    # whole 256-token blocks per sequence: llama.cpp rounds a context not divisible by the sequences down
    ctx = max(batches) * ((max(prompt_lengths) + decode_tokens + 255) // 256 * 256)
    cmd = [
        str(binary),
        "-m",
        str(model),
        "-t",
        str(threads),
        "-tb",
        str(threads),
        "-c",
        str(ctx),
        "-npp",
        ",".join(map(str, prompt_lengths)),
        "-ntg",
        str(decode_tokens),
        "-npl",
        ",".join(map(str, batches)),
        "--output-format",
        "jsonl",
    ]
    want = {(pp, pl) for pp in prompt_lengths for pl in batches}
    for attempt in range(BATCHED_BENCH_RUNS):
        done = subprocess.run(cmd, capture_output=True, text=True, env=peer_env(variant))
        if done.returncode != 0:
            raise PeerError(
                f"{BATCHED_BENCH} failed (exit {done.returncode}); its output ends:\n"
                f"{(done.stdout + done.stderr)[-1500:]}\n(command: {' '.join(cmd)}); rebuild with "
                "`rm -rf .peers/bin && make peers`"
            )
        # llama.cpp's logger writes from a thread that is never flushed at exit (the leaked singleton
        # of common/log.cpp), so on a busy host a successful run can lose its last lines or print
        # nothing at all: run it again until every asked-for row is there
        text = done.stdout + "\n" + done.stderr
        if text.strip() and want <= {(int(r["pp"]), int(r["pl"])) for r in _rows_or_none(text)}:
            break
    return parse_batched_bench(text)


BATCHED_BENCH_RUNS = 3


def _rows_or_none(text: str) -> list[dict[str, float]]:
    try:
        return parse_batched_bench(text)
    except PeerError:
        return []


def decode_rate(rows: list[dict[str, float]], pp: int, pl: int) -> float:
    """speed_tg of the row with `pp` prompt tokens and `pl` sequences."""
    for row in rows:
        if int(row["pp"]) == pp and int(row["pl"]) == pl:
            return float(row["speed_tg"])
    raise PeerError(
        f"llama-batched-bench gave no row for {pp} prompt tokens at batch {pl} (it skips rows whose "
        "KV does not fit its context); rows: " + json.dumps(rows)[:800]
    )


def best_rows(runs: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """Per (prompt tokens, sequences), the row of the fastest decode among `runs` (each a list of rows):
    the best of the runs, the statistic bench model takes of memloop and transformers too."""
    best: dict[tuple[int, int], dict[str, float]] = {}
    for rows in runs:
        for row in rows:
            key = (int(row["pp"]), int(row["pl"]))
            if key not in best or float(row["speed_tg"]) > float(best[key]["speed_tg"]):
                best[key] = row
    return list(best.values())


def prefill_rate(rows: list[dict[str, float]], pp: int) -> float:
    """speed_pp (prompt tokens over prompt-processing seconds) of the batch-1 row with `pp` prompt tokens."""
    for row in rows:
        if int(row["pp"]) == pp and int(row["pl"]) == 1:
            return float(row["speed_pp"])
    raise PeerError(
        f"llama-batched-bench gave no row for {pp} prompt tokens at batch 1; rows: " + json.dumps(rows)[:800]
    )


def llama_cpp_rates(
    path: Path,
    threads: int,
    decode_tokens: int,
    batch: int,
    contexts: tuple[int, ...],
    short_prompt: int,
    variant: str | None = None,
    prefix: str = "llama_cpp",
    runs: int | None = None,
    binary: Path | None = None,
    prefill_tokens: int | None = None,
) -> dict[str, float]:
    """llama-batched-bench's decode tokens/s at batch 1 and `batch` after `short_prompt` tokens, and at
    batch 1 after each of `contexts`, as `{prefix}_decode_tps_b1`, `..._b32`, `..._b1_ctx4k` fields;
    with `prefill_tokens`, also its prompt processing of a prompt that long at batch 1
    (`{prefix}_prefill_tps`, its speed_pp): each the best of `runs` runs (default
    `memloop.bench.model.TIMED_RUNS`, as memloop's and transformers' figures)."""
    from memloop.bench.model import TIMED_RUNS

    longer = sorted({*contexts, *((prefill_tokens,) if prefill_tokens else ())})
    timed = []
    for _ in range(runs or TIMED_RUNS):
        rows = batched_bench(path, threads, [short_prompt], decode_tokens, [1, batch], variant=variant, binary=binary)
        if longer:
            rows += batched_bench(path, threads, longer, decode_tokens, [1], variant=variant, binary=binary)
        timed.append(rows)
    rows = best_rows(timed)
    out = {
        f"{prefix}_decode_tps_b1": round(decode_rate(rows, short_prompt, 1), 2),
        f"{prefix}_decode_tps_b32": round(decode_rate(rows, short_prompt, batch), 2),
    }
    for c in contexts:
        out[f"{prefix}_decode_tps_b1_{_ctx_key(c)}"] = round(decode_rate(rows, c, 1), 2)
    if prefill_tokens:
        out[f"{prefix}_prefill_tps"] = round(max(prefill_rate(r, prefill_tokens) for r in timed), 1)
    return out


def llama_cpp_model_figures(
    memloop: dict[str, Any],
    model: str | os.PathLike | None,
    decode_tokens: int,
    batch: int,
    contexts: tuple[int, ...],
    short_prompt: int = 32,
    threads: int | None = None,
    variants: tuple[str, ...] = (),
    log=print,
    prefill_tokens: int | None = None,
) -> dict[str, Any]:
    """llama.cpp's decode tokens/s on the same GGUF with memloop's threads, at batch 1 and `batch`
    after a `short_prompt`-token prompt, and at batch 1 after each of `contexts` prompt tokens,
    and (`prefill_tokens`) its prompt processing of a prompt as long as memloop's prefill figure's,
    with memloop's rates from the same run (`memloop`: bench model's result) divided by them. The
    ratios' denominators are llama.cpp at its defaults; each of `variants` (PEER_VARIANTS) adds its
    own labelled rates (`llama_cpp_passive_decode_tps_b1`, ...) and no ratio."""
    path = gguf_path(model)
    threads = threads or host_threads()
    from memloop.bench.model import TIMED_RUNS

    out: dict[str, Any] = {
        "llama_cpp_threads": threads,
        "llama_cpp_decode_tokens": decode_tokens,
        "llama_cpp_env": "defaults (the caller's environment)",
        "llama_cpp_build": peer_build(),
        "llama_cpp_timed_runs": TIMED_RUNS,
    }
    out.update(
        llama_cpp_rates(path, threads, decode_tokens, batch, contexts, short_prompt, prefill_tokens=prefill_tokens)
    )
    if prefill_tokens:
        out["llama_cpp_prefill_tokens"] = prefill_tokens
        out["ratio_prefill_vs_llama_cpp"] = round(memloop["prefill_tps"] / out["llama_cpp_prefill_tps"], 3)
        if "served_prefill_tps" in memloop:  # the serving engine's paged prefill of the same prompt
            out["ratio_served_prefill_vs_llama_cpp"] = round(
                memloop["served_prefill_tps"] / out["llama_cpp_prefill_tps"], 3
            )
    out["ratio_decode_b1_vs_llama_cpp"] = round(memloop["decode_tps_b1"] / out["llama_cpp_decode_tps_b1"], 3)
    out["ratio_decode_b32_vs_llama_cpp"] = round(memloop["decode_tps_b32"] / out["llama_cpp_decode_tps_b32"], 3)
    for c in contexts:
        key = _ctx_key(c)
        if f"decode_tps_b1_{key}" in memloop:
            out[f"ratio_decode_b1_{key}_vs_llama_cpp"] = round(
                memloop[f"decode_tps_b1_{key}"] / out[f"llama_cpp_decode_tps_b1_{key}"], 3
            )
    for v in variants:
        out.update(
            llama_cpp_rates(
                path, threads, decode_tokens, batch, contexts, short_prompt, variant=v, prefix=f"llama_cpp_{v}"
            )
        )
    log(
        "llama.cpp (llama-batched-bench, its defaults): decode b1 {} tok/s, b{} {} tok/s; ".format(
            out["llama_cpp_decode_tps_b1"], batch, out["llama_cpp_decode_tps_b32"]
        )
        + ", ".join(f"ctx {c} b1 {out[f'llama_cpp_decode_tps_b1_{_ctx_key(c)}']} tok/s" for c in contexts)
        + (f"; prefill of {prefill_tokens} tokens {out['llama_cpp_prefill_tps']} tok/s" if prefill_tokens else "")
    )
    return out


def peer_failed_fields(reason: str, contexts: tuple[int, ...]) -> dict[str, Any]:
    """The peer's fields as nulls with the reason: memloop's own figures still stand and print."""
    out: dict[str, Any] = {"llama_cpp_error": reason}
    for name in (
        "llama_cpp_decode_tps_b1",
        "llama_cpp_decode_tps_b32",
        "ratio_decode_b1_vs_llama_cpp",
        "ratio_decode_b32_vs_llama_cpp",
        "llama_cpp_prefill_tps",
        "ratio_prefill_vs_llama_cpp",
        "ratio_served_prefill_vs_llama_cpp",
    ):
        out[name] = None
    for c in contexts:
        out[f"llama_cpp_decode_tps_b1_{_ctx_key(c)}"] = None
        out[f"ratio_decode_b1_{_ctx_key(c)}_vs_llama_cpp"] = None
    return out


def model_bench_peer(
    memloop: dict[str, Any],
    model: str | os.PathLike | None,
    decode_tokens: int,
    batch: int,
    contexts: tuple[int, ...],
    variants: tuple[str, ...] = (),
    log=print,
    prefill_tokens: int | None = None,
) -> dict[str, Any]:
    """`memloop bench model --peer llama-cpp`: llama.cpp measured as memloop was in `memloop` (its
    result): the decode steps it timed (`decode_tokens` rounded to the decode chunk, as memloop.bench.model
    does) after a prompt as long as the chat prompt its batch-1 decode follows, and the prompt
    processing of a `prefill_tokens`-token prompt (memloop's `prefill_tps`, when given)."""
    from memloop.bench.model import PROMPTS
    from memloop.engine.model.tokenizer import load_tokenizer
    from memloop.engine.runner.reference import DECODE_CHUNK

    steps = max(DECODE_CHUNK, decode_tokens // DECODE_CHUNK * DECODE_CHUNK)
    short = len(load_tokenizer(gguf_path(model)).chat_ids(PROMPTS[0]))
    return llama_cpp_model_figures(
        memloop,
        model,
        steps,
        batch,
        contexts,
        short_prompt=short,
        variants=variants,
        log=log,
        prefill_tokens=prefill_tokens if "prefill_tps" in memloop else None,
    )


def _ctx_key(context: int) -> str:
    """The suffix bench model uses for a context length: ctx1k, ctx4k, ctx1500."""
    return f"ctx{context // 1024}k" if context % 1024 == 0 else f"ctx{context}"
