"""SUMIE matching (seed 000, table 1): precision, recall and F1 of attribute-value pairs, per turn.

At turn t the prediction (the memory after chunk t) is compared with the gold pairs aggregated over
paragraphs 1..t.

`judge_llm` takes one path for text and JSON memories: the judge lists the facts the memory states
(`sumie-extract`; a memory over `EXTRACT_PART_TOKENS` is read in parts, `memory_parts`, so a large
unlimited memory is judged whole rather than cut), then matches both ways: which gold facts each predicted fact states
(`sumie-match`; a merged value states several) and which predicted facts state each gold fact
(`sumie-recall`). `both_ways_prf`:

    P_t = |{k : predicted fact k states a gold fact no earlier predicted fact stated}| / |pred_t|
    R_t = |{i : some predicted fact states gold fact i}| / |gold_t|
    F1_t = 2 P_t R_t / (P_t + R_t)           (0 when P_t + R_t = 0; 0/0 = 0)

so repeats count against precision. `judge_exact` flattens JSON memories into pairs and uses
normalised exact match (`prf`, for synthetic gold); it refuses text. Table 1 reports, over entities,
the mean P and R and the macro F1 (mean of per-entity F1) at the first turn ("start"), the last turn
and averaged over turns: `turn_summary` per sample (the report calls it too), then `aggregate_turns`
over samples.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from memloop.eval.asking import ParseFailure
from memloop.eval.errors import JudgeError
from memloop.eval.judges import judge_info
from memloop.eval.judges.aggregation import mean_over_samples
from memloop.eval.judges.asking import answer_list, ask_judgment
from memloop.eval.judges.predictions import memory_per_turn
from memloop.eval.judges.records import JudgeResult, Judgment, Score, f1, safe_div
from memloop.eval.llm import LLM
from memloop.eval.options import PositiveInt, Temperature
from memloop.eval.templates import render

Pair = tuple[str, str]
NAME_LLM = "sumie"
NAME_EXACT = "sumie-exact"
PAPER_TEMPERATURE = 0.8  # seed 000: "The temperature is set to 0.8" for the SUMIE evaluator


# ---------------------------------------------------------------- pairs


def _flatten(obj: Any, prefix: str, out: list[Pair]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix} {k}".strip() if prefix else str(k), out)
    elif isinstance(obj, list):
        for v in obj:
            _flatten(v, prefix, out)
    elif obj is None or (isinstance(obj, str) and not obj.strip()):
        return
    else:
        if not prefix:
            raise JudgeError(f"value {obj!r} has no attribute; predictions must be {{attribute: value}} objects")
        out.append((prefix, str(obj).strip()))


def pairs_of(obj: Any) -> list[Pair]:
    """Attribute-value pairs of a JSON memory: single-key wrappers such as {"attributes": {...}} are
    unwrapped, nested keys are joined with spaces, list values give one pair per element, empty values
    are dropped; duplicates are removed (order kept)."""
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError:
            raise JudgeError("this prediction is text, not a JSON object of attribute-value pairs") from None
    if isinstance(obj, list) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in obj):
        out = [(str(a).strip(), str(v).strip()) for a, v in obj]
    elif isinstance(obj, dict):
        # The memory schemas wrap the table in one container key ({"attributes": {attr: [values]}});
        # descend through such single-key wrappers so the attribute is the table's own key.
        while len(obj) == 1 and isinstance(next(iter(obj.values())), dict):
            obj = next(iter(obj.values()))
        out = []
        _flatten(obj, "", out)
    else:
        raise JudgeError(f"a SUMIE prediction must be a JSON object {{attribute: value(s)}}, got {type(obj).__name__}")
    return list(dict.fromkeys(out))


def gold_turns(gold: Any) -> list[list[Pair]]:
    if not isinstance(gold, dict) or not isinstance(gold.get("turns"), list) or not gold["turns"]:
        raise JudgeError(
            "SUMIE gold must be {'turns': [{attribute: [values]}, ...]} (one entry per paragraph); "
            "load the sample with the sumie dataset loader"
        )
    return [pairs_of(t) for t in gold["turns"]]


def predicted_turns(output: Any, n_turns: int) -> list[tuple[int, Any]]:
    """(turn index, prediction) pairs: a list is one prediction per turn; anything else is the last turn."""
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except json.JSONDecodeError:
            return [(n_turns - 1, output)]
    if isinstance(output, list) and output and all(isinstance(o, (dict, str)) for o in output):
        if len(output) != n_turns:
            raise JudgeError(
                f"got {len(output)} per-turn predictions for {n_turns} gold turns; "
                "pass one prediction per paragraph (or only the final one)"
            )
        return list(enumerate(output))
    return [(n_turns - 1, output)]


# ---------------------------------------------------------------- scoring

_PUNCT = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """Case-, accent-width-, punctuation- and whitespace-insensitive form."""
    return " ".join(_PUNCT.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


def prf(pred: Sequence[Pair], gold: Sequence[Pair], support: Sequence[set[int]]) -> dict[str, float]:
    """P/R/F1 from, for each predicted pair, the set of gold indices that support it."""
    correct = sum(1 for s in support if s)
    recalled = len(set().union(*support)) if support else 0
    p, r = safe_div(correct, len(pred)), safe_div(recalled, len(gold))
    return {"precision": p, "recall": r, "f1": f1(p, r)}


def exact_support(pred: Sequence[Pair], gold: Sequence[Pair]) -> list[set[int]]:
    keys: dict[tuple[str, str], set[int]] = {}
    for i, (a, v) in enumerate(gold):
        keys.setdefault((normalise(a), normalise(v)), set()).add(i)
    return [set(keys.get((normalise(a), normalise(v)), set())) for a, v in pred]


METRICS = ("precision", "recall", "f1")


def turn_summary(values_by_turn: Sequence[float] | Mapping[int, float]) -> dict[str, float]:
    """One sample's per-turn values (in turn order, or {turn: value}) -> {"start", "last", "avg"}:
    the value at the first turn, at the last turn, and the mean over turns (NaN turns left out).
    A mapping that lacks turn 0 has no "start", one that lacks any turn before its last has no "avg"
    (NaN): GO keeps no memory per turn and is scored at the last turn only, and seed 000 table 1
    leaves its start and average empty rather than repeating the last value."""
    if isinstance(values_by_turn, Mapping):
        turns = sorted(int(t) for t in values_by_turn)
        vals = [values_by_turn[t] for t in sorted(values_by_turn)]
        complete = turns == list(range(turns[-1] + 1)) if turns else False
        start_known = bool(turns) and turns[0] == 0
    else:
        vals = list(values_by_turn)
        complete = start_known = True
    if not vals:
        raise JudgeError("turn_summary needs at least one turn")
    return {
        "start": float(vals[0]) if start_known else math.nan,
        "last": float(vals[-1]),
        "avg": mean_over_samples(vals) if complete else math.nan,
    }


def aggregate_turns(per_sample: Sequence[Sequence[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Table 1 over samples: each sample is its per-turn [{precision, recall, f1}, ...].
    Returns {"start"|"last"|"avg": {"precision", "recall", "f1"}}: `turn_summary` per sample, then
    the mean over samples (mean P, mean R, macro F1)."""
    if not per_sample or any(not s for s in per_sample):
        raise JudgeError("aggregate_turns needs at least one sample, each with at least one turn")
    summaries = [{m: turn_summary([t[m] for t in s]) for m in METRICS} for s in per_sample]
    return {
        which: {m: mean_over_samples(x[m][which] for x in summaries) for m in METRICS}
        for which in ("start", "last", "avg")
    }


