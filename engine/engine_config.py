"""`EngineConfig`: what a serving engine is built with, in the engine's own field names.

(`memloop.engine.model.config` is the *model's* architecture config; this is the serving engine's.) The Ray actor,
`memloop serve` and in-process users all build it the same way: `EngineConfig(...)` in code, or
`EngineConfig.from_dict(d)` from plain data, which rejects unknown fields by naming the valid ones.
Callers with other vocabularies (the run config's `page_budget`, `dtype: auto`) translate before
calling; the engine does not know their names.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from memloop.engine.errors import EngineError

DTYPES = ("float32", "bfloat16", "float16")
# The paged KV cache's element types: a float type, or int8 codes with an f32 scale per (token, KV head)
# (memloop.engine.cache.kv_pages).
KV_DTYPES = (*DTYPES, "int8")
# auto: the platform's Pallas kernel on TPU/GPU; on CPU the gather path with decode read in place by the
# C++ kernel where the model supports it (memloop.engine.kernels.attention). gather: the gather path only.
ATTENTION_BACKENDS = ("auto", "gather", "pallas-tpu", "pallas-gpu")
QUANTIZATIONS = ("int8",)
# Settings that change what the model outputs (the rest only change speed, memory or placement): a
# caller that keys results by configuration (a run id) must include these.
OUTPUT_FIELDS = ("model", "dtype", "quantize", "kv_dtype")


@dataclass(frozen=True)
class EngineConfig:
    """model: a GGUF file or Hugging Face directory (None = the bundled SmolLM2).
    dtype: compute dtype, one of DTYPES (None = float32 on CPU, bfloat16 on accelerators).
    kv_budget: bytes for the paged KV cache (> 1), or a fraction of device memory (<= 1).
    num_pages: overrides kv_budget with an exact page count (tests of memory pressure).
    max_context: longest prompt + output a request may use (None = the model's own limit).
    tp: tensor-parallel devices (a 1-D `tp` mesh); None = one device.
    attention: decode-attention backend, one of ATTENTION_BACKENDS (a kernel on a platform that cannot
        run it is an AttentionBackendError).
    pallas_interpret: run the named Pallas kernel in Pallas' interpreter (CPU checks only: slow).
    quantize: "int8" keeps layer matrices as int8 codes with a scale and offset per 32 weights
        (weight-only, memloop.engine.model.quantize), or None.
    kv_dtype: the paged KV cache's element type, one of KV_DTYPES (None = the compute dtype). float16 on
        CPU halves the bytes each decode step reads at long context (llama.cpp's default cache type);
        int8 keeps a code per element and an f32 scale per (token, KV head), about a quarter of f32's
        bytes (llama.cpp's q8_0 cache). Keys and values are then rounded, so outputs can differ
        slightly from float32's (docs/bench-log.md measures by how much).
    """

    model: str | None = None
    dtype: str | None = None
    kv_budget: float = 1 << 30
    num_pages: int | None = None
    page_size: int = 16
    max_batch: int = 32
    prefill_chunk: int = 512
    prefix_cache: bool = True
    max_context: int | None = None
    tp: int | None = None
    attention: str = "auto"
    pallas_interpret: bool = False
    quantize: str | None = None
    kv_dtype: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.model, os.PathLike):
            object.__setattr__(self, "model", os.fspath(self.model))
        if self.model is not None and not isinstance(self.model, str):
            raise EngineError(f"engine setting `model` must be a path (a string) or None, got {self.model!r}")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise EngineError(
                f"engine setting `dtype` must be one of {list(DTYPES)}, or None for the device's "
                f"default (float32 on CPU, bfloat16 on accelerators); got {self.dtype!r}"
            )
        if self.kv_dtype is not None and self.kv_dtype not in KV_DTYPES:
            raise EngineError(
                f"engine setting `kv_dtype` must be one of {list(KV_DTYPES)}, or None for the compute "
                f"dtype; got {self.kv_dtype!r}"
            )
        if isinstance(self.kv_budget, bool) or not isinstance(self.kv_budget, (int, float)) or not self.kv_budget > 0:
            raise EngineError(
                f"engine setting `kv_budget` must be a number > 0 (bytes, or a fraction <= 1 of device "
                f"memory); got {self.kv_budget!r}"
            )
        for name, low, optional in (
            ("num_pages", 2, True),
            ("page_size", 1, False),
            ("max_batch", 1, False),
            ("prefill_chunk", 1, False),
            ("max_context", 1, True),
            ("tp", 1, True),
        ):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                allowed = f"an integer >= {low}" + (" or None" if optional else "")
                raise EngineError(f"engine setting `{name}` must be {allowed}; got {value!r}")
        for name in ("prefix_cache", "pallas_interpret"):
            if not isinstance(getattr(self, name), bool):
                raise EngineError(f"engine setting `{name}` must be true or false; got {getattr(self, name)!r}")
        if self.attention not in ATTENTION_BACKENDS:
            raise EngineError(
                f"engine setting `attention` must be one of {list(ATTENTION_BACKENDS)}; got {self.attention!r}"
            )
        if self.quantize is not None and self.quantize not in QUANTIZATIONS:
            raise EngineError(
                f"engine setting `quantize` must be one of {list(QUANTIZATIONS)} or None; got {self.quantize!r}"
            )

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "EngineConfig":
        """The config from plain data; unknown fields are an `EngineError` naming the valid ones."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise EngineError(f"an engine config is a mapping of settings, got {type(d).__name__}")
        unknown = sorted(set(d) - set(cls.field_names()))
        if unknown:
            raise EngineError(f"unknown engine setting(s) {unknown}; the valid ones are {cls.field_names()}")
        return cls(**d)

    @classmethod
    def of(cls, config: "EngineConfig | Mapping[str, Any] | None") -> "EngineConfig":
        """`config` itself if it is an EngineConfig, else `from_dict(config)`."""
        return config if isinstance(config, cls) else cls.from_dict(config)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
