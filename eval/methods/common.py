"""Pieces shared by the summary methods of seed 000: task framing, JSON schemas, merging, the K-token limit."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal

from memloop.eval.asking import ParseFailure
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.methods import free_json
from memloop.eval.methods.base import MethodSettings, Trace
from memloop.eval.methods.caps import model_tokens, window_room
from memloop.eval.methods.free_json import BOOK_FIELDS
from memloop.eval.methods.outcomes import StepOutcome
from memloop.eval.methods.parsing import as_text, extract_json
from memloop.eval.methods.procedure import counter_text
from memloop.eval.methods.step import Step
from memloop.eval.options import MaxTokens, PositiveInt
from memloop.eval.templates import load_template
from pydantic import Field

STR_LIST = {"type": "array", "items": {"type": "string"}}
ENTITY_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": STR_LIST}
BOOK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {f: {"type": "object", "additionalProperties": STR_LIST} for f in BOOK_FIELDS},
    "additionalProperties": False,
}
ENTITY_TASKS = ("sumie",)
BOOK_TASKS = ("book", "arxiv")


def is_entity(sample: Sample) -> bool:
    return sample.task in ENTITY_TASKS


def entity_name(sample: Sample) -> str:
    # the entity's name is an input of the task (the prompts say "Entity: HOTEL0"), not gold information
    gold = sample.gold if isinstance(sample.gold, dict) else {}
    name = sample.metadata.get("entity") or gold.get("entity_name")
    if not name:
        raise MethodError(
            f"entity sample {sample.id} names no entity (metadata['entity'] or gold['entity_name']); fix the loader"
        )
    return str(name)


def subject(sample: Sample) -> str:
    return f"the entity {entity_name(sample)}" if is_entity(sample) else "a book"


def paragraphs(chunks: list[str] | tuple[str, ...], start: int = 1) -> str:
    """SUMIE-style numbered paragraphs: `P1. ...`."""
    return "\n".join(f"P{start + i}. {c.strip()}" for i, c in enumerate(chunks))


def schema_for(sample: Sample) -> dict[str, Any]:
    return ENTITY_SCHEMA if is_entity(sample) else BOOK_SCHEMA


Decoding = Literal["text", "constrained"]
DEFAULT_WINDOW = 8192  # the model's window where the LLM reports none (SmolLM2's)


@dataclass(frozen=True)
class MemorySettings(MethodSettings):
    """What seed 000's methods (GO, GU, GM, CoK) share: K, its compression, the output caps, the decoding."""

    memory_limit: PositiveInt | None = None  # K: compress the memory when it exceeds this many tokens
    compress_rounds: PositiveInt = 2  # compression calls per step before trimming to K
    # the cap of every step but the final summary is at least this; a step that writes memory gets more
    # where K (or the memory it carries) needs it (`memory_cap`), in the model's tokens
    max_tokens: MaxTokens = 1024
    # a memory-writing step's cap: K (else the carried memory's size) converted to the model's tokens, times
    # 1 + this: room for a memory at K, one chunk's growth and the indentation the prompts' examples show
    memory_cap_margin: Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False)] = 1.0
    # JSON formats: "text" lets the model write its JSON freely (the paper's models did; small ones "often
    # produce structured outputs with errors"), read as the paper's prompts allow (`free_json`); "constrained"
    # sends the JSON schema to a server that decodes under it
    decoding: Decoding = "text"


def memory_cap(trace: Trace, prompt: str, memory: Any) -> int:
    """The output cap of a step that writes memory, in the model's tokens: `max_tokens`, or more where
    K (else the size of `memory`, the one the prompt carries) converted to the model's tokens at the
    memory's own ratio, times 1 + `memory_cap_margin`, needs it; the growth beyond `max_tokens` goes only
    as far as the model's window leaves after the prompt (`max_tokens` itself is kept, as for any step). A cap below a
    memory at K would cut every rewrite of it (GU's update,
    GM's duplicate removal) and freeze the memory, while a cut text is still accepted."""
    s = trace.settings
    text = as_text(memory) if memory is not None else ""
    basis = s.memory_limit if s.memory_limit is not None else (trace.count_tokens(text) if text else 0)
    if not basis:
        return s.max_tokens
    needed = math.ceil(model_tokens(trace, basis, text or prompt) * (1 + s.memory_cap_margin))
    return max(s.max_tokens, min(needed, window_room(trace, prompt, DEFAULT_WINDOW)))


def memory_cap_text(s: MemorySettings) -> str:
    """`memory_cap`'s rule in words, from the same settings, for the procedure card."""
    # K itself is what a table varies (k200, k300), so the rule names it rather than its value
    k = f"K ({counter_text(s)} tokens)" if s.memory_limit is not None else "the carried memory's size (no K)"
    return (
        f"{s.max_tokens} model tokens, or more where {k} in model tokens x {1 + s.memory_cap_margin:g} needs it "
        f"and the window has room; the final summary {s.max_tokens}"
    )