def _fmt(p: Pair) -> str:
    return f"{p[0]}: {p[1]}"


def _result(
    name: str, turns: list[tuple[int, dict[str, float]]], judgments: list[Judgment], details: dict[str, Any]
) -> JudgeResult:
    scores = [Score(m, v, t) for t, vals in turns for m, v in vals.items()]
    return JudgeResult(name, scores, judgments, details)


# ---------------------------------------------------------------- judges


@judge_info(
    "sumie-exact",
    ("sumie",),
    False,
    "per-turn P/R/F1 of attribute-value pairs, normalised exact match",
    predict=memory_per_turn,
    needs_json_memory=True,
    metrics=("precision", "recall", "f1"),
    per_turn=True,
)
def judge_exact(
    output: Any, gold: Any, llm: LLM | None = None, *, metadata: dict[str, Any] | None = None
) -> JudgeResult:
    golds = gold_turns(gold)
    turns, judgments = [], []
    for t, pred_obj in predicted_turns(output, len(golds)):
        try:
            pred = pairs_of(pred_obj)
        except JudgeError as exc:
            raise JudgeError(
                f"{exc}; exact matching needs attribute-value pairs: score text-format methods with "
                "the `sumie` judge, which extracts pairs with the judge LLM"
            ) from None
        support = exact_support(pred, golds[t])
        for p, s in zip(pred, support):
            judgments.append(
                Judgment(item=f"turn {t}: {_fmt(p)}", label={"turn": t, "supported_by": sorted(s)}, source="rule")
            )
        turns.append((t, prf(pred, golds[t], support)))
    return _result(NAME_EXACT, turns, judgments, {"gold_pairs": [len(g) for g in golds]})


