"""`EngineConfig` speaks only the engine's own names and says which ones exist."""

from __future__ import annotations

from pathlib import Path

import pytest
from memloop.engine.engine_config import EngineConfig
from memloop.engine.errors import EngineError


def test_from_dict_round_trips_and_accepts_a_path() -> None:
    cfg = EngineConfig.from_dict({"model": Path("/m/model.gguf"), "kv_budget": 0.5, "max_batch": 8, "tp": 2})
    assert cfg.model == "/m/model.gguf" and cfg.max_batch == 8
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg
    assert EngineConfig.of(cfg) is cfg and EngineConfig.of(None) == EngineConfig()


@pytest.mark.parametrize("name", ["page_budget", "model_path", "path", "mesh"])
def test_other_vocabularies_are_rejected_naming_the_valid_fields(name: str) -> None:
    with pytest.raises(EngineError) as err:
        EngineConfig.from_dict({name: 1})
    assert name in str(err.value)
    assert all(f in str(err.value) for f in ("kv_budget", "model", "dtype", "tp"))


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"dtype": "auto"}, "dtype"),
        ({"dtype": "f32"}, "dtype"),
        ({"kv_budget": -1}, "kv_budget"),
        ({"kv_budget": "1GB"}, "kv_budget"),
        ({"page_size": 0}, "page_size"),
        ({"max_batch": 2.5}, "max_batch"),
        ({"num_pages": 1}, "num_pages"),
        ({"prefix_cache": "yes"}, "prefix_cache"),
        ({"tp": True}, "tp"),
        ({"model": 3}, "model"),
        ({"attention": "flash"}, "attention"),
        ({"pallas_interpret": "yes"}, "pallas_interpret"),
        ({"quantize": "int4"}, "quantize"),
        ({"kv_dtype": "fp8"}, "kv_dtype"),
    ],
)
def test_bad_values_name_the_setting(bad: dict, field: str) -> None:
    with pytest.raises(EngineError, match=f"`{field}`"):
        EngineConfig.from_dict(bad)


def test_a_non_mapping_is_named() -> None:
    with pytest.raises(EngineError, match="mapping"):
        EngineConfig.from_dict(["kv_budget", 1])  # type: ignore[arg-type]
