"""Log-probabilities through the OpenAI-compatible server on 127.0.0.1: OpenAI's shapes on both
endpoints, the numbers of the model itself, greedy text unchanged, mixed batches, bad values."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import httpx
import jax.numpy as jnp
import numpy as np
import pytest

PROMPT = "The capital of France is"
STEPS = 6


def _post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=300)


def _reference(loaded_model, prompt_ids: list[int], steps: int) -> tuple[list[int], np.ndarray]:
    """Greedy ids and log_softmax rows [steps, V] from the plain model: a forward over the whole
    prefix at every step (no KV cache, no pages, no batching)."""
    from memloop.engine.model.decoder import forward, no_cache_attention

    ids, rows = list(prompt_ids), []
    for _ in range(steps):
        toks = jnp.asarray([ids], jnp.int32)
        pos = jnp.arange(len(ids), dtype=jnp.int32)[None]
        logits = np.asarray(
            forward(loaded_model.params, loaded_model.config, toks, pos, None, no_cache_attention(pos))[0][0, -1],
            np.float64,
        )
        logp = logits - logits.max()
        logp -= np.log(np.exp(logp).sum())
        rows.append(logp)
        ids.append(int(logp.argmax()))
    return ids[len(prompt_ids) :], np.stack(rows)


def test_completion_logprobs_are_the_models_and_shaped_as_openai(base_url, loaded_model):
    from memloop.engine.runner.token_pieces import TokenPieces

    r = _post(base_url, "/v1/completions", {"prompt": PROMPT, "max_tokens": STEPS, "temperature": 0, "logprobs": 5})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == STEPS
    assert "".join(lp["tokens"]) == choice["text"]
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(STEPS)]

    ids, logp = _reference(loaded_model, loaded_model.tokenizer.prompt_ids(PROMPT), STEPS)
    pieces = TokenPieces(loaded_model.tokenizer.hf)
    assert lp["tokens"] == [pieces.text_of(t) for t in ids]  # the same greedy tokens as the plain model
    for i, (tok, top) in enumerate(zip(lp["tokens"], lp["top_logprobs"])):
        assert len(top) == 5 and list(top.values()) == sorted(top.values(), reverse=True)
        assert lp["token_logprobs"][i] == max(top.values()) == top[tok]  # greedy: the chosen token is the top one
        assert abs(lp["token_logprobs"][i] - logp[i, ids[i]]) < 1e-3
        best = np.argsort(-logp[i])[:5]
        assert list(top) == [pieces.text_of(int(t)) for t in best]
        np.testing.assert_allclose(list(top.values()), logp[i, best], atol=1e-3)


def test_chat_logprobs_shape_and_bytes(base_url):
    messages = [{"role": "user", "content": "Name a colour."}]
    r = _post(
        base_url,
        "/v1/chat/completions",
        {"messages": messages, "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 3},
    )
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert content and set(content[0]) == {"token", "logprob", "bytes", "top_logprobs"}
    for e in content:
        assert bytes(e["bytes"]).decode("utf-8", errors="replace") == e["token"]
        assert len(e["top_logprobs"]) == 3 and all(set(t) == {"token", "logprob", "bytes"} for t in e["top_logprobs"])
        values = [t["logprob"] for t in e["top_logprobs"]]
        assert values == sorted(values, reverse=True) and e["logprob"] == values[0] <= 0
        assert e["top_logprobs"][0]["token"] == e["token"]
    # the tokens' bytes rebuild the message (the end-of-turn token is not in it, nor in the list)
    assert b"".join(bytes(e["bytes"]) for e in content).decode() == choice["message"]["content"]
    # logprobs true without top_logprobs: the chosen tokens only; logprobs false or absent: null
    only = _post(
        base_url, "/v1/chat/completions", {"messages": messages, "max_tokens": 8, "temperature": 0, "logprobs": True}
    ).json()["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in only] == [e["token"] for e in content]
    assert all(e["top_logprobs"] == [] for e in only)
    for extra in ({}, {"logprobs": False}, {"logprobs": False, "top_logprobs": 0}):
        off = _post(
            base_url, "/v1/chat/completions", {"messages": messages, "max_tokens": 8, "temperature": 0, **extra}
        ).json()["choices"][0]
        assert off["logprobs"] is None and off["message"]["content"] == choice["message"]["content"]


def test_completions_logprobs_zero_gives_the_chosen_token_only(base_url):
    lp = _post(
        base_url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 0}
    ).json()["choices"][0]["logprobs"]
    assert [list(t) for t in lp["top_logprobs"]] == [[tok] for tok in lp["tokens"]]
    assert [list(t.values())[0] for t in lp["top_logprobs"]] == lp["token_logprobs"]


def test_a_sampled_token_reports_its_raw_logprob(base_url):
    """temperature/top-k change which token is drawn, not the numbers: the model's raw distribution."""
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 1.5, "top_k": 40, "seed": 11, "logprobs": 20}
    lp = _post(base_url, "/v1/completions", body).json()["choices"][0]["logprobs"]
    greedy = _post(
        base_url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 20}
    ).json()["choices"][0]["logprobs"]
    first = lp["top_logprobs"][0]  # the same prefix as the greedy request's first position
    assert {k: first[k] for k in greedy["top_logprobs"][0]} == pytest.approx(greedy["top_logprobs"][0], abs=1e-4)
    for tok, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert value <= max(top.values()) and top[tok] == value
        assert math.fsum(math.exp(v) for v in top.values()) <= 1.0 + 1e-4


