"""Fixtures of the serving tests: one loaded SmolLM2 shared by the engines of the session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def loaded_model(smollm2_gguf):
    from memloop.engine.model.decoder import load_model

    return load_model(smollm2_gguf)


def _engine(model, **kw):
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig

    cfg = dict(num_pages=256, page_size=16, max_batch=32, prefill_chunk=256)
    cfg.update(kw)
    return Engine(EngineConfig(**cfg), model=model)


def _factory(model):
    """A maker of engines over `model` and the list of what it made (to shut down)."""
    made = []

    def make(**kw):
        eng = _engine(model, **kw)
        made.append(eng)
        return eng

    return make, made


@pytest.fixture(scope="session")
def _session_engines(loaded_model):
    """The engines shared by the whole session, shut down at its end."""
    make, made = _factory(loaded_model)
    yield make
    for eng in made:
        eng.shutdown()


@pytest.fixture()
def make_engine(loaded_model):
    """Build engines of one test over the shared model; they are shut down when the test ends, so their KV
    pools and step threads do not pile up over the session."""
    make, made = _factory(loaded_model)
    yield make
    for eng in made:
        eng.shutdown()


@pytest.fixture(scope="session")
def engine(_session_engines):
    """Prefix cache on."""
    return _session_engines()


@pytest.fixture(scope="session")
def engine_nocache(_session_engines):
    return _session_engines(prefix_cache=False)


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