MATCH_TEMPLATE = "sumie-match"
EXTRACT_TEMPLATE = "sumie-extract"

EXTRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pairs": {
            "type": "array",
            "maxItems": 60,
            "items": {
                "type": "object",
                "properties": {
                    "attribute": {"type": "string", "minLength": 1, "maxLength": 60},
                    "value": {"type": "string", "minLength": 1, "maxLength": 200},
                },
                "required": ["attribute", "value"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["pairs"],
    "additionalProperties": False,
}


def extract_schema(max_pairs: int) -> dict[str, Any]:
    """EXTRACT_SCHEMA listing at most `max_pairs` pairs."""
    pairs = dict(EXTRACT_SCHEMA["properties"]["pairs"], maxItems=max_pairs)
    return dict(EXTRACT_SCHEMA, properties={"pairs": pairs})


def numbers_schema(key: str, n: int) -> dict[str, Any]:
    """{key: [1-based numbers of n facts]}, at most 10 of them: the answer shape of both matching directions."""
    return {
        "type": "object",
        "properties": {
            key: {
                "type": "array",
                "items": {"type": "integer", "minimum": 1, "maximum": max(1, n)},
                "maxItems": max(1, min(n, 10)),
            }
        },
        "required": [key],
        "additionalProperties": False,
    }


def match_schema(n_gold: int) -> dict[str, Any]:
    return numbers_schema("supported_by", n_gold)


def parse_match(text: str, n_gold: int) -> list[int]:
    """0-based gold indices from {"supported_by": [1-based numbers]}; out-of-range numbers are invalid."""
    return parse_numbers(text, "supported_by", n_gold, "a reference fact")


def parse_extraction(text: str) -> list[list[str]]:
    out = []
    for p in answer_list(text, "pairs", '{"pairs": [{"attribute": ..., "value": ...}]}'):
        if not isinstance(p, dict) or not isinstance(p.get("attribute"), str) or not isinstance(p.get("value"), str):
            raise ParseFailure("every pair needs string `attribute` and `value`")
        if p["attribute"].strip() and p["value"].strip():
            out.append([p["attribute"].strip(), p["value"].strip()])
    return out


RECALL_TEMPLATE = "sumie-recall"


def recall_schema(n_pred: int) -> dict[str, Any]:
    return numbers_schema("stated_by", n_pred)


def parse_numbers(text: str, key: str, n: int, what: str) -> list[int]:
    """0-based indices from {key: [1-based numbers]}; out-of-range numbers are invalid."""
    out = []
    for k in answer_list(text, key, f'{{"{key}": [numbers]}}'):
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise ParseFailure(f"{k!r} is not the number of {what} (1..{n})")
        if k - 1 not in out:
            out.append(k - 1)
    return sorted(out)


def both_ways_prf(
    n_pred: int, n_gold: int, states: Sequence[set[int]], stated_by: Sequence[set[int]]
) -> dict[str, float]:
    """P/R/F1 from the two directions of matching.

    `states[k]`: the gold facts predicted fact k states (several for a merged value); `stated_by[i]`:
    the predicted facts that state gold fact i. A predicted fact is correct when it states a gold fact
    that no earlier predicted fact already stated, so a repeated fact counts once and its repeats
    count against precision; recall is the share of gold facts some predicted fact states."""
    covered: set[int] = set()
    correct = 0
    for s in states:
        if s - covered:
            correct += 1
            covered |= s
    recalled = sum(1 for s in stated_by if s)
    p, r = safe_div(correct, n_pred), safe_div(recalled, n_gold)
    return {"precision": p, "recall": r, "f1": f1(p, r)}


def _memory_text(pred_obj: Any) -> str:
    """What the judge reads of a turn's memory: a text memory as written, a JSON one as compact JSON
    (the form the methods' prompts carry)."""
    if isinstance(pred_obj, str):
        return pred_obj.strip()
    return json.dumps(pred_obj, ensure_ascii=False, separators=(",", ":")) if pred_obj else ""


# A memory is read in parts of at most this many judge tokens: one extraction answers with at most 60
# pairs in 1024 tokens (EXTRACT_SCHEMA), which a large unlimited memory (CoK, GM) would overrun, and a cut
# extraction would fail the unit's judgment. Parts keep whole values and their attribute paths.
EXTRACT_PART_TOKENS = 300


def memory_parts(pred_obj: Any, count: Any, budget: int = EXTRACT_PART_TOKENS) -> list[str]:
    """The memory's text (`_memory_text`) in parts of at most `budget` tokens each where it is larger:
    a JSON memory split between values (each part a JSON object with the values' keys), a text
    memory between sentences. A single value or sentence over the budget is a part of its own."""
    text = _memory_text(pred_obj)
    if not text or count(text) <= budget:
        return [text] if text else []
    if isinstance(pred_obj, str):
        pieces = [p for p in re.split(r"(?<=[.!?])\s+|\n+", text) if p.strip()]
        join = lambda items: " ".join(items)
    else:
        pieces = list(_leaves(pred_obj))
        join = lambda items: _memory_text(_deep_join(items))
    parts: list[str] = []
    group: list[Any] = []
    for piece in pieces:
        if group and count(join(group + [piece])) > budget:
            parts.append(join(group))
            group = []
        group.append(piece)
    if group:
        parts.append(join(group))
    return parts


def _leaves(obj: Any) -> Any:
    """A JSON value as its smallest pieces, each wrapped in the keys above it: {"a": {"b": ["x"]}} and
    {"a": {"b": ["y"]}} for {"a": {"b": ["x", "y"]}}."""
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            for leaf in _leaves(v):
                yield {k: leaf}
    elif isinstance(obj, list) and obj:
        for item in obj:
            yield [item]
    else:
        yield obj


def _deep_join(pieces: list[Any]) -> Any:
    out: Any = None
    for p in pieces:
        out = _join(out, p)
    return out


def _join(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _join(out[k], v) if k in out else v
        return out
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    return [a, b]


@judge_info(
    "sumie",
    ("sumie",),
    True,
    "per-turn P/R/F1 of attribute-value pairs, LLM matches both ways",
    ("sumie-match", "sumie-extract", "sumie-recall"),
    predict=memory_per_turn,
    metrics=("precision", "recall", "f1"),
    per_turn=True,
)
def judge_llm(
    output: Any,
    gold: Any,
    llm: LLM | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    max_attempts: int = 3,
    on_invalid: str = "raise",
    max_workers: int = 16,
    temperature: Temperature = PAPER_TEMPERATURE,
    max_pairs: PositiveInt = 60,
) -> JudgeResult:
    """Per-turn P/R/F1 by the judge LLM, sampled at `temperature` (seed 000 judged at 0.8), with one
    path for text and JSON memories: the judge lists the facts the memory states (`sumie-extract`),
    then matches them with the gold facts in both directions, each predicted fact against the gold
    list (`sumie-match`, precision) and each gold fact against the predicted list (`sumie-recall`,
    recall); merged values state every gold fact they carry, repeats count against precision
    (`both_ways_prf`). `max_pairs` caps the facts one extraction lists (each is one match call)."""
    if llm is None:
        raise JudgeError("the SUMIE LLM matcher needs a judge LLM; use `sumie-exact` for deterministic matching")
    golds = gold_turns(gold)
    entity = str(gold.get("entity_name") or "the entity")
    raise_on_invalid = on_invalid == "raise"
    judgments: list[Judgment] = []
    turns: list[tuple[int, dict[str, float]]] = []

    def ask(args: tuple[str, str, Any, int, str]) -> Judgment:
        item, template, parse, seed, values = args[0], args[1], args[2], args[3], args[4]
        tpl, prompt = render(template, **values)
        return ask_judgment(
            llm,
            tpl,
            prompt,
            item=item,
            parse=parse[0],
            schema=parse[1],
            max_tokens=64,
            max_attempts=max_attempts,
            seed=seed,
            raise_on_invalid=raise_on_invalid,
            temperature=temperature,
        )

    for t, pred_obj in predicted_turns(output, len(golds)):
        parts = memory_parts(pred_obj, llm.count_tokens)
        pred: list[Pair] = []
        for n, part in enumerate(parts, 1):  # a large memory is read whole, part by part
            tpl, prompt = render(EXTRACT_TEMPLATE, entity=entity, summary=part)
            where = f" (part {n} of {len(parts)})" if len(parts) > 1 else ""
            ex = ask_judgment(
                llm,
                tpl,
                prompt,
                item=f"turn {t}: facts stated in the memory{where}",
                parse=parse_extraction,
                schema=extract_schema(max_pairs),
                max_tokens=1024,
                max_attempts=max_attempts,
                raise_on_invalid=raise_on_invalid,
                temperature=temperature,
            )
            judgments.append(ex)
            pred += [(a, v) for a, v in (ex.label or [])]  # repeats kept: they count against precision
        g = golds[t]
        reference = "\n".join(f"{i}. {_fmt(p)}" for i, p in enumerate(g, 1))
        predicted = "\n".join(f"{k}. {_fmt(p)}" for k, p in enumerate(pred, 1))
        tasks = [
            (
                f"turn {t}: predicted {k + 1}: {_fmt(p)}",
                MATCH_TEMPLATE,
                (lambda s, n=len(g): parse_numbers(s, "supported_by", n, "a reference fact"), match_schema(len(g))),
                k,
                {"entity": entity, "pair": _fmt(p), "reference": reference},
            )
            for k, p in enumerate(pred)
            if g
        ]
        tasks += [
            (
                f"turn {t}: reference {i + 1}: {_fmt(p)}",
                RECALL_TEMPLATE,
                (
                    lambda s, n=len(pred): parse_numbers(s, "stated_by", n, "a fact of the summary"),
                    recall_schema(len(pred)),
                ),
                1000 + i,
                {"entity": entity, "pair": _fmt(p), "predicted": predicted},
            )
            for i, p in enumerate(g)
            if pred
        ]
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(tasks) or 1))) as pool:
            js = list(pool.map(ask, tasks))
        judgments.extend(js)
        states = [set(j.label or []) for j in js[: len(pred) if g else 0]]  # invalid verdicts: nothing stated
        stated_by = [set(j.label or []) for j in js[len(states) :]] or [set() for _ in g]
        turns.append((t, both_ways_prf(len(pred), len(g), states if g else [set() for _ in pred], stated_by)))
    return _result(NAME_LLM, turns, judgments, {"gold_pairs": [len(g) for g in golds]})


def rescore(judgments: Sequence[Judgment], gold: Any) -> dict[int, dict[str, float]]:
    """Per-turn P/R/F1 recomputed from stored `judge_llm` judgments (items "turn t: predicted k: ..."
    and "turn t: reference i: ...", in the order judged)."""
    golds = gold_turns(gold)
    states: dict[int, list[set[int]]] = {}
    stated_by: dict[int, list[set[int]]] = {}
    for j in judgments:
        m = re.match(r"turn (\d+): (predicted|reference) \d+: ", j.item)
        if not m:
            continue
        t, side = int(m.group(1)), m.group(2)
        label = set(j.label or []) if j.valid and isinstance(j.label, list) else set()
        (states if side == "predicted" else stated_by).setdefault(t, []).append(label)
    out = {}
    for t in sorted(set(states) | set(stated_by)):
        n_pred = len(states.get(t, [])) or max((max(s) + 1 for s in stated_by.get(t, []) if s), default=0)
        out[t] = both_ways_prf(
            n_pred, len(golds[t]), states.get(t, []), stated_by.get(t, []) or [set() for _ in golds[t]]
        )
    return out
