"""Fixtures of the judge tests."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[1]


def _import_real_datasets() -> None:
    """sentence-transformers imports Hugging Face `datasets`; with tests/ on sys.path (pytest's default
    import mode) the test package tests/datasets shadows it. Import the real one first."""
    mod = sys.modules.get("datasets")
    if mod is not None and Path(getattr(mod, "__file__", "") or "").resolve().parent.parent != _TESTS:
        return
    saved_path = sys.path[:]
    shadow = {k: v for k, v in sys.modules.items() if k == "datasets" or k.startswith("datasets.")}
    for k in shadow:
        del sys.modules[k]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _TESTS]
    try:
        importlib.import_module("datasets")
    finally:
        sys.path[:] = saved_path
        for k, v in shadow.items():  # keep already-collected test modules importable by name
            if k != "datasets":
                sys.modules.setdefault(k, v)


_import_real_datasets()


import pytest  # noqa: E402

from eval.llm import LLMRequest, LLMResult  # noqa: E402


class EngineLLM:
    """eval.llm.LLM over the in-process engine (`engine.serving.Engine`), as the Ray actor wraps it in a run."""

    def __init__(self, engine, name: str = "smollm2-135m") -> None:
        self.engine = engine
        self.name = name
        self.supports_json_schema = True

    def complete(self, request: LLMRequest) -> LLMResult:
        return LLMResult.from_dict(self.engine.complete(request.to_dict()))

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)


@pytest.fixture(scope="module")
def engine_llm(smollm2_gguf):
    from engine.model import load_model
    from engine.serving import Engine, EngineConfig

    eng = Engine(EngineConfig(num_pages=1024, page_size=16, max_batch=8, prefill_chunk=512), model=load_model(smollm2_gguf))
    yield EngineLLM(eng)
    eng.shutdown()
