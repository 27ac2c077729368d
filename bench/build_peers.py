"""Builds llama.cpp's peer binaries so that they run on this host, and checks that they do.

`make peer-binaries` runs this with the system Python (standard library only). It builds
`llama-server` and `llama-batched-bench` with `GGML_NATIVE=ON` (what llama.cpp's users get by
default), then runs each binary once. A native build can crash at start on a host whose CPU
reports instructions the compiler's native target mishandles (seen: AMX hosts, exit 139); then
it rebuilds portably, `GGML_NATIVE=OFF` with the x86 extensions /proc/cpuinfo lists turned on
one by one and AMX off, and checks again. A build that still does not run is an error naming both
attempts. `--python-peer` does the same for llama-cpp-python in `.venv-peers` (CMAKE_ARGS).

    python3 bench/build_peers.py SRC_DIR BIN_DIR          # the binaries
    python3 bench/build_peers.py --python-peer VERSION    # llama-cpp-python in .venv-peers
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("llama-server", "llama-batched-bench")
COMMON = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF",
          "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
          "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DBUILD_SHARED_LIBS=OFF"]
# /proc/cpuinfo flag -> llama.cpp's CMake switch for it (the portable build turns on what the host has)
ISA_SWITCHES = (("avx", "GGML_AVX"), ("avx2", "GGML_AVX2"), ("fma", "GGML_FMA"), ("f16c", "GGML_F16C"),
                ("avx512f", "GGML_AVX512"), ("avx512vbmi", "GGML_AVX512_VBMI"),
                ("avx512_vnni", "GGML_AVX512_VNNI"), ("avx512_bf16", "GGML_AVX512_BF16"))
AMX_OFF = ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]


class BuildError(RuntimeError):
    """The peers could not be built so that they run here."""


def portable_flags(cpuinfo: str) -> list[str]:
    """CMake flags for a portable build with the x86 extensions `cpuinfo` lists (AMX always off)."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return (["-DGGML_NATIVE=OFF"] + [f"-D{switch}={'ON' if flag in flags else 'OFF'}" for flag, switch in ISA_SWITCHES]
            + AMX_OFF)


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
    return False, f"{' '.join(cmd)} exited {done.returncode}: {(done.stdout + done.stderr)[-400:]}"


def build_binaries(src: Path, bin_dir: Path, flags: list[str]) -> None:
    build = src / "build"
    shutil.rmtree(build, ignore_errors=True)
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *COMMON, *flags], check=True)
    subprocess.run(["cmake", "--build", str(build), "-j2", "--target", *TARGETS], check=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for t in TARGETS:
        shutil.copy2(build / "bin" / t, bin_dir / t)


BUILD_RECORD = "build.json"  # beside the binaries: which build of them runs here (bench results cite it)


def record_build(bin_dir: Path, name: str, flags: list[str]) -> Path:
    """Write which build ("native" or "portable") and with what flags the binaries in `bin_dir` are."""
    path = bin_dir / BUILD_RECORD
    path.write_text(json.dumps({"build": name, "flags": flags}) + "\n")
    return path


def check_binaries(bin_dir: Path) -> tuple[bool, str]:
    ok, why = runs([str(bin_dir / "llama-server"), "--version"])
    if ok:
        ok, why = runs([str(bin_dir / "llama-batched-bench"), "--help"])
    return ok, why


def build_peer_binaries(src: Path, bin_dir: Path) -> str:
    """Native build first, the portable one when the native binaries do not run; returns which ran."""
    attempts = []
    for name, flags in (("native", ["-DGGML_NATIVE=ON"]), ("portable", portable_flags(host_cpuinfo()))):
        build_binaries(src, bin_dir, flags)
        ok, why = check_binaries(bin_dir)
        if ok:
            print(f"llama.cpp peers: the {name} build runs here ({' '.join(flags)})", file=sys.stderr)
            record_build(bin_dir, name, flags)
            return name
        print(f"llama.cpp peers: the {name} build does not run here: {why}", file=sys.stderr)
        attempts.append(f"{name}: {why}")
    raise BuildError("llama.cpp's peers build but do not run on this host (" + "; ".join(attempts) + "); report "
                     "the CPU (`lscpu`) with this message")


def python_peer_runs(python: Path) -> tuple[bool, str]:
    """A check-run of llama-cpp-python: import it and load the bundled GGUF's vocabulary."""
    script = ("import sys, llama_cpp; from pathlib import Path; "
              "m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, vocab_only=True, verbose=False); "
              "print(len(m.tokenize(b'hello')))")
    gguf = next(iter(sorted((ROOT / ".venv").glob("lib/python*/site-packages/**/*.gguf"))), None)
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
            print(build_peer_binaries(Path(sys.argv[1]), Path(sys.argv[2])))
    except (BuildError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
