"""lm-evaluation-harness's `local-completions` model against the real server on 127.0.0.1: a small
multiple-choice task of a local JSONL file the test writes, each per-item log-likelihood checked
against transformers' on the same GGUF checkpoint. Some continuations end a chat turn, so the model's
next token (the one generated token lm-eval asks for) is its stop token `<|im_end|>`: lm-eval reads
`token_logprobs[ctxlen:-1]`, so the echoed list must hold that generated token too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(900)


def _chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


ITEMS = [
    {"question": _chat("Is the sky blue? Answer yes or no."), "choices": ["Yes.", "No."], "answer": 0},
    {"question": _chat("What is 2+2? Reply with a number only."), "choices": ["4", "5", "22"], "answer": 0},
    {
        "question": _chat("Name the capital of France, one word."),
        "choices": ["Paris.", "Rome.", "Berlin."],
        "answer": 0,
    },
    {"question": "The cat sat on the", "choices": [" mat", " moon", " banana"], "answer": 0},
    {"question": "Water freezes at zero degrees", "choices": [" Celsius", " Fahrenheit", " Kelvin"], "answer": 0},
    {"question": "One, two, three, four,", "choices": [" five", " seven", " twelve"], "answer": 0},
    {"question": "The opposite of up is", "choices": [" down", " left", " sideways"], "answer": 0},
]

TASK = """task: memloop_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: ""
metric_list:
  - metric: acc
"""


@pytest.fixture(scope="module")
def hf_model(smollm2_gguf):
    """transformers' own GGUF loader and PyTorch implementation: the reference."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)  # the CI cores are shared
    model = AutoModelForCausalLM.from_pretrained(
        str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name, dtype=torch.float32
    )
    return model.eval()


def _reference(hf_model, context: list[int], continuation: list[int]) -> tuple[float, bool, int]:
    """(log P(continuation | context), whether every continuation token is the argmax, the argmax after it all)."""
    import torch

    ids = context + continuation
    with torch.no_grad():
        logits = hf_model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, -1).numpy()
    rows = range(len(context) - 1, len(ids) - 1)
    total = float(sum(logp[i, ids[i + 1]] for i in rows))
    greedy = all(int(logp[i].argmax()) == ids[i + 1] for i in rows)
    return total, greedy, int(logp[-1].argmax())


def _write_task(root: Path) -> Path:
    data = root / "items.jsonl"
    data.write_text("".join(json.dumps(item) + "\n" for item in ITEMS))
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "memloop_mc.yaml").write_text(TASK.format(data=data))
    return tasks


def test_lm_eval_loglikelihoods_equal_transformers(base_url, tmp_path, loaded_model, hf_model, monkeypatch):
    import lm_eval
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(tmp_path)
    tasks = _write_task(tmp_path)
    loaded_model.tokenizer.hf.save_pretrained(tmp_path / "tokenizer")  # lm-eval counts context tokens itself
    lm = get_model("local-completions")(
        model="smollm2",
        base_url=f"{base_url}/v1/completions",
        tokenizer_backend="huggingface",
        tokenizer=str(tmp_path / "tokenizer"),
        batch_size=4,
        max_retries=1,
    )
    out = lm_eval.simple_evaluate(
        model=lm, tasks=["memloop_mc"], task_manager=TaskManager(include_path=str(tasks)), log_samples=True
    )
    samples = out["samples"]["memloop_mc"]
    assert len(samples) == len(ITEMS)
    stop_id = loaded_model.tokenizer.hf.convert_tokens_to_ids("<|im_end|>")
    diffs, stops, correct = [], 0, 0
    for sample in samples:
        scores = []
        for (context, continuation), (loglik, greedy) in zip(sample["arguments"], sample["filtered_resps"]):
            ctx, cont = lm._encode_pair(context, continuation)
            want, want_greedy, next_id = _reference(hf_model, ctx, cont)
            diffs.append(abs(loglik - want))
            assert abs(loglik - want) < 1e-3, (context, continuation, loglik, want)
            assert greedy == want_greedy, (context, continuation)
            stops += next_id == stop_id  # the token the server generated after it is the stop token
            scores.append(loglik)
        correct += int(np.argmax(scores)) == sample["target"]
    assert stops >= 3, "the task must hold continuations after which the model's next token is its stop token"
    assert out["results"]["memloop_mc"]["acc,none"] == pytest.approx(correct / len(ITEMS))
    print(
        f"max |lm-eval - transformers| over {len(diffs)} log-likelihoods: {max(diffs):.2e}; {stops} end before a stop "
        "token"
    )
