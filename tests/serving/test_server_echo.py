"""`echo` on /v1/completions through the server on 127.0.0.1: every prompt token's log-probability
(the model's own, first one null), the shapes lm-evaluation-harness's `local-completions` parses,
`max_tokens: 0`, echo before a greedy completion, token-id prompts, and the limits."""

from __future__ import annotations

from operator import itemgetter

import httpx
import jax.numpy as jnp
import numpy as np
import pytest

from tests.http_server import serve_app

pytestmark = pytest.mark.timeout(300)

PROMPTS = ["The capital of France is Paris.", "Hi", "One, two, three, four, five, six, seven, eight, nine and ten."]


def _post(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json=body, timeout=300)


def _log_softmax(loaded_model, ids: list[int]) -> np.ndarray:
    """[T, V] log_softmax of the plain model's logits over the whole prompt (no cache, no pages)."""
    from memloop.engine.model.decoder import forward, no_cache_attention

    toks = jnp.asarray([ids], jnp.int32)
    pos = jnp.arange(len(ids), dtype=jnp.int32)[None]
    logits = np.asarray(
        forward(loaded_model.params, loaded_model.config, toks, pos, None, no_cache_attention(pos))[0][0], np.float64
    )
    logp = logits - logits.max(-1, keepdims=True)
    return logp - np.log(np.exp(logp).sum(-1, keepdims=True))


def lm_eval_parse_logprobs(outputs: list[dict], ctxlens: list[int]) -> list[tuple[float, bool]]:
    """lm-evaluation-harness's `LocalCompletionsAPI.parse_logprobs` (lm_eval/models/openai_completions.py),
    restated: the harness is not a dependency of the project. It sends max_tokens 1 and drops the
    generated token's entry with [ctxlen:-1]; greedy means each token's logprob is its top's max."""
    res = []
    for out in outputs:
        for choice, ctxlen in zip(sorted(out["choices"], key=itemgetter("index")), ctxlens):
            assert ctxlen > 0
            logprobs = sum(choice["logprobs"]["token_logprobs"][ctxlen:-1])
            tokens_logprobs = choice["logprobs"]["token_logprobs"][ctxlen:-1]
            top_logprobs = choice["logprobs"]["top_logprobs"][ctxlen:-1]
            is_greedy = all(tok == max(top.values()) for tok, top in zip(tokens_logprobs, top_logprobs))
            res.append((logprobs, is_greedy))
    return res


def test_echo_with_max_tokens_0_scores_every_prompt_token(base_url, loaded_model, engine):
    from memloop.engine.runner.token_pieces import TokenPieces

    before = engine.stats()["scored_prompts"]
    r = _post(base_url, {"prompt": PROMPTS, "echo": True, "logprobs": 3, "max_tokens": 0, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert engine.stats()["scored_prompts"] == before + 3
    pieces = TokenPieces(loaded_model.tokenizer.hf)
    prompt_tokens = 0
    for prompt, choice in zip(PROMPTS, body["choices"]):
        ids = loaded_model.tokenizer.prompt_ids(prompt)
        prompt_tokens += len(ids)
        lp = choice["logprobs"]
        assert choice["text"] == prompt and choice["finish_reason"] == "length"
        assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
        assert lp["tokens"] == [pieces.text_of(t) for t in ids] and "".join(lp["tokens"]) == prompt
        assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == len(ids)
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None  # nothing precedes it
        assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(ids))]
        logp = _log_softmax(loaded_model, ids)
        for i in range(1, len(ids)):
            assert abs(lp["token_logprobs"][i] - logp[i - 1, ids[i]]) < 1e-3
            top = lp["top_logprobs"][i]
            best = [int(t) for t in np.argsort(-logp[i - 1])[:3]]
            assert list(top)[:3] == [pieces.text_of(t) for t in best] or len(top) == 4  # the chosen token may add one
            assert top[lp["tokens"][i]] == lp["token_logprobs"][i]
            assert list(top.values()) == sorted(top.values(), reverse=True)
            np.testing.assert_allclose([top[pieces.text_of(t)] for t in best], logp[i - 1, best], atol=1e-3)
    assert body["usage"]["prompt_tokens"] == prompt_tokens and body["usage"]["completion_tokens"] == 0


