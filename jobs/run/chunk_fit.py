"""Chunks counted in the run model's tokens, and a config refused before work when a chunk cannot fit.

A dataset's `chunk_tokens` is a budget in some tokenizer: the run's own model's where memloop can read
it (`kind: engine`, the weights on this machine), so an 8k-token chunk is 8k tokens to the model that
reads it; an endpoint's model has no local tokenizer, and its chunks stay in cl100k_base.

A step of an incremental method holds at least one chunk, the method's instructions and room for
`max_tokens` of output; where that sum exceeds the model's context, every such unit would be refused by
the engine after the run started. `check_chunks_fit` refuses the config first, naming the context the
config needs (the memory a step carries on top is not known before the run, so this is a lower bound).
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import RunConfig
from memloop.jobs.run.methods import method_settings, method_tasks

CHUNK_FIELDS = ("text", "chunk")  # the placeholders a method's step templates fill with the chunk
WHOLE_INPUT_METHODS = ("long-context",)  # the ceiling's fit is per sample (n/a where it does not fit)


def weights_here(cfg: RunConfig, weights: Path | None = None) -> Path | None:
    """The run model's weights on this machine (None: an endpoint, or weights not here). `weights`: the
    plan's, already resolved (`memloop.jobs.run.plan.model_weights`); None resolves them from the config here."""
    if cfg.model.kind != "engine":
        return None
    if weights is not None:
        return weights
    from memloop.engine.assets import resolve_model
    from memloop.engine.errors import EngineError

    try:
        path = resolve_model(cfg.model.weights)
    except EngineError:
        return None
    return path if path.exists() else None


def chunk_tokenizer(cfg: RunConfig, weights: Path | None = None) -> str | None:
    """What `chunk_tokens` counts in: the run model's tokenizer (its weights path), None for cl100k_base
    (`count_tokens: cl100k`, the papers' way, or a model whose tokenizer is not here). `weights` as in
    `weights_here`."""
    if cfg.count_tokens == "cl100k":
        return None
    path = weights_here(cfg, weights)
    return str(path) if path is not None else None


@lru_cache(maxsize=4)
def model_encoder(weights: str) -> Callable[[str], list[int]]:
    """The engine's own tokenizer of `weights` (text ids without special tokens), loaded once."""
    from memloop.engine.model.tokenizer import load_tokenizer

    return load_tokenizer(weights).encode


def loader_takes_tokenizer(task: str) -> bool:
    return loader_takes("tokenizer", task)


def loader_takes(option: str, task: str) -> bool:
    """Whether the task's loader has a parameter `option`."""
    from memloop.eval.datasets import get_loader

    return option in inspect.signature(get_loader(task)).parameters


def model_context(cfg: RunConfig, weights: Path | None = None) -> int | None:
    """The context one request may use, as the engine will enforce it: the model's own window, capped
    by `model.options.max_context` / `engine.options.max_context`; None when it cannot be read here.
    `weights` as in `weights_here`."""
    path = weights_here(cfg, weights)
    if path is None:
        return None
    window = _model_window(str(path))
    caps = [
        v
        for v in (cfg.model.options.get("max_context"), cfg.engine.options.get("max_context"), window)
        if isinstance(v, int) and v > 0
    ]
    return min(caps) if caps else None


@lru_cache(maxsize=4)
def _model_window(weights: str) -> int | None:
    """The model's own context (GGUF `<arch>.context_length`, or a Hugging Face `max_position_embeddings`)."""
    path = Path(weights)
    window: int | None = None
    if path.is_dir():
        import json

        config = path / "config.json"
        if config.is_file():
            window = json.loads(config.read_text()).get("max_position_embeddings")
    else:
        from memloop.engine.model.weights import read_gguf_metadata

        meta = read_gguf_metadata(path)
        window = meta.get(f"{meta.get('general.architecture')}.context_length")
    return int(window) if window is not None else None


def instruction_tokens(method: Any, count: Callable[[str], int]) -> int:
    """Tokens of the method's longest chunk-carrying step template with every value left empty."""
    from memloop.eval.templates import load_template

    sizes = []
    for tid in method.template_ids:
        tpl = load_template(tid)
        if tpl.fields & set(CHUNK_FIELDS):
            sizes.append(count(tpl.render(**{f: "" for f in tpl.fields})))
    return max(sizes, default=0)


def check_chunks_fit(cfg: RunConfig, count: Callable[[str], int] | None = None, weights: Path | None = None) -> None:
    """Refuse the config when a dataset's chunk + a method's instructions + its max_tokens exceed the model's
    context (a ConfigError saying the context the config needs). Skipped when the context is unknown.
    `weights` as in `weights_here`."""
    path = weights_here(cfg, weights)
    if path is None:
        return  # an endpoint, or weights not on this machine: the context is unknown
    context = model_context(cfg, path)
    if context is None:
        return
    from memloop.eval.methods import get_method
    from memloop.eval.tokens import token_counter

    # the fit is in the model's own tokens, whatever `count_tokens` says
    count = count or token_counter(model_encoder(str(path)))
    for mi, m in enumerate(cfg.methods):
        if m.name in WHOLE_INPUT_METHODS:
            continue
        method = get_method(m.name, **method_settings(cfg, m, cfg.seed))
        tasks = method_tasks(m)
        for di, d in enumerate(cfg.datasets):
            chunk = d.options.get("chunk_tokens")
            if not isinstance(chunk, int) or (tasks is not None and d.task not in tasks):
                continue  # no chunk size (or a malformed one, which the dataset's loader names)
            needed = int(chunk) + instruction_tokens(method, count) + method.settings.max_tokens
            if needed > context:
                raise ConfigError(
                    f"`datasets.{di}.options.chunk_tokens` = {chunk} with `methods.{mi}` ({m.key}): a step needs "
                    f"at least {needed} tokens (chunk + instructions + max_tokens={method.settings.max_tokens}) and "
                    f"the model's context is {context}; this config needs a model with a context of at least "
                    f"{needed} tokens, or smaller chunks or max_tokens"
                )
