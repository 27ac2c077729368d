"""In-place vs amendments on memories built from real book summaries (the BooookScore release).

Each paragraph of a real incremental summary becomes one step: its sentences are added under a new
key, and every third step also updates the first key (as a model revising earlier notes would).
Amendments keep the whole previous memory as a prefix; in-place re-encodes from the first change.
"""

from __future__ import annotations

import json
import re
from typing import Callable, Sequence

import pytest
from memloop.eval.memory import Amendments, Revision, render_in_place, shared_prefix_tokens
from memloop.eval.memory.budget import cl100k_encode
from memloop.eval.memory.schemas import BOOK_SUMMARY


def _steps(summary: str) -> list[list[Revision]]:
    paragraphs = [p.strip() for p in summary.split("\n") if p.strip()]
    first: list[str] = []
    steps = []
    for i, para in enumerate(paragraphs):
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", para) if s]
        revs = [Revision(_key(i), "add", sentences)]
        if i == 0:
            first = list(sentences)
        elif i % 3 == 0:
            first = first + sentences[:1]
            revs.append(Revision(_key(0), "update", first))
        steps.append(revs)
    return steps


def _key(i: int) -> str:
    return f"$. 'attributes'. 'part {i + 1}'"


def _re_encoded(books: dict[str, str], encode: Callable[[str], Sequence[int]]) -> dict[str, int]:
    out = {"amendments": 0, "in_place": 0, "amendments_total": 0, "in_place_total": 0, "steps": 0}
    for summary in books.values():
        am = Amendments(BOOK_SUMMARY)
        prev_am, prev_ip = am.text(), render_in_place({})
        for step in _steps(summary):
            assert am.revise(step) == []
            nxt_am, nxt_ip = am.text(), render_in_place(am.fold())
            assert nxt_am.startswith(prev_am)
            for kind, prev, nxt in (("amendments", prev_am, nxt_am), ("in_place", prev_ip, nxt_ip)):
                n = len(encode(nxt))
                out[kind] += n - shared_prefix_tokens(prev, nxt, encode)
                out[kind + "_total"] += n
            prev_am, prev_ip = nxt_am, nxt_ip
            out["steps"] += 1
    return out


def _books(shared_data, n: int) -> dict[str, str]:
    path = shared_data / "booookscore" / "summaries" / "gpt4-2048-inc-cleaned.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return {k: data[k] for k in sorted(data)[:n]}


def _report(label: str, r: dict[str, int]) -> str:
    return (
        f"[memory] {label}: {r['steps']} steps; tokens to encode after the shared prefix: amendments "
        f"{r['amendments']} of {r['amendments_total']}, in-place {r['in_place']} of {r['in_place_total']} "
        f"(in-place/amendments = {r['in_place'] / max(1, r['amendments']):.2f}x)"
    )


def test_amendments_re_encode_fewer_tokens_than_in_place_on_real_summaries(shared_data, capsys):
    r = _re_encoded(_books(shared_data, 6), cl100k_encode)
    assert r["steps"] > 20
    assert r["amendments"] < r["in_place"]
    assert r["amendments_total"] > r["in_place_total"]  # the price: amendments make the memory longer
    with capsys.disabled():
        print("\n" + _report("cl100k, 6 books", r))


@pytest.mark.slow
def test_the_same_holds_under_the_bundled_model_tokenizer(shared_data, smollm2_gguf, capsys):
    from memloop.engine.model.tokenizer import load_tokenizer

    tok = load_tokenizer(smollm2_gguf)
    r = _re_encoded(_books(shared_data, 20), tok.encode)
    assert r["amendments"] < r["in_place"]
    with capsys.disabled():
        print("\n" + _report("SmolLM2 tokenizer, 20 books", r))
