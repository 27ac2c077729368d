"""What a run's recorded prompts and memories are counted in: the run model's own tokenizer where its
weights are on this machine, else cl100k_base with the reason (the cost tables' token base, the memory
sizes' unit)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

from memloop.jobs.results.run_data import RunData, run_config


@dataclass(frozen=True)
class PromptTokenizer:
    """What the paper's cache hit is counted in: token ids of a text, and a label saying whose."""

    encode: Callable[[str], Sequence[int]]
    label: str


@lru_cache(maxsize=4)
def _model_tokenizer(path: str) -> Callable[[str], Sequence[int]]:
    from memloop.engine.model.tokenizer import load_tokenizer

    return load_tokenizer(path).encode


def prompt_tokenizer(d: RunData) -> PromptTokenizer:
    """The run's model tokenizer (the engine's, from the weights its latest manifest names), or
    cl100k_base with the reason when that model cannot be read here (an endpoint, weights elsewhere)."""
    if "tokenizer" not in d.derived:
        d.derived["tokenizer"] = _prompt_tokenizer(d)
    return d.derived["tokenizer"]


def budget_tokenizer(d: RunData) -> PromptTokenizer:
    """What the run's token budgets (K) counted in: cl100k_base under `count_tokens: cl100k`, else the
    run model's tokenizer (`prompt_tokenizer`); memory sizes are reported in the same unit as K."""
    if run_config(d).get("count_tokens") == "cl100k":
        from memloop.eval.tokens import cl100k_encode

        return PromptTokenizer(cl100k_encode, "cl100k_base (the run's count_tokens)")
    return prompt_tokenizer(d)


def _prompt_tokenizer(d: RunData) -> PromptTokenizer:
    from memloop.engine.assets import resolve_model
    from memloop.engine.errors import EngineError
    from memloop.eval.tokens import cl100k_encode

    def cl100k(why: str) -> PromptTokenizer:
        return PromptTokenizer(cl100k_encode, f"cl100k_base ({why})")

    if d.runs.empty or "config_json" not in d.runs:
        return cl100k("the run records no model")
    model = run_config(d).get("model") or {}
    if model.get("kind") == "openai":
        return cl100k(f"the endpoint model {(model.get('endpoint') or {}).get('model')!r} has no local tokenizer")
    try:
        # the engine's own resolution: None is the bundled default, short names their packaged file
        path = resolve_model(model.get("weights"))
        if not path.exists():
            return cl100k(f"the run's model {str(path)!r} is not on this machine")
        return PromptTokenizer(_model_tokenizer(str(path.resolve())), f"the run's model tokenizer, {path.name}")
    except EngineError as exc:
        return cl100k(f"the run's model tokenizer cannot be loaded: {exc}")
