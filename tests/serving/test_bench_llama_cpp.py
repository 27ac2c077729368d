"""The llama.cpp peers of the benchmarks (bench/llama_cpp.py).

The OpenAI-endpoint driver and the server-process manager are generic, so they run here for real
against memloop's own server (`memloop serve`, the bundled SmolLM2) in a subprocess. The
llama-batched-bench parser reads output captured from the real binary built by `make peers`
(fixtures/llama_batched_bench_*.txt). The slow test builds (on first use) and runs both peers.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import httpx
import pytest
from memloop.bench.llama_cpp import (
    BATCHED_BENCH,
    SERVER,
    PeerError,
    PeerMissingError,
    PeerServerError,
    decode_rate,
    free_port,
    gguf_path,
    parse_batched_bench,
    peer_binary,
    run_openai_workload,
    serving,
)
from memloop.bench.prefix import build_workload, run_engine

FIXTURES = Path(__file__).parent / "fixtures"


ROOT = Path(__file__).resolve().parents[2]
CODE = {"PYTHONPATH": str(ROOT)}  # this checkout's memloop, whatever the environment has installed


def _memloop_serve(port: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from memloop.jobs.commands.cli import main; main()",
        "serve",
        "--port",
        str(port),
        "--kv-budget",
        str(64 << 20),
    ]


class _Boom(Exception):
    pass


def _unreachable(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=5)
    except httpx.TransportError:
        return True
    return False


@pytest.mark.timeout(600)
def test_openai_driver_against_memloop_serve_and_the_server_is_killed_on_error(engine):
    """A tiny workload through `memloop serve`'s /v1/completions: tokens counted from usage, greedy
    outputs returned in loop-major order (the same as the in-process engine's), the server process
    gone once the block is left by an exception."""
    w = build_workload(samples=2, steps=2, chunk_words=8)
    port = free_port()
    with pytest.raises(_Boom):
        with serving(_memloop_serve(port), port, "memloop-serve", startup_s=240, env=CODE) as url:
            # top_k 1: an extra field llama-server gets too (memloop refuses llama.cpp's own `cache_prompt` by name)
            out = run_openai_workload(url, w, max_tokens=4, extra={"top_k": 1})
            assert out["prompt_tokens"] == sum(engine.tokenizer.count_tokens(p) for loop in w for p in loop)
            assert 4 <= out["decoded_tokens"] <= 16
            assert out["cached_tokens"] > 0  # step 2 repeats step 1's prefix; the server reports it
            assert out["tokens_per_s"] == pytest.approx((out["prompt_tokens"] + out["decoded_tokens"]) / out["wall_s"])
            engine.clear_prefix_cache()
            assert out["texts"] == run_engine(engine, w, max_tokens=4)["texts"]
            raise _Boom
    assert _unreachable(url)


def test_a_server_that_exits_raises_with_its_output():
    port = free_port()
    with pytest.raises(PeerServerError, match=r"(?s)exited with status [1-9].*--port must be between 1 and 65535"):
        with serving(_memloop_serve(port)[:4] + ["--port", "70000"], port, "memloop-serve", startup_s=120, env=CODE):
            pass


def test_an_error_answer_names_the_endpoint(engine):
    from memloop.engine.serve.server import create_app

    from tests.http_server import serve_app

    with serve_app(create_app(engine, "smollm2")) as url:
        with pytest.raises(PeerServerError, match=r"/v1/completions answered 400"):
            run_openai_workload(url, [["x"]], max_tokens=-3)


def test_missing_binary_says_make_peers(tmp_path):
    for name in (SERVER, BATCHED_BENCH):
        with pytest.raises(PeerMissingError, match=r"make peers"):
            peer_binary(name, bin_dir=tmp_path)


def test_llama_cpp_needs_a_gguf_file(tmp_path):
    with pytest.raises(PeerError, match=r"need a GGUF file"):
        gguf_path(tmp_path)
    assert gguf_path(None).suffix == ".gguf"


@pytest.mark.parametrize("fixture", ["llama_batched_bench_jsonl.txt", "llama_batched_bench_md.txt"])
def test_batched_bench_output_is_parsed(fixture):
    """Output of the real llama-batched-bench (both of its formats, log lines included)."""
    rows = parse_batched_bench((FIXTURES / fixture).read_text())
    assert [(r["pp"], r["tg"], r["pl"]) for r in rows] == [(37, 32, 1), (37, 32, 4)]
    for r in rows:
        assert r["speed_tg"] == pytest.approx(r["pl"] * r["tg"] / r["t_tg"], rel=0.01)
    assert decode_rate(rows, 37, 4) == rows[1]["speed_tg"]
    with pytest.raises(PeerError, match=r"no row for 4096 prompt tokens at batch 1"):
        decode_rate(rows, 4096, 1)


def test_batched_bench_without_rows_is_an_error():
    with pytest.raises(PeerError, match=r"no result rows"):
        parse_batched_bench("llama_model_load: error loading model\nmain: failed\n")


def test_cli_rejects_unknown_peers():
    from memloop.jobs.commands.cli import app
    from typer.testing import CliRunner

    runner = CliRunner()
    out = runner.invoke(app, ["bench", "prefix", "--peer", "vllm"])
    assert out.exit_code == 2 and "llama-server" in out.output
    out = runner.invoke(app, ["bench", "prefix", "--kv-dtype", "fp8"])
    assert out.exit_code == 2 and "float16" in out.output and "int8" in out.output
    out = runner.invoke(app, ["bench", "model", "--peer", "llama-server"])
    assert out.exit_code == 2 and "llama-cpp" in out.output
    out = runner.invoke(app, ["bench", "model", "--kv-types", "float16,fp8"])
    assert out.exit_code == 2 and "fp8" in out.output and "int8" in out.output
    out = runner.invoke(app, ["bench", "model", "--peer", "llama-cpp", "--peer-variants", "spin"])
    assert out.exit_code == 2 and "spin" in out.output and "passive" in out.output


# A stand-in llama-batched-bench that reports, as its decode rate, whether it was started with
# OMP_WAIT_POLICY set (2.0) or not (1.0): what the peer sees of the environment it is given.
_ENV_PROBE = """#!/bin/sh
if [ -n "$OMP_WAIT_POLICY" ]; then rate=2.0; else rate=1.0; fi
printf '{"pp": 32, "tg": 8, "pl": 1, "n_kv": 40, "t_pp": 0.1, "speed_pp": 320.0, "t_tg": 0.1, "speed_tg": %s}\\n' "$rate"
"""


def test_a_peer_runs_in_the_callers_environment_unless_a_labelled_variant_is_asked(tmp_path, monkeypatch):
    from memloop.bench.llama_cpp import PEER_VARIANTS, batched_bench, peer_env

    probe = tmp_path / "llama-batched-bench"
    probe.write_text(_ENV_PROBE)
    probe.chmod(0o755)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("MEMLOOP_PEER_PROBE", "kept")
    assert peer_env() == dict(__import__("os").environ)  # nothing added: llama.cpp's own defaults
    assert "OMP_WAIT_POLICY" not in peer_env() and peer_env()["MEMLOOP_PEER_PROBE"] == "kept"
    assert peer_env("passive")["OMP_WAIT_POLICY"] == PEER_VARIANTS["passive"]["OMP_WAIT_POLICY"]
    rows = batched_bench(Path("m.gguf"), 2, [32], 8, [1], binary=probe)
    assert decode_rate(rows, 32, 1) == 1.0
    rows = batched_bench(Path("m.gguf"), 2, [32], 8, [1], variant="passive", binary=probe)
    assert decode_rate(rows, 32, 1) == 2.0
    with pytest.raises(PeerError, match=r"unknown peer variant 'spin'.*passive"):
        peer_env("spin")


def test_a_failed_peer_leaves_its_fields_null_with_the_reason():
    from memloop.bench.llama_cpp import peer_failed_fields

    out = peer_failed_fields("llama-batched-bench exited 139", (1024, 4096))
    assert out["llama_cpp_error"] == "llama-batched-bench exited 139"
    assert out["ratio_decode_b1_vs_llama_cpp"] is None and out["llama_cpp_decode_tps_b1_ctx4k"] is None
    assert out["ratio_decode_b1_ctx1k_vs_llama_cpp"] is None


def test_the_portable_build_turns_on_what_the_cpu_lists_and_amx_off():
    from memloop.bench.build_peers import portable_flags

    flags = portable_flags("processor : 0\nflags : fpu avx avx2 fma f16c avx512f amx_tile amx_int8\n")
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags and "-DGGML_AVX512=ON" in flags
    assert "-DGGML_AVX512_BF16=OFF" in flags and "-DGGML_AMX_TILE=OFF" in flags and "-DGGML_AMX_INT8=OFF" in flags


@pytest.mark.slow
def test_llama_cpp_peers_end_to_end(loaded_model):
    """Builds the peers on first use (`make peer-binaries`), then: a tiny workload through
    llama-server with 32 slots, and llama-batched-bench's rates with the ratios against memloop's."""
    if shutil.which("cmake") is None:
        pytest.fail("the peers need cmake and a C++ compiler: install them (apt-get install cmake g++)")
    from memloop.bench.llama_cpp import host_threads, model_bench_peer, run_llama_server
    from memloop.engine.runner.reference import DECODE_CHUNK

    model = gguf_path(None)
    w = build_workload(samples=3, steps=2, chunk_words=16)
    longest = max(loaded_model.tokenizer.count_tokens(p) for loop in w for p in loop)
    out = run_llama_server(model, w, 8, host_threads(), longest)
    assert out["slots"] == 32 and len(out["texts"]) == 6
    # the same text, the same GGUF vocabulary: llama-server counts the prompts as memloop does, give or take a BOS
    ours = sum(loaded_model.tokenizer.count_tokens(p) for loop in w for p in loop)
    assert abs(out["prompt_tokens"] - ours) <= 6
    assert 6 <= out["decoded_tokens"] <= 48 and out["tokens_per_s"] > 0
    memloop = {"decode_tps_b1": 100.0, "decode_tps_b32": 400.0, "decode_tps_b1_ctx1k": 50.0}
    figures = model_bench_peer(memloop, None, 8, 4, (1024,), log=lambda _: None)  # what --peer llama-cpp adds
    assert figures["llama_cpp_decode_tokens"] == max(DECODE_CHUNK, 8 // DECODE_CHUNK * DECODE_CHUNK)
    assert figures["llama_cpp_decode_tps_b1"] > 0 and figures["llama_cpp_decode_tps_b1_ctx1k"] > 0
    assert figures["ratio_decode_b1_vs_llama_cpp"] == pytest.approx(
        100.0 / figures["llama_cpp_decode_tps_b1"], rel=1e-2
    )
    assert figures["ratio_decode_b1_ctx1k_vs_llama_cpp"] == pytest.approx(
        50.0 / figures["llama_cpp_decode_tps_b1_ctx1k"], rel=1e-2
    )


# A stand-in llama-batched-bench whose first run loses its last row, as llama.cpp's unflushed logger
# thread does on a busy host; later runs print every row.
_LOSES_A_ROW = """#!/bin/sh
mark="$(dirname "$0")/ran"
row() { printf '{"pp": 32, "tg": 8, "pl": %s, "n_kv": 40, "t_pp": 0.1, "speed_pp": 320.0, "t_tg": 0.1, "speed_tg": %s}\\n' "$1" "$2"; }
row 1 5.0
if [ -e "$mark" ]; then row 32 40.0; fi
touch "$mark"
"""


def test_a_run_that_lost_a_row_is_run_again_until_every_row_is_there(tmp_path):
    from memloop.bench.llama_cpp import batched_bench

    probe = tmp_path / "llama-batched-bench"
    probe.write_text(_LOSES_A_ROW)
    probe.chmod(0o755)
    rows = batched_bench(Path("m.gguf"), 2, [32], 8, [1, 32], binary=probe)
    assert decode_rate(rows, 32, 1) == 5.0 and decode_rate(rows, 32, 32) == 40.0


_STAND_IN_SERVER = """
import http.server, os, sys
open(sys.argv[2], "w").write(str(os.getpid()))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

_BENCH_HOLDING_A_SERVER = """
import sys, time
from memloop.bench.llama_cpp import serving
port = int(sys.argv[1])
with serving([sys.executable, "-c", sys.argv[3], str(port), sys.argv[2]], port, "stand-in", startup_s=60):
    print("serving", flush=True)
    time.sleep(120)
"""


def test_a_bench_stopped_by_sigterm_takes_its_peer_server_with_it(tmp_path):
    """`kill PID` (SIGTERM) of a bench while the peer serves: the server process is gone too. Python's
    default SIGTERM skipped the block's cleanup and left llama-server decoding on both cores."""
    import os
    import signal
    import subprocess
    import time

    port, pid_file = free_port(), tmp_path / "server.pid"
    bench = subprocess.Popen(
        [sys.executable, "-c", _BENCH_HOLDING_A_SERVER, str(port), str(pid_file), _STAND_IN_SERVER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **CODE},
    )
    try:
        assert bench.stdout.readline().strip() == "serving"
        server_pid = int(pid_file.read_text())
        os.kill(server_pid, 0)  # alive
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=30) != 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(server_pid, signal.SIGKILL)
            pytest.fail("the peer server outlived the bench that SIGTERM stopped")
    finally:
        bench.kill()