def test_lm_eval_loglikelihood_request_parses_to_the_models_numbers(base_url, loaded_model):
    """lm-eval's own payload (token ids, echo, logprobs 1, max_tokens 1, temperature 0, seed) and its parsing."""
    tok = loaded_model.tokenizer
    pairs = [
        ("The capital of France is", " Paris"),
        ("The capital of France is", " a banana split"),
        ("Question: what is two plus two? Answer:", " four"),
    ]
    inputs = [tok.encode(c) + tok.encode(x) for c, x in pairs]
    ctxlens = [len(tok.encode(c)) for c, _ in pairs]
    r = _post(
        base_url,
        {
            "model": "smollm2",
            "prompt": inputs,
            "temperature": 0,
            "max_tokens": 1,
            "logprobs": 1,
            "seed": 1234,
            "echo": True,
        },
    )
    assert r.status_code == 200, r.text
    for choice, ids in zip(r.json()["choices"], inputs):  # the prompt's entries, then the generated token's
        assert len(choice["logprobs"]["token_logprobs"]) == len(ids) + 1
    parsed = lm_eval_parse_logprobs([r.json()], ctxlens)
    for (total, greedy), ids, ctxlen in zip(parsed, inputs, ctxlens):
        logp = _log_softmax(loaded_model, ids)
        want = sum(logp[i - 1, ids[i]] for i in range(ctxlen, len(ids)))
        assert abs(total - want) < 1e-3 * (len(ids) - ctxlen)
        assert greedy == all(int(logp[i - 1].argmax()) == ids[i] for i in range(ctxlen, len(ids)))
    assert [g for _, g in parsed][1] is False  # " a banana split" is not what the model would write
    # The older harness sends max_tokens 0 and reads [ctxlen:]: the same numbers.
    r0 = _post(base_url, {"prompt": inputs, "temperature": 0, "max_tokens": 0, "logprobs": 10, "echo": True})
    assert r0.status_code == 200, r0.text
    for choice, (total, _), ctxlen in zip(r0.json()["choices"], parsed, ctxlens):
        assert len(choice["logprobs"]["token_logprobs"]) == len(choice["logprobs"]["tokens"])
        assert abs(sum(choice["logprobs"]["token_logprobs"][ctxlen:]) - total) < 1e-4


