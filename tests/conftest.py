"""Shared fixtures: the shared data folder, the bundled model, a local Ray instance."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

# Four simulated CPU devices so mesh-sharding tests run in the same process as everything else.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

# The tests read run configs directly, as the CLI and memloop.run do after loading the results floor,
# which registers the papers' table names the run config checks (memloop.jobs.run.config.register_paper_tables).
from memloop.jobs.results import paper_tables  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
SLOW_TIMEOUT_S = 3600  # a real-model end-to-end run (`-m slow`); the default tests' 600 s is in pyproject.toml


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A `slow` test without a deadline of its own gets SLOW_TIMEOUT_S instead of the default."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


# Linux refuses a process more than vm.max_map_count memory maps (65530 by default), and XLA's CPU backend maps
# each compiled program's code in several pieces that JAX's in-memory caches keep for the life of the process.
# One pytest process compiles thousands of programs (every engine shape of every test): near 60,000 maps by the
# end of tests/serving, and a program loaded past the limit kills the process (SIGSEGV or abort inside XLA's
# loader), not a test. So between modules, once the process holds a third of its allowance, JAX's caches are
# dropped: later programs come back from the on-disk compilation cache or are compiled again.
def max_map_count() -> int:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return 0  # not Linux: no such limit to keep under


def map_count() -> int:
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


@pytest.fixture(autouse=True, scope="module")
def _keep_under_the_map_limit():
    yield
    limit = max_map_count()
    if limit and "jax" in sys.modules and map_count() > limit // 3:
        sys.modules["jax"].clear_caches()
        gc.collect()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data next to the project, or skip with the reason."""
    path = Path(os.environ.get("MEMLOOP_SHARED_DATA", ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"shared test data not found at {path} (set MEMLOOP_SHARED_DATA to its location)")
    return path


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    from memloop.engine.assets import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_gguf):
    """One in-process serving engine on the bundled model, shared by every test that needs a real LLM."""
    from memloop.engine.core.engine import Engine, EngineConfig
    from memloop.engine.model.decoder import load_model

    eng = Engine(
        EngineConfig(num_pages=1024, page_size=16, max_batch=8, prefill_chunk=512), model=load_model(smollm2_gguf)
    )
    yield eng
    eng.shutdown()


@pytest.fixture(scope="session")
def engine_llm(smollm2_engine):
    """The shared engine as an `memloop.eval.llm.LLM` with JSON-schema constrained decoding."""
    from memloop.jobs.run.llm_adapters import EngineLLM

    return EngineLLM(smollm2_engine, name="smollm2-135m")


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance for the whole session (starting Ray costs seconds)."""
    import ray

    if not ray.is_initialized():
        from memloop.jobs.run.actors import quiet_private_auth

        quiet_private_auth()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()
