"""kg-retrieval end to end on a scripted LLM: extraction prompts, graph, retrieved edges in the summary prompt."""
from __future__ import annotations

from eval.datasets.sample import Sample
from eval.llm import ScriptedLLM
from eval.methods import get_method
from eval.templates import load_template

EX1 = """Tom / Thomas
Aunt Polly
Becky

Knowledge graph edges:
1. Aunt Polly; aunt of; Tom
2. Tom; in love with; Becky
3. Becky; friend of; Aunt Polly
"""
EX2 = """Thomas
Becky
Aunt Polly

Knowledge graph edges:
1. Thomas; argues with; Becky
"""


def test_kg_retrieval_pipeline() -> None:
    book = Sample(id="t", task="book", chunks=("Tom painted the fence. Aunt Polly watched Tom.",
                                               "Thomas and Becky argued at school."),
                  metadata={"chunk_chapters": [1, 2], "target_chapter": 2})
    llm = ScriptedLLM([EX1, EX2, "Tom and Becky argue."])
    out = get_method("kg-retrieval").run(book, llm)
    assert [s.kind for s in out.steps] == ["extract", "extract", "summarize"]
    first = llm.requests[0].messages[0]["content"]
    assert "[Begin story excerpt]\nTom painted the fence." in first and first.rstrip().endswith('separated by " / "):')
    assert out.memory["nodes"]["Tom"] == ["Tom", "Thomas"] or out.memory["nodes"].get("Thomas") == ["Thomas", "Tom"]
    prompt = llm.requests[2].messages[0]["content"]
    kg_part = prompt.split("[Knowledge graph]\n")[1].split("\n\n[Chapter]")[0].splitlines()
    # chapter 2 mentions Thomas and Becky only: edges among them from chapters 1-2, Thomas named as in the chapter
    assert sorted(kg_part) == ["Thomas; argues with; Becky", "Thomas; in love with; Becky"]
    assert out.answer == "Tom and Becky argue." and out.steps[2].parsed["edges_used"] == 2


def test_kg_retrieval_budget_limits_edges() -> None:
    book = Sample(id="t", task="book", chunks=("Tom, Thomas, Becky and Aunt Polly.",))
    llm = ScriptedLLM([EX1, "Summary."])
    base = llm.count_tokens(load_template("s001-chapter-summary").render(edges="", chapter=book.chunks[0]))
    # room for one edge line ("Aunt Polly; aunt of; Tom" = 5 words + 1) but not two
    out = get_method("kg-retrieval", context_window=base + 10 + 8, max_tokens=10).run(book, llm)
    assert out.steps[1].parsed == {"chapter": 1, "edges_ranked": 3, "edges_used": 1}