def memory_step(trace: Trace, template: str, values: dict[str, Any], memory: Any, **kw: Any) -> Step:
    """`trace.ask` for a step that writes memory, capped by `memory_cap` (`memory`: the one it carries)."""
    tpl = load_template(template)
    prompt = tpl.render(**values)
    return trace.ask_prompt(prompt, tpl, max_tokens=memory_cap(trace, prompt, memory), **kw)


def memory_parser(sample: Sample) -> Callable[[str], dict[str, Any]]:
    """A free JSON memory of the sample's kind, read as the paper's prompts allow (`free_json`)."""
    return free_json.parser(book=not is_entity(sample))


def sent_schema(trace: Trace, name: str, decoding: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a step sends: only under `decoding: constrained`, which needs an LLM that takes
    one (free text is parsed against `schema` either way, with the same retries)."""
    if decoding != "constrained" or schema is None:
        return None
    if not trace.llm.supports_json_schema:
        raise MethodError(
            f"{name}: decoding: constrained needs a model server with JSON-schema decoding, and "
            f"{trace.llm.name!r} has none; use decoding: text (the paper's free JSON)"
        )
    return schema


def text_parser(text: str) -> str:
    """A text summary: the output itself, without a leading header line the model may echo."""
    out = text.strip()
    if not out:
        raise ParseFailure("empty summary")
    return out


def merge_json(base: Any, new: Any) -> Any:
    """Programmatic Generate-Merge: dicts merge key by key, lists append values not already present."""
    if isinstance(base, dict) and isinstance(new, dict):
        out = copy.deepcopy(base)
        for k, v in new.items():
            out[k] = merge_json(out[k], v) if k in out else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(new, list):
        return base + [v for v in new if v not in base]
    if isinstance(base, list):
        return base if new in base else base + [new]
    if base == new:
        return base
    return [base, new] if not isinstance(new, list) else [base] + [v for v in new if v != base]


def final_summary(trace: Trace, memory: Any) -> str:
    """Seed 000's last step for books, the same for every method and memory format: the LLM receives
    the aggregated memory and writes the final summary (`s000-book-final`, no instruction beyond that,
    so no method is coached towards the evaluator's error types)."""
    step = trace.ask("s000-book-final", {"memory": as_text(memory)}, kind="final", parse=text_parser, chunk_index=None)
    step.memory = memory
    return step.parsed if step.ok else step.output.strip()


COMPRESS_ROUNDS = 2  # compression calls per step before the deterministic trim


def enforce_limit(
    trace: Trace,
    memory: Any,
    *,
    fmt: str,
    limit: int | None,
    subj: str,
    sample: Sample,
    chunk_index: int,
    rounds: int = COMPRESS_ROUNDS,
    constrained: dict[str, Any] | None = None,
) -> Any:
    """Keep the memory within K = `limit` tokens (seed 000, Appendix F: K is binding).

    While the memory exceeds K, the LLM compresses it (at most `rounds` calls, one step each, outcome
    `compressed` when it returned a usable memory); a memory still over K is then trimmed
    deterministically (`trim_memory`) and the last compress step records it (outcome `trimmed_to_k`,
    the sizes in its failures), so a reader sees which happened: within K at once, after
    compressing, or trimmed. A JSON memory is read as the sample's kind (`memory_parser`); `constrained`
    is the schema sent with the request (`sent_schema`: None under free decoding).
    """
    if limit is None:
        return memory
    count = trace.count_tokens
    size = count(as_text(memory))
    parse = memory_parser(sample) if fmt == "json" else text_parser
    step = None
    for _ in range(max(1, rounds)):
        if size <= limit:
            return memory
        step = memory_step(
            trace,
            f"s000-compress-{fmt}",
            {"subject": subj, "limit": limit, "summary": as_text(memory)},
            memory,
            kind="compress",
            parse=parse,
            schema=constrained if fmt == "json" else None,
            chunk_index=chunk_index,
        )
        if step.ok:
            memory = step.parsed
            size = count(as_text(memory))
            if step.outcome == StepOutcome.OK:  # an empty compression stays `empty`
                step.outcome = StepOutcome.COMPRESSED
        step.memory = memory
    if size <= limit or step is None:
        return memory
    memory = trim_memory(memory, limit, count)
    step.failures.append(
        f"memory still {size} tokens after {max(1, rounds)} compression round(s), above the "
        f"limit K={limit}: trimmed deterministically to {count(as_text(memory))} tokens"
    )
    step.outcome = StepOutcome.TRIMMED_TO_K
    step.memory = memory
    return memory


def trim_memory(memory: Any, limit: int, count: Callable[[str], int]) -> Any:
    """The memory cut to at most `limit` tokens, deterministically: a JSON memory loses trailing list
    items and map entries of its largest containers (`memloop.eval.memory.trim_to_budget`); a text memory keeps
    its longest leading run of whole words that fits."""
    if isinstance(memory, dict):
        from memloop.eval.memory import trim_to_budget

        return trim_to_budget(memory, limit, count, render=as_text)
    text = as_text(memory)
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    lo, hi = 0, len(ends)  # the largest n whose first n words fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[: ends[mid - 1]]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[: ends[lo - 1]] if lo else ""


def loose_json(text: str) -> Any:
    return extract_json(text)