def test_a_batch_where_only_some_rows_ask(base_url, engine):
    """Concurrent requests share engine steps; those asking get log-probabilities, every text is the
    text the same request gets alone and without them, and a row's numbers do not depend on its batch."""
    prompts = ["One, two, three,", "The sky is", "def add(a, b):", "Water boils at", PROMPT, "Roses are"]
    alone = [
        _post(base_url, "/v1/completions", {"prompt": p, "max_tokens": 8, "temperature": 0}).json() for p in prompts
    ]
    solo_lp = _post(
        base_url, "/v1/completions", {"prompt": prompts[1], "max_tokens": 8, "temperature": 0, "logprobs": 2}
    ).json()["choices"][0]["logprobs"]
    before = engine.stats()["steps"]
    bodies = [
        {"prompt": p, "max_tokens": 8, "temperature": 0, **({"logprobs": 2} if i % 2 else {})}
        for i, p in enumerate(prompts)
    ]
    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda b: _post(base_url, "/v1/completions", b).json(), bodies))
    assert engine.stats()["steps"] - before < 8 * len(prompts)  # the requests shared steps
    for i, (a, t) in enumerate(zip(alone, together)):
        assert t["choices"][0]["text"] == a["choices"][0]["text"]
        assert (t["choices"][0]["logprobs"] is None) == (i % 2 == 0)
    lp = together[1]["choices"][0]["logprobs"]
    assert lp["tokens"] == solo_lp["tokens"]
    np.testing.assert_allclose(lp["token_logprobs"], solo_lp["token_logprobs"], atol=1e-4)
    # n choices and several prompts in one request each get their own
    multi = _post(
        base_url, "/v1/completions", {"prompt": prompts[:2], "n": 2, "max_tokens": 3, "temperature": 0, "logprobs": 1}
    ).json()
    assert len(multi["choices"]) == 4 and all(len(c["logprobs"]["tokens"]) == 3 for c in multi["choices"])


def test_a_stop_string_ends_the_token_list_with_the_text(base_url):
    full = _post(
        base_url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 1}
    ).json()["choices"][0]
    stop = full["logprobs"]["tokens"][2]
    cut = _post(
        base_url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 1, "stop": stop}
    ).json()["choices"][0]
    assert cut["text"] == "".join(full["logprobs"]["tokens"][:2])
    assert cut["logprobs"]["tokens"] == full["logprobs"]["tokens"][:2]


@pytest.mark.parametrize(
    "path, extra, field",
    [
        ("/v1/completions", {"logprobs": 21}, "logprobs"),
        ("/v1/completions", {"logprobs": -1}, "logprobs"),
        ("/v1/completions", {"logprobs": True}, "logprobs"),
        ("/v1/completions", {"logprobs": "5"}, "logprobs"),
        ("/v1/completions", {"top_logprobs": 3}, "top_logprobs"),
        ("/v1/completions", {"echo": "yes", "logprobs": 1}, "echo"),
        ("/v1/chat/completions", {"echo": True}, "echo"),
        ("/v1/chat/completions", {"logprobs": 5}, "logprobs"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 2.5}, "top_logprobs"),
        ("/v1/chat/completions", {"top_logprobs": 3}, "top_logprobs"),
        ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 3}, "top_logprobs"),
    ],
)
def test_bad_logprob_values_are_400s_naming_the_field(base_url, path, extra, field):
    body = {"prompt": "Hi"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "Hi"}]}
    r = _post(base_url, path, {**body, "max_tokens": 1, **extra})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert message.startswith(f"`{field}`"), message
    if path.endswith("chat/completions") and field == "echo":  # a completions field: said so, and where to send it
        assert "is a /v1/completions field" in message and "`prompt`" in message
    else:  # a value out of its range, not a field refused as a whole
        assert "not supported" not in message and len(message) < 200, message
