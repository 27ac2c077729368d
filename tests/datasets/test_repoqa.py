"""RepoQA-style retrieval on real installed source: layout, needles, descriptions, chunks."""
from __future__ import annotations

import json
import re

import pytest

from eval.datasets import load_dataset, token_counter
from eval.datasets.errors import DatasetError, DatasetNotFoundError
from eval.datasets.repoqa import dependency_order, load_repoqa, read_package, repository_text
from eval.llm import ScriptedLLM


@pytest.fixture(scope="module")
def samples():
    return load_dataset("repoqa", packages=["json", "email"], needles=5, seed=3, chunk_tokens=4096)


def test_dependency_order_puts_imports_first():
    order = [f.path for f in dependency_order(read_package("json"))]
    assert set(order) == {"json/__init__.py", "json/decoder.py", "json/encoder.py", "json/scanner.py", "json/tool.py"}
    assert order.index("json/scanner.py") < order.index("json/decoder.py") < order.index("json/__init__.py") < order.index("json/tool.py")
    assert order.index("json/encoder.py") < order.index("json/__init__.py")
    email = [f.path for f in dependency_order(read_package("email"))]
    assert email.index("email/errors.py") < email.index("email/message.py") < email.index("email/parser.py")


def test_samples_gold_and_chunks(samples):
    count = token_counter()
    assert len(samples) == 10 and len({s.id for s in samples}) == 10
    texts = {p: repository_text(dependency_order(read_package(p))) for p in ("json", "email")}
    for s in samples:
        assert "".join(s.chunks) == texts[s.metadata["package"]]  # nothing lost, nothing added
        assert all(count(c) <= 4096 for c in s.chunks)
        defs = re.findall(rf"^\s*(?:async\s+)?def {re.escape(s.gold)}\(", "".join(s.chunks), re.MULTILINE)
        assert len(defs) == 1  # the gold name identifies exactly one function
        assert re.search(rf"def {re.escape(s.gold)}\(", s.chunks[s.metadata["needle_chunk"]])
        assert not re.search(rf"\b{re.escape(s.gold)}\b", s.query)  # the description never names it
        d = s.metadata["description"]
        assert set(d) == {"purpose", "input", "output", "procedure"} and all(d.values())
        assert s.query.endswith(d["procedure"]) and d["purpose"] in s.query


def test_seeded_and_deterministic(samples):
    again = load_repoqa(["json"], needles=5, seed=3, chunk_tokens=4096)
    assert [s.id for s in again] == [s.id for s in samples[:5]] and [s.query for s in again] == [s.query for s in samples[:5]]
    other = load_repoqa(["json"], needles=5, seed=4, chunk_tokens=4096)
    assert [s.gold for s in other] != [s.gold for s in samples[:5]]


def test_llm_descriptions_pin_prompt_and_parsing():
    reply = json.dumps({"purpose": "Encodes strings via py_encode_basestring_ascii", "input": "a str", "output": "a str",
                        "procedure": "escapes non-ASCII characters"})
    llm = ScriptedLLM([reply] * 2)
    [s, t] = load_repoqa(["json"], needles=2, seed=0, chunk_tokens=4096, llm=llm)
    prompt = llm.requests[0].messages[0]["content"]
    assert "Never write the function's name." in prompt and f"def {s.gold}(" in prompt
    assert s.metadata["describer"] == "llm" and s.metadata["description"]["input"] == "a str"
    if s.gold == "py_encode_basestring_ascii":
        assert "this function" in s.metadata["description"]["purpose"]
    with pytest.raises(DatasetError, match="not a JSON object"):
        load_repoqa(["json"], needles=1, seed=0, llm=ScriptedLLM(["I think it encodes things."]))


def test_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError):
        load_repoqa(["no_such_package_anywhere"])
    (tmp_path / "tiny.py").write_text('def helper_one(x):\n    """Add one to a number given."""\n    return x + 1\n')
    with pytest.raises(DatasetError, match="qualify as needles"):
        load_repoqa([tmp_path], needles=1)


def test_line_packing_is_the_greedy_packing():
    import random

    from eval.datasets.repoqa import pack_lines

    count = token_counter()

    def one_line_at_a_time(text: str, limit: int) -> list[str]:
        out, cur = [], ""
        for line in text.splitlines(keepends=True):
            if count(cur + line) <= limit:
                cur += line
            else:
                out.append(cur)
                cur = line
        return out + [cur] if cur else out

    rng = random.Random(0)
    for _ in range(60):
        lines = ["\n" * rng.randint(1, 3) if rng.random() < 0.3 else " " * rng.randint(0, 8) + f"x = {rng.randint(0, 10 ** 6)}  # note\n"
                 for _ in range(rng.randint(1, 80))]
        text, limit = "".join(lines), rng.randint(20, 120)
        assert pack_lines(text, limit, count) == one_line_at_a_time(text, limit)
    long_line = "y" * 5000 + "\n"
    pieces = pack_lines("a = 1\n" + long_line, 50, count)
    assert "".join(pieces) == "a = 1\n" + long_line and all(count(p) <= 50 for p in pieces)
