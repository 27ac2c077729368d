"""JSON-Schema constrained decoding with llguidance on the bundled SmolLM2."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from memloop.engine.errors import RequestError

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "mood": {"enum": ["happy", "sad", "calm"]},
        "pets": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "age", "mood", "pets"],
    "additionalProperties": False,
}
FACTS = {"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 1, "maxItems": 3}
NESTED = {
    "type": "object",
    "properties": {
        "answer": {"type": "boolean"},
        "scores": {
            "type": "object",
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 100},
            "maxProperties": 2,
        },
    },
    "required": ["answer", "scores"],
    # closed, like every memory schema: an open object lets a sampled 135M model add keys until max_tokens
    "additionalProperties": False,
}


def _schemas():
    from memloop.eval.memory import revision_list_schema, schemas

    return {
        "person": PERSON,
        "facts": FACTS,
        "nested": NESTED,
        # the revision formats the memory methods decode with (PRISM add/update, and add-only)
        "prism_story": revision_list_schema(schemas.STORY_ELEMENTS),
        "prism_sumie_add_only": revision_list_schema(schemas.SUMIE_SUMMARY, ops=("add",)),
    }


PROMPT = {
    "person": "Describe a fictional person as JSON.",
    "facts": "List facts about the moon as a JSON array.",
    "nested": "Is the sky blue? Answer as JSON with scores.",
    "prism_story": "Story chunk: Anna met Tom at the harbour and they sailed north. Propose revisions to the memory.",
    "prism_sumie_add_only": "Review: the soup was cold but the staff were kind. Propose revisions to the summary.",
}


def _requests(seeds_per_schema: int) -> tuple[list[str], list[dict]]:
    reqs, names = [], []
    for name, schema in _schemas().items():
        for seed in range(seeds_per_schema):  # greedy first, then the papers' top-k 40, temperature 0.8
            sampling = {"max_tokens": 256, "seed": seed}
            if seed:
                sampling.update(temperature=0.8, top_k=40)
            reqs.append(
                {"messages": [{"role": "user", "content": PROMPT[name]}], "sampling": sampling, "json_schema": schema}
            )
            names.append(name)
    return names, reqs


def _check(engine, names: list[str], reqs: list[dict]) -> None:
    results = engine.complete_many(reqs)
    schemas = _schemas()
    for name, res in zip(names, results):
        assert res["finish_reason"] == "stop", (name, res)
        jsonschema.validate(json.loads(res["text"]), schemas[name])


def test_every_constrained_output_parses_and_validates(engine):
    before = engine.stats()["constrained_requests"]
    names, reqs = _requests(1)
    _check(engine, names, reqs)
    assert engine.stats()["constrained_requests"] - before == len(reqs)


@pytest.mark.slow
def test_sampled_constrained_outputs_parse_and_validate(engine):
    _check(engine, *_requests(4))


def test_invalid_schemas_are_request_errors(engine):
    for bad in ({"type": "no-such-type"}, {"properties": 3}, "not an object"):
        with pytest.raises(RequestError):
            engine.complete({"prompt": "x", "sampling": {"max_tokens": 4}, "json_schema": bad})
    assert engine.health()


def test_bitmask_unpacking_matches_llguidance(engine):
    import jax.numpy as jnp
    from llguidance.numpy import apply_token_bitmask_inplace
    from memloop.engine.sample.constrained import unpack_bitmask

    g = engine.grammar
    c = g.compile(PERSON)
    mask = np.empty((2, g.words), np.int32)
    g.fill([c, None], mask)
    logits = np.zeros((2, g.vocab_size), np.float32)
    apply_token_bitmask_inplace(logits, mask)
    ours = np.asarray(unpack_bitmask(jnp.asarray(mask), g.vocab_size))
    assert (ours == np.isfinite(logits)).all()
    assert ours[1].all() and 0 < ours[0].sum() < g.vocab_size  # row 0: only '{'-like tokens