# A stand-in llama-batched-bench that gets faster with every run (its decode rate is the run's number),
# and counts its runs: what "the best of N runs" picks, and how many runs were made.
_FASTER_EACH_RUN = """#!/bin/sh
count="$(dirname "$0")/runs"
n=$(( $(cat "$count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$count"
for pl in 1 4; do
printf '{"pp": 32, "tg": 8, "pl": %s, "n_kv": 40, "t_pp": 0.1, "speed_pp": 320.0, "t_tg": 0.1, "speed_tg": %s.0}\\n' "$pl" "$n"
done
"""


def test_every_side_is_timed_as_the_best_of_the_same_number_of_runs(tmp_path):
    """llama.cpp used to run once where memloop took the best of two: now each side's figure is the
    best of `TIMED_RUNS` timed runs, and the bench says so."""
    from memloop.bench.llama_cpp import llama_cpp_rates
    from memloop.bench.model import TIMED_RUNS, TIMING, _timed

    assert TIMED_RUNS >= 2 and f"best of {TIMED_RUNS}" in TIMING
    probe = tmp_path / "llama-batched-bench"
    probe.write_text(_FASTER_EACH_RUN)
    probe.chmod(0o755)
    rates = llama_cpp_rates(Path("m.gguf"), 2, 8, 4, (), short_prompt=32, binary=probe)
    assert int((tmp_path / "runs").read_text()) == TIMED_RUNS  # as many runs as memloop's and transformers'
    assert rates == {"llama_cpp_decode_tps_b1": float(TIMED_RUNS), "llama_cpp_decode_tps_b32": float(TIMED_RUNS)}
    calls = []
    _timed(lambda: calls.append(1))  # memloop's served decode and transformers' timings
    assert len(calls) == TIMED_RUNS