def test_echo_lists_a_generated_stop_token(base_url, loaded_model):
    """With echo, one entry per prompt token and one per generated token, the stop token included (the
    text leaves it out): lm-eval takes the last entry for the generated token. Without echo the
    entries stay those of the text."""
    prompt = "<|im_start|>user\nIs the sky blue? Answer yes or no.<|im_end|>\n<|im_start|>assistant\nYes."
    ids = loaded_model.tokenizer.encode(prompt)
    body = {"prompt": [ids], "max_tokens": 1, "temperature": 0, "logprobs": 1}
    echoed = _post(base_url, {**body, "echo": True}).json()["choices"][0]
    assert echoed["finish_reason"] == "stop" and echoed["text"] == loaded_model.tokenizer.decode(ids)
    lp = echoed["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == len(ids) + 1
    assert lp["tokens"][-1] == "<|im_end|>" and lp["text_offset"][-1] == len(echoed["text"])
    logp = _log_softmax(loaded_model, ids + [2])
    assert abs(lp["token_logprobs"][-1] - logp[-2, 2]) < 1e-3 and lp["top_logprobs"][-1] == {
        "<|im_end|>": lp["token_logprobs"][-1]
    }
    plain = _post(base_url, body).json()["choices"][0]
    assert plain["text"] == "" and plain["logprobs"]["tokens"] == []


def test_echo_before_a_greedy_completion(base_url):
    prompt = "The capital of France is"
    plain = _post(base_url, {"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 2}).json()["choices"][0]
    r = _post(base_url, {"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 2, "echo": True})
    assert r.status_code == 200, r.text
    echoed = r.json()["choices"][0]
    assert echoed["text"] == prompt + plain["text"] and echoed["finish_reason"] == plain["finish_reason"]
    lp, out = echoed["logprobs"], plain["logprobs"]
    n = len(lp["tokens"]) - len(out["tokens"])
    assert "".join(lp["tokens"][:n]) == prompt and lp["tokens"][n:] == out["tokens"]
    assert lp["token_logprobs"][n:] == out["token_logprobs"] and lp["top_logprobs"][n:] == out["top_logprobs"]
    assert lp["text_offset"][n:] == [len(prompt) + o for o in out["text_offset"]]
    # Scoring prompt + completion gives the numbers the decoding steps gave (two paths, one model).
    whole = _post(base_url, {"prompt": echoed["text"], "max_tokens": 0, "echo": True, "logprobs": 0}).json()
    scored = whole["choices"][0]["logprobs"]
    assert scored["tokens"][n:] == out["tokens"]
    np.testing.assert_allclose(scored["token_logprobs"][n:], out["token_logprobs"], atol=1e-3)
    # Echo without logprobs: the text only.
    bare = _post(base_url, {"prompt": prompt, "max_tokens": 6, "temperature": 0, "echo": True}).json()["choices"][0]
    assert bare["text"] == prompt + plain["text"] and bare["logprobs"] is None
    only = _post(base_url, {"prompt": [prompt, "Hi"], "max_tokens": 0, "echo": True, "n": 2}).json()
    assert [c["text"] for c in only["choices"]] == [prompt, prompt, "Hi", "Hi"]
    assert only["usage"]["completion_tokens"] == 0


def test_token_id_prompts_are_used_as_they_are(base_url, loaded_model):
    ids = loaded_model.tokenizer.encode("Hello world")
    by_ids = _post(base_url, {"prompt": ids, "max_tokens": 4, "temperature": 0}).json()
    by_text = _post(base_url, {"prompt": "Hello world", "max_tokens": 4, "temperature": 0}).json()
    assert by_ids["choices"][0]["text"] == by_text["choices"][0]["text"]
    assert by_ids["usage"]["prompt_tokens"] == len(ids)
    echoed = _post(base_url, {"prompt": [ids], "max_tokens": 0, "echo": True, "logprobs": 0}).json()["choices"][0]
    assert echoed["text"] == "Hello world" and len(echoed["logprobs"]["tokens"]) == len(ids)


@pytest.mark.parametrize(
    "body, field",
    [
        (
            {"prompt": [1] * 8200, "max_tokens": 0, "echo": True, "logprobs": 1},
            "`prompt` 0 (8200 tokens) exceeds the model context of 8192 tokens",
        ),
        ({"prompt": [1] * 8200, "max_tokens": 1, "echo": True, "logprobs": 1}, "prompt (8200 tokens) + max_tokens (1)"),
        (
            {"prompt": [-1, 5], "max_tokens": 0, "echo": True, "logprobs": 1},
            "`prompt` token ids must be integers in [0, ",
        ),
        ({"prompt": [49152], "max_tokens": 1}, "`prompt` token ids must be integers in [0, 49152)"),
        ({"prompt": [True, 5], "max_tokens": 1}, "invalid request at body.prompt"),
        ({"prompt": [], "max_tokens": 0, "echo": True}, "send 1 to"),
        ({"prompt": "Hi", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "Hi", "max_tokens": 0, "echo": True, "temperature": -1}, "temperature"),
        ({"prompt": "Hi", "max_tokens": 0, "echo": 1}, "`echo` must be true or false"),
    ],
)
def test_echo_limits_are_400s_naming_the_field(base_url, body, field):
    r = _post(base_url, body)
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"], r.json()["error"]["message"]


def test_prompts_are_scored_in_few_calls():
    from memloop.engine.runner.prompt_scoring import batches

    groups = batches([5, 300, 40, 17, 3000, 9])
    assert groups == [[4], [1, 2, 3, 5, 0]]  # longest first; 3000 tokens (bucket 4096) fill one call alone
    assert batches([2000] * 3) == [[0, 1], [2]]  # at most TOKEN_BUDGET padded tokens per call


def test_scoring_holds_queue_places(engine):
    """Each scored prompt takes one of --max-queue's places: more prompts than it holds is a 400."""
    from memloop.engine.serve.server import create_app

    with serve_app(create_app(engine, "smollm2", max_queue=1)) as url:
        r = _post(url, {"prompt": ["a", "b"], "max_tokens": 0, "echo": True, "logprobs": 0})
        assert r.status_code == 400 and "admits at most 1 at once" in r.json()["error"]["message"], r.text
        assert _post(url, {"prompt": "a", "max_tokens": 0, "echo": True, "logprobs": 0}).status_code == 200


def test_scoring_is_bounded_by_the_timeout_and_stops_when_abandoned(make_engine, monkeypatch):
    """Prompt scoring (echo + logprobs) on the real server: past --request-timeout it is a 504 at once
    (it used to answer 200 whenever scoring ended), its queue places are free at once (they used to be
    held until then: other requests got 429), and the scorer starts no further call for it (the
    request after it is scored without waiting for the abandoned prompts)."""
    import time

    import memloop.engine.runner.prompt_scoring as scoring
    from memloop.engine.serve.server import create_app

    # one scoring call per prompt (as prompts of more than 2,048 tokens are), with small prompts
    monkeypatch.setattr(
        scoring, "batches", lambda lengths, budget=scoring.TOKEN_BUDGET: [[i] for i in range(len(lengths))]
    )
    eng = make_engine()
    prompts = [" ".join(f"w{k}x{i}" for i in range(250 + 10 * k)) for k in range(6)]
    with serve_app(create_app(eng, "smollm2", request_timeout=0.5)) as url:
        t0 = time.monotonic()
        r = _post(url, {"prompt": prompts, "echo": True, "logprobs": 0, "max_tokens": 0})
        took = time.monotonic() - t0
        assert r.status_code == 504 and "--request-timeout" in r.json()["error"]["message"], r.text[:300]
        print(f"\n504 after {took:.1f} s")  # the deadline answered it (the message says so), not the scorer's end
        assert httpx.get(f"{url}/v1/stats").json()["server_in_flight"] == 0  # its places are free now
    with serve_app(create_app(eng, "smollm2")) as url:
        ok = _post(url, {"prompt": "Hi there", "echo": True, "logprobs": 0, "max_tokens": 0})
        assert ok.status_code == 200, ok.text
    # only the short prompt was delivered; of the six abandoned ones, at most the call running at the
    # timeout finished (and its result was dropped)
    assert eng.stats()["scored_prompts"] == 1
