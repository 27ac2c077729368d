"""Fixtures of the method tests (the shared engine fixtures live in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def engine_llm_free(smollm2_engine):
    """The shared engine declared without JSON-schema support: methods parse free text and retry."""
    from memloop.jobs.run.llm_adapters import EngineLLM

    return EngineLLM(smollm2_engine, name="smollm2-135m", supports_json_schema=False)