def test_the_peer_binaries_record_whether_they_are_the_native_or_the_portable_build(tmp_path):
    from memloop.bench.build_peers import record_build
    from memloop.bench.llama_cpp import peer_build

    assert peer_build(tmp_path).startswith("unrecorded")
    record_build(tmp_path, "portable", ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON"])
    assert peer_build(tmp_path) == "portable"
    record_build(tmp_path, "native", ["-DGGML_NATIVE=ON"])
    assert peer_build(tmp_path) == "native"


# A stand-in llama-batched-bench that prints a row for every prompt length (-npp) and sequence count
# (-npl) it is asked for, its prompt processing a rate of the prompt length and the run's number.
_EVERY_ASKED_ROW = """#!/bin/sh
count="$(dirname "$0")/runs"
n=$(( $(cat "$count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$count"
while [ $# -gt 0 ]; do case "$1" in -npp) npp="$2"; shift;; -npl) npl="$2"; shift;; esac; shift; done
for pp in $(echo "$npp" | tr ',' ' '); do for pl in $(echo "$npl" | tr ',' ' '); do
printf '{"pp": %s, "tg": 8, "pl": %s, "n_kv": 40, "t_pp": 0.1, "speed_pp": %s.0, "t_tg": 0.1, "speed_tg": 5.0}\\n' "$pp" "$pl" "$((pp + n))"
done; done
"""


def test_the_peers_prompt_processing_is_timed_at_memloops_prefill_length(tmp_path, monkeypatch):
    """With a prefill length, llama.cpp's prompt processing of a prompt that long at batch 1 joins the
    run (its speed_pp, the best of the timed runs) and bench model divides memloop's prefill by it."""
    from memloop.bench.llama_cpp import llama_cpp_model_figures, llama_cpp_rates, peer_failed_fields
    from memloop.bench.model import TIMED_RUNS

    probe = tmp_path / "llama-batched-bench"
    probe.write_text(_EVERY_ASKED_ROW)
    probe.chmod(0o755)
    rates = llama_cpp_rates(Path("m.gguf"), 2, 8, 4, (1024,), short_prompt=32, binary=probe, prefill_tokens=512)
    # runs 1..TIMED_RUNS each ran twice (the short prompt, then the long ones): the best is the last
    assert rates["llama_cpp_prefill_tps"] == 512.0 + 2 * TIMED_RUNS
    assert rates["llama_cpp_decode_tps_b1_ctx1k"] == 5.0
    assert "llama_cpp_prefill_tps" not in llama_cpp_rates(Path("m.gguf"), 2, 8, 4, (), short_prompt=32, binary=probe)
    import memloop.bench.llama_cpp as peer

    memloop = {"decode_tps_b1": 10.0, "decode_tps_b32": 20.0, "prefill_tps": 1000.0, "served_prefill_tps": 1200.0}
    monkeypatch.setattr(peer, "llama_cpp_rates", lambda *a, **k: llama_cpp_rates(*a, **{**k, "binary": probe}))
    monkeypatch.setattr(peer, "gguf_path", lambda model: Path("m.gguf"))
    figures = llama_cpp_model_figures(memloop, None, 8, 4, (), prefill_tokens=512, log=lambda _: None)
    assert figures["llama_cpp_prefill_tokens"] == 512
    assert figures["ratio_prefill_vs_llama_cpp"] == pytest.approx(1000.0 / figures["llama_cpp_prefill_tps"], rel=1e-3)
    # the serving engine's prefill of the same prompt, divided by the same peer figure
    assert figures["ratio_served_prefill_vs_llama_cpp"] == pytest.approx(
        1200.0 / figures["llama_cpp_prefill_tps"], rel=1e-3
    )
    out = peer_failed_fields("exited 139", ())
    assert out["llama_cpp_prefill_tps"] is None and out["ratio_prefill_vs_llama_cpp"] is None
    assert out["ratio_served_prefill_vs_llama_cpp"] is None


# Stand-ins for a peer build that starts but cannot run a model: both answer --version and --help, as
# the native build did on an Intel Xeon with AMX under KVM, and die of SIGSEGV once given a model.
_CRASHES_AT_MODEL_LOAD = """#!/bin/sh
case "$1" in --version|--help) echo "version: 1 (stand-in)"; exit 0;; esac
kill -SEGV $$
"""
# Stand-ins for a build that runs: the batched bench prints a row for its arguments; the server loads
# "the model", answers /health and one completion, and notes each request body beside itself.
_BATCHED_RUNS = """#!/bin/sh
printf '{"pp": 32, "tg": 8, "pl": 1, "n_kv": 40, "t_pp": 0.1, "speed_pp": 320.0, "t_tg": 0.1, "speed_tg": 80.0}\\n'
"""
_SERVER_RUNS = """#!{python}
import http.server, json, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
seen = open(__file__ + ".requests", "a")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{{"status": "ok"}}')
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        seen.write(json.dumps(body) + "\\n"); seen.flush()
        out = json.dumps({{"choices": [{{"text": " x" * body["max_tokens"]}}],
                          "usage": {{"prompt_tokens": 32, "completion_tokens": body["max_tokens"]}}}}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _stand_in_build(bin_dir: Path, runs_a_model: bool) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = (
        {BATCHED_BENCH: _BATCHED_RUNS, SERVER: _SERVER_RUNS.format(python=sys.executable)}
        if runs_a_model
        else {BATCHED_BENCH: _CRASHES_AT_MODEL_LOAD, SERVER: _CRASHES_AT_MODEL_LOAD}
    )
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


def test_a_build_that_starts_but_crashes_at_model_load_fails_the_check(tmp_path):
    """The check used to start each binary without a model (--version, --help), which such a build
    passes; now it runs the model, batched and served, and says how the binary died."""
    from memloop.bench.build_peers import check_binaries, runs

    _stand_in_build(tmp_path, runs_a_model=False)
    assert runs([str(tmp_path / SERVER), "--version"])[0]  # what the old check ran
    ok, why = check_binaries(tmp_path, gguf_path(None))
    assert not ok
    assert "-npp 32 -ntg 8" in why and "SIGSEGV (exit 139 in a shell)" in why


def test_a_native_build_that_cannot_run_a_model_is_rebuilt_portably_and_the_record_says_why(tmp_path):
    import json

    from memloop.bench.build_peers import build_peer_binaries
    from memloop.bench.llama_cpp import peer_build

    built = []

    def build(src: Path, bin_dir: Path, flags: list[str], name: str) -> None:
        built.append((name, flags))
        _stand_in_build(bin_dir, runs_a_model=name == "portable")

    bin_dir = tmp_path / "bin"
    assert build_peer_binaries(tmp_path, bin_dir, gguf_path(None), build=build) == "portable"
    assert [n for n, _ in built] == ["native", "portable"] and "-DGGML_AMX_TILE=OFF" in built[1][1]
    record = json.loads((bin_dir / "build.json").read_text())
    assert record["build"] == "portable" == peer_build(bin_dir)
    assert record["why"].startswith("native: ") and "SIGSEGV" in record["why"]
    assert "prompt 32, decode 8" in record["checked"] and "llama-server" in record["checked"]
    served = [json.loads(line) for line in (bin_dir / (SERVER + ".requests")).read_text().splitlines()]
    assert [r["max_tokens"] for r in served] == [8]  # the served check decoded through the endpoint


def test_the_first_build_that_runs_a_model_is_kept_and_recorded(tmp_path):
    import json

    from memloop.bench.build_peers import build_peer_binaries

    names = []
    build = lambda src, bin_dir, flags, name: (names.append(name), _stand_in_build(bin_dir, runs_a_model=True))
    assert build_peer_binaries(tmp_path, tmp_path / "bin", gguf_path(None), build=build) == "native"
    assert names == ["native"]
    record = json.loads((tmp_path / "bin" / "build.json").read_text())
    assert record["build"] == "native" and record["passed_over"] == [] and "first one tried" in record["why"]


def test_a_peer_that_cannot_run_here_is_found_before_the_bench_and_named_first(tmp_path):
    from memloop.bench.llama_cpp import cannot_run_line, peer_cannot_run

    _stand_in_build(tmp_path / "bad", runs_a_model=False)
    _stand_in_build(tmp_path / "good", runs_a_model=True)
    for name in (BATCHED_BENCH, SERVER):
        reason = peer_cannot_run(name, None, tmp_path / "bad")
        assert reason is not None and "SIGSEGV" in reason
        assert peer_cannot_run(name, None, tmp_path / "good") is None
        line = cannot_run_line(name, reason)
        assert line.startswith("PEER CANNOT RUN ON THIS HOST") and name in line and "SIGSEGV" in line


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_bench_model_with_a_peer_that_cannot_run_says_so_on_its_first_line(tmp_path):
    """`memloop bench model --peer llama-cpp` with a peer that crashes at model load: the first line of
    its output says the peer cannot run here; memloop's figures follow with the peer's fields null."""
    import os
    import subprocess

    _stand_in_build(tmp_path, runs_a_model=False)
    cmd = [
        sys.executable,
        "-c",
        "from memloop.jobs.commands.cli import main; main()",
        "bench",
        "model",
        "--peer",
        "llama-cpp",
        "--greedy-tokens",
        "2",
        "--decode-tokens",
        "8",
        "--prefill-tokens",
        "16",
        "--batch",
        "2",
        "--no-long-contexts",
        "--no-gather-peer",
        "--kv-types",
        "",
        "--no-f64-reference",
        "--no-dense-peer",
    ]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=1700,
        env={**os.environ, **CODE, "MEMLOOP_PEERS_BIN": str(tmp_path)},
    )
    lines = done.stdout.splitlines()
    assert lines and lines[0].startswith("PEER CANNOT RUN ON THIS HOST"), done.stdout[:2000] + done.stderr[-2000:]
    assert "llama-batched-bench" in lines[0] and "SIGSEGV" in lines[0]
    assert done.returncode == 1 and any(x.startswith("decode_tps_b1 ") for x in lines)
    assert any(x.split() == ["ratio_decode_b1_vs_llama_cpp", "None"] for x in lines)
