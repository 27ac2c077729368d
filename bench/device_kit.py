"""What a device run of `bench gpu` carries: the wheels the GPU machine's image lacks, and a tokenizer.

The GPU machine has no package registry; its image (listed in `DEVICE_IMAGE`, as the device tool's
KINDS.md reads it) holds JAX, Flax, transformers and PyTorch but not everything memloop's engine imports.
`make device-kit` downloads the missing ones (`KIT`, at the versions `make device-env` tested) for Python
3.12 manylinux into `.device-kit/wheels/`, saves SmolLM2's tokenizer to `.device-kit/tokenizer/`, and
prints every file with the total size (the working tree that travels is at most 64 MiB).

`missing_on_device(modules)` reads the source of the engine and bench modules a run loaded and names every
third-party import (lazy ones too) whose distribution is in neither the image nor the kit; the tests run
`bench gpu --tiny` and check that list is empty, so a new import the device lacks fails here first.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

# The device image's Python packages (KINDS.md, "Python packages already there", read 2026-11-17).
DEVICE_IMAGE = frozenset(
    """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio interface-meta iniconfig jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq
torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split()
)

# What the engine and `bench gpu` import that the image lacks (memloop.engine.sample.sampling: pydantic; constrained
# decoding: llguidance and jsonschema; GGUF files: gguf), with what those need in turn.
KIT = (
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "llguidance",
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    "gguf",
)
# pip matches a manylinux tag exactly: name every glibc level a wheel may be tagged with (the image's is 2.39).
PLATFORMS = tuple(f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)) + ("manylinux2014_x86_64", "manylinux1_x86_64")
# Project packages and the ones pip itself vendors count as present.
OWN = frozenset({"memloop", "tests", "_pytest", "pytest"})


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def allowed() -> frozenset[str]:
    return DEVICE_IMAGE | {normalise(n) for n in KIT}


def imports_of(module_names: list[str]) -> set[str]:
    """Top-level third-party names that the source of these (memloop) modules imports anywhere, lazily inside
    functions too: what the device must be able to import if the code runs every path of those modules."""
    names: set[str] = set()
    for name in module_names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        tree = ast.parse(Path(spec.origin).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in OWN}


def missing_on_device(module_names: list[str]) -> dict[str, list[str]]:
    """Import names these modules use whose distributions neither the device image nor the kit holds
    (name -> its distributions here; [] when this environment has none either)."""
    owners = md.packages_distributions()
    ok = allowed()
    return {
        n: list(owners.get(n, []))
        for n in sorted(imports_of(module_names))
        if not any(normalise(d) in ok for d in owners.get(n, []))
    }


def loaded_project_modules() -> list[str]:
    """The engine's and the benchmarks' modules this process has imported (what a device run loads)."""
    return sorted(m for m in sys.modules if m.startswith(("memloop.engine", "memloop.bench")))


def download(dest: Path) -> list[Path]:
    """The kit's wheels at this environment's installed versions, for Python 3.12 manylinux x86-64."""
    wheels = dest / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={md.version(name)}" for name in KIT]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "-d",
        str(wheels),
    ]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + pins, check=True)
    return sorted(wheels.glob("*.whl"))


def save_tokenizer(dest: Path) -> Path:
    from memloop.bench.gpu_models import tokenizer_dir_default

    return tokenizer_dir_default(dest)


# The one device command (docs/engine-serving.md, "On a GPU"): the kit onto the image's Python, then the bench.
DEVICE_COMMAND = (
    "set -o pipefail; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "
    "/tmp/site .device-kit/wheels/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 "
    "XLA_PYTHON_CLIENT_PREALLOCATE=false && python3 -m memloop.bench.gpu --out $OUT --budget-s 480 "
    "--tokenizer .device-kit/tokenizer 2>&1 | tee $OUT/log.txt"
)


def main(dest: Path) -> None:
    files = download(dest) + sorted(p for p in save_tokenizer(dest).iterdir() if p.is_file())
    total = 0
    for f in files:
        size = f.stat().st_size
        total += size
        print(f"{size / 2**20:8.2f} MiB  {f.relative_to(dest)}")
    print(f"{total / 2**20:8.2f} MiB  in all ({len(files)} files) under {dest}; the device command:")
    print(DEVICE_COMMAND)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".device-kit"))
