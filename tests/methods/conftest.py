"""Fixtures of the method tests: the in-process engine on the bundled SmolLM2, seen as an eval.llm.LLM."""
from __future__ import annotations

from typing import Any

import pytest

from eval.llm import LLMRequest, LLMResult


def _real_datasets_package() -> None:
    """Make `import datasets` mean the Hugging Face package (sentence-transformers imports it).

    tests/datasets/ is a package named `datasets` on pytest's rootdir path and shadows the real one;
    the test modules already imported from it keep working after the swap.
    """
    import importlib
    import sys
    from pathlib import Path

    tests_dir = Path(__file__).resolve().parents[1]
    mod = sys.modules.get("datasets")
    if mod is not None and not str(getattr(mod, "__file__", "") or "").startswith(str(tests_dir)):
        return
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != tests_dir]
    shadow = sys.modules.pop("datasets", None)
    try:
        importlib.import_module("datasets")
    except ImportError:
        if shadow is not None:
            sys.modules["datasets"] = shadow
    finally:
        sys.path[:] = saved


_real_datasets_package()


class EngineLLM:
    """eval.llm.LLM over an in-process engine.serving.Engine (what the Ray actor wraps in a run)."""

    def __init__(self, engine: Any, name: str = "smollm2-135m", supports_json_schema: bool = True) -> None:
        self.engine = engine
        self.name = name
        self.supports_json_schema = supports_json_schema

    def complete(self, request: LLMRequest) -> LLMResult:
        return LLMResult.from_dict(self.engine.complete(request.to_dict()))

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_gguf):
    from engine.model import load_model
    from engine.serving import Engine, EngineConfig

    eng = Engine(EngineConfig(num_pages=1024, page_size=16, max_batch=8, prefill_chunk=512),
                 model=load_model(smollm2_gguf))
    yield eng
    eng.shutdown()


@pytest.fixture(scope="session")
def engine_llm(smollm2_engine) -> EngineLLM:
    return EngineLLM(smollm2_engine)


@pytest.fixture(scope="session")
def engine_llm_free(smollm2_engine) -> EngineLLM:
    """The same engine declared without JSON-schema support: methods parse free text and retry."""
    return EngineLLM(smollm2_engine, supports_json_schema=False)
