"""Cost accounting from engine usage (seed 002, section 4.2 and table 3).

cache hit rate = cached prompt tokens / prompt tokens (the share of encoded tokens whose key-value
activations were reused from the prefix cache); net encoded = prompt - cached;
cost index = (net encoded + 3 x decoded) / 10^6 (decoding priced at three times encoding).
Seed 002 table 3 is per book: `per_sample_cost` gives its columns as means per sample over a set of
samples (one usage total per sample); the cache hit rate is that of the mean usage (559k encoded,
171k net -> 69 %), the cost index the mean of the samples' cost indices. The report calls these.

The paper's own cache hit (section 4.2) is not the engine's: "the number of tokens in the longest
matching prefix to the last input prompt divided by the total number of tokens encoded", i.e. each
prompt is compared with the previous prompt of the same sample only. `prefix_hits` computes it from
the recorded prompts in any tokenizer's ids; the engine's radix cache (`cached_tokens`) can also
reuse prefixes of other samples' prompts, or lose its pages under memory pressure, so it differs.

The paper's Net follows from its hit (its tables satisfy hit = 1 - Net / Total): `paper_sample_cost`
gives one sample's Total (its recorded prompts, one per step, in one tokenizer), Net (Total minus the
prefix tokens shared with the previous prompt) and Output (its recorded outputs in the same
tokenizer), and `paper_per_sample` the table's means per sample and cost index. One token base: the
recorded text in the run model's tokenizer; the engine's counts (chat template, retried attempts,
radix reuse across samples) are `per_sample_cost`'s and are reported as their own columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from memloop.eval.errors import JudgeError
from memloop.eval.llm import Usage, usage_sum
from memloop.eval.tokens import common_prefix

DECODE_WEIGHT = 3.0


def _check(u: Usage) -> None:
    if min(u.prompt_tokens, u.cached_tokens, u.decoded_tokens) < 0 or u.cached_tokens > u.prompt_tokens:
        raise JudgeError(f"inconsistent usage {u}: token counts must be >= 0 and cached <= prompt tokens")


def _checked(u: Usage) -> Usage:
    _check(u)
    return u


def total(usages: Iterable[Usage]) -> Usage:
    """The usages summed (llm.usage_sum), each checked first."""
    return usage_sum(_checked(u) for u in usages)


def cache_hit_rate(usage: Usage) -> float:
    _check(usage)
    return usage.cached_tokens / usage.prompt_tokens if usage.prompt_tokens else 0.0


def net_encoded(usage: Usage) -> int:
    _check(usage)
    return usage.prompt_tokens - usage.cached_tokens


def cost_index(usage: Usage) -> float:
    """(net encoded + 3 x decoded) / 10^6 of a usage total."""
    return (net_encoded(usage) + DECODE_WEIGHT * usage.decoded_tokens) / 1e6


def usage_of(prompt_tokens: float, cached_tokens: float, decoded_tokens: float) -> Usage:
    """A `Usage` from token totals as tables hold them (numbers that may arrive as floats or numpy ints)."""
    return Usage(int(prompt_tokens), int(cached_tokens), int(decoded_tokens))


def cost_summary(usages: Iterable[Usage]) -> dict[str, float]:
    """Table-3 columns over a set of requests (e.g. all steps of a method on a dataset)."""
    u = total(usages)
    return {
        "cache_hit_rate": cache_hit_rate(u),
        "encoded": float(u.prompt_tokens),
        "net_encoded": float(net_encoded(u)),
        "decoded": float(u.decoded_tokens),
        "cost_index": cost_index(u),
    }


def per_sample_cost(per_sample: Sequence[Usage]) -> dict[str, float]:
    """Table-3 columns as means per sample, from one usage total per sample (all of its requests):
    encoded, net encoded and decoded tokens per sample, the cost index per sample, and the cache hit
    rate of those means (NaN when nothing was encoded)."""
    if not per_sample:
        raise JudgeError("per_sample_cost needs at least one sample")
    u = total(per_sample)
    n = len(per_sample)
    return {
        "cache_hit_rate": cache_hit_rate(u) if u.prompt_tokens else float("nan"),
        "encoded": u.prompt_tokens / n,
        "net_encoded": net_encoded(u) / n,
        "decoded": u.decoded_tokens / n,
        "cost_index": cost_index(u) / n,
        "samples": float(n),
    }


def prefix_hits(prompts: Sequence[str], encode: Callable[[str], Sequence[int]]) -> tuple[int, int]:
    """Seed 002 section 4.2 for one sample's prompts in order: (tokens encoded, tokens of each prompt's
    longest prefix shared with the previous prompt, summed; the first prompt shares nothing)."""
    ids = [list(encode(p)) for p in prompts]
    return sum(len(i) for i in ids), sum(common_prefix(a, b) for a, b in zip(ids, ids[1:]))


def prefix_hit_rate(per_sample: Sequence[tuple[int, int]]) -> float:
    """The paper's cache hit rate over samples, from `prefix_hits` of each: shared / encoded tokens
    (the rate of the mean per sample, as `per_sample_cost`'s); NaN when nothing was encoded."""
    encoded = sum(e for e, _ in per_sample)
    return sum(h for _, h in per_sample) / encoded if encoded else float("nan")


@dataclass(frozen=True)
class PaperCost:
    """One sample's seed 002 cost figures in one token base: `total` tokens of its prompts, `hit` tokens
    of their prefixes shared with the previous prompt, `output` tokens of its outputs."""

    total: int
    hit: int
    output: int

    @property
    def net(self) -> int:
        return self.total - self.hit

    @property
    def cost_index(self) -> float:
        return (self.net + DECODE_WEIGHT * self.output) / 1e6


def paper_sample_cost(
    prompts: Sequence[str], outputs: Sequence[str], encode: Callable[[str], Sequence[int]], retried_output: int = 0
) -> PaperCost:
    """Seed 002's Total, hit and Output of one sample from its prompts and outputs in order: every attempt's
    prompt (a retry sends its prompt again, so it reuses the whole previous prompt) and output; the outputs
    of rejected attempts, which are not recorded as text, come as their token count (`retried_output`)."""
    total, hit = prefix_hits(prompts, encode)
    return PaperCost(total, hit, sum(len(encode(o)) for o in outputs) + retried_output)


def paper_per_sample(per_sample: Sequence[PaperCost]) -> dict[str, float]:
    """Table 3's columns in the paper's definitions, as means per sample: `prefix_hit` (the hit rate of
    the means, so hit = 1 - net / encoded holds), `encoded`, `net_encoded`, `decoded`, and the mean of
    the samples' cost indices."""
    if not per_sample:
        raise JudgeError("paper_per_sample needs at least one sample")
    n = len(per_sample)
    total = sum(c.total for c in per_sample)
    return {
        "prefix_hit": sum(c.hit for c in per_sample) / total if total else float("nan"),
        "encoded": total / n,
        "net_encoded": sum(c.net for c in per_sample) / n,
        "decoded": sum(c.output for c in per_sample) / n,
        "cost_index": sum(c.cost_index for c in per_sample) / n,
        "samples": float(n),
    }
