"""Fixtures of the serving tests: one loaded SmolLM2 shared by the engines of the session."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def loaded_model(smollm2_gguf):
    from memloop.engine.model.decoder import load_model

    return load_model(smollm2_gguf)


def _engine(model, **kw):
    from memloop.engine.engine_config import EngineConfig
    from memloop.engine.sched.serving import Engine

    cfg = dict(num_pages=256, page_size=16, max_batch=32, prefill_chunk=256)
    cfg.update(kw)
    return Engine(EngineConfig(**cfg), model=model)


@pytest.fixture(scope="session")
def make_engine(loaded_model):
    """Build engines over the shared model; all are shut down at the end of the session."""
    made = []

    def make(**kw):
        eng = _engine(loaded_model, **kw)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.shutdown()


@pytest.fixture(scope="session")
def engine(make_engine):
    """Prefix cache on."""
    return make_engine()


@pytest.fixture(scope="session")
def engine_nocache(make_engine):
    return make_engine(prefix_cache=False)


@pytest.fixture(scope="module")
def base_url(engine):
    """The OpenAI-compatible server over the shared engine on 127.0.0.1 (a module may define its own)."""
    from memloop.engine.serve.server import create_app
    from tests.http_server import serve_app

    with serve_app(create_app(engine, "smollm2")) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    """The `openai` SDK pointed at `base_url`, as a user's script points it."""
    import openai

    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c
