"""kg-retrieval end to end on a scripted LLM: extraction prompts, graph, retrieved edges in the summary prompt."""

from __future__ import annotations

from memloop.eval.datasets.sample import Sample
from memloop.eval.llm import ScriptedLLM
from memloop.eval.methods import get_method
from memloop.eval.templates import load_template

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
    book = Sample(
        id="t",
        task="book",
        chunks=("Tom painted the fence. Aunt Polly watched Tom.", "Thomas and Becky argued at school."),
        metadata={"chunk_chapters": [1, 2], "target_chapter": 2},
    )
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
    tpl = load_template("s001-chapter-summary")
    one = llm.count_tokens(tpl.render(edges="Aunt Polly; aunt of; Tom", chapter=book.chunks[0], length=""))
    # room (after max_tokens) for one edge line but not two
    out = get_method("kg-retrieval", context_window=one + 10, max_tokens=10).run(book, llm)
    assert out.steps[1].parsed == {"chapter": 1, "edges_ranked": 3, "edges_used": 1}


def test_token_linearization_puts_the_chapter_marker_before_the_chapter() -> None:
    """Section 3.4: the linearized edges, then the <chapter> token and the chapter text."""
    book = Sample(
        id="t",
        task="book",
        chunks=("Tom painted the fence. Aunt Polly watched Tom.", "Thomas and Becky argued at school."),
        metadata={"chunk_chapters": [1, 2], "target_chapter": 2},
    )
    llm = ScriptedLLM([EX1, EX2, "Tom and Becky argue."])
    out = get_method("kg-retrieval", linearization="tokens").run(book, llm)
    prompt = llm.requests[2].messages[0]["content"]
    assert "<subject>Thomas\n    <object>Becky\n      <predicate>" in prompt
    assert "\n<chapter>Thomas and Becky argued at school.\n" in prompt and "[Knowledge graph]" not in prompt
    assert prompt.index("<predicate>") < prompt.index("<chapter>")
    assert out.steps[2].template_id == "s001-chapter-summary-tokens" and out.steps[2].parsed["edges_used"] == 2


def test_no_kg_baseline_summarises_each_chapter_from_its_text_alone() -> None:
    """Section 4.2's No-KG baseline: no extraction, no graph, the chapter text as the only input."""
    book = Sample(
        id="t",
        task="book",
        chunks=("Chapter 1\nTom painted.", "more of one", "Chapter 2\nBecky argued."),
        metadata={"chunk_chapters": [1, 1, 2]},
    )
    llm = ScriptedLLM(["Tom paints.", "Becky argues."])  # two calls only: a third would fail the test
    out = get_method("no-kg").run(book, llm)
    assert [s.kind for s in out.steps] == ["summarize", "summarize"] and out.memory is None
    first = llm.requests[0].messages[0]["content"]
    assert "[Chapter]\nChapter 1\nTom painted.\n\nmore of one\n" in first and "knowledge graph" not in first.lower()
    assert out.answer == "Tom paints.\n\nBecky argues." and out.steps[1].parsed == {"chapter": 2}
    # the same chapter prompt as kg-retrieval, less the graph
    kg_tpl, nokg_tpl = load_template("s001-chapter-summary").text, load_template("s001-chapter-summary-nokg").text
    assert kg_tpl.rstrip().endswith("Summary:") and nokg_tpl.rstrip().endswith("Summary:")
    target = Sample(
        id="u", task="book", chunks=book.chunks, metadata={"chunk_chapters": [1, 1, 2], "target_chapter": 2}
    )
    assert get_method("no-kg").run(target, ScriptedLLM(["Becky argues."])).answer == "Becky argues."


def test_kg_retrieval_reads_a_book_chapter_by_chapter(tmp_path) -> None:
    from memloop.eval.datasets.books import load_book

    (tmp_path / "tom.txt").write_text(
        "Chapter 1\n\nTom painted the fence. Aunt Polly watched Tom.\n\nChapter 2\n\nThomas and Becky argued at school."
    )
    book = load_book(tmp_path / "tom.txt", chunk_tokens=2048, chunk_by="chapter")
    assert book.chunks == (
        "Chapter 1\nTom painted the fence. Aunt Polly watched Tom.",
        "Chapter 2\nThomas and Becky argued at school.",
    )
    llm = ScriptedLLM([EX1, EX2, "Tom paints.", "Tom and Becky argue."])
    out = get_method("kg-retrieval").run(book, llm)
    assert [s.parsed["chapter"] for s in out.steps if s.kind == "summarize"] == [1, 2]
    assert "[Chapter]\nChapter 2\nThomas and Becky argued at school." in llm.requests[3].messages[0]["content"]


class _Windowed(ScriptedLLM):
    """A scripted model that reports its window, as the engine does."""

    context_tokens = 300


def test_budget_is_the_served_window_and_a_chapter_that_cannot_fit_is_not_applicable() -> None:
    """Issue 30 point 18: no fixed 4096-token budget; the model's own window decides, and a chapter
    longer than it is recorded as not applicable before any call, not sent to fail in the engine."""
    chapter = " ".join(["Tom, Thomas, Becky and Aunt Polly."] * 900)  # about 5,400 words
    book = Sample(id="t", task="book", chunks=(chapter,))
    llm = ScriptedLLM([EX1, "Summary."])
    llm.context_tokens = 16384
    out = get_method("kg-retrieval").run(book, llm)
    assert out.not_applicable is None and out.steps[1].parsed["edges_used"] == 3
    for name in ("kg-retrieval", "no-kg"):
        small = _Windowed([])
        out = get_method(name).run(Sample(id="t", task="book", chunks=(chapter,)), small)
        assert (
            small.requests == []
            and "chapter 1:" in out.not_applicable
            and "context_window=300 (llm)" in out.not_applicable
        )


def test_token_linearisation_pays_each_subject_heading_once() -> None:
    """Edges sharing a subject share its `<subject>` line in the prompt, so the budget prices them so."""
    preds = [f"does{i}" for i in range(30)]
    ex = "Tom\nBecky\nAunt Polly\n\nKnowledge graph edges:\n" + "".join(
        f"{i + 1}. Tom; {p}; Becky\n" for i, p in enumerate(preds)
    )
    book = Sample(id="t", task="book", chunks=("Tom and Becky and Aunt Polly.",))
    llm = ScriptedLLM([ex, "Summary."])
    tpl = load_template("s001-chapter-summary-tokens")
    grouped = "<subject>Tom\n    <object>Becky\n" + "\n".join(f"      <predicate>{p}" for p in preds)
    need = llm.count_tokens(tpl.render(edges=grouped, chapter=book.chunks[0]))
    out = get_method("kg-retrieval", linearization="tokens", min_degree=0, context_window=need + 10, max_tokens=10).run(
        book, llm
    )
    assert out.steps[1].parsed["edges_used"] == 30  # pricing each edge with its own headings fit fewer


def test_extraction_example_shows_multi_object_lines_and_three_name_aliases() -> None:
    text = load_template("s001-kg-extract").text
    assert "Captain Rees; runs the ferry between; Harwick, Carrow" in text
    assert any(line.count(" / ") >= 2 for line in text.splitlines())


def test_extraction_example_is_at_the_scale_of_the_papers_appendix_e() -> None:
    """Appendix E's example lists 9 entities and 15 edges; a small model copies the example's edge count."""
    from memloop.eval.kg import parse_extraction

    text = load_template("s001-kg-extract").text
    example = text.split("[End story excerpt]\n", 1)[1].split("[Begin story excerpt]", 1)[0]
    ex = parse_extraction(example)
    edge_lines = [line for line in example.splitlines() if line.split(".", 1)[0].isdigit()]
    assert len(ex.aliases) == 9 and len(edge_lines) == 15 and not ex.rejected


class _Checked(ScriptedLLM):
    """A scripted model with the engine's own fit check (`misfit`): at most `limit` prompt words."""

    limit = 0

    def misfit(self, request) -> str | None:
        words = self.count_tokens(request.messages[0]["content"]) + request.sampling.max_tokens
        return None if words <= self.limit else f"{words} > {self.limit}"


def test_the_engines_own_fit_check_decides_how_many_edges_fit() -> None:
    book = Sample(id="t", task="book", chunks=("Tom, Thomas, Becky and Aunt Polly.",))
    llm = _Checked([EX1, "Summary."])
    one = llm.count_tokens(
        load_template("s001-chapter-summary").render(
            edges="Aunt Polly; aunt of; Tom", chapter=book.chunks[0], length=""
        )
    )
    llm.limit = one + 10
    out = get_method("kg-retrieval", max_tokens=10).run(book, llm)
    assert out.steps[1].parsed == {"chapter": 1, "edges_ranked": 3, "edges_used": 1}


def test_chain_of_density_rounds_for_both_rows() -> None:
    """Issue 30 point 15: the paper's GPT-4 rows summarise with Chain of Density: after the first
    summary, one call per densification round, each with the chapter (and the retrieved edges) and
    the current summary; the last round's summary is the answer, an unreadable round keeps the one before."""
    book = Sample(
        id="t",
        task="book",
        chunks=("Tom painted the fence. Aunt Polly watched Tom.", "Thomas and Becky argued at school."),
        metadata={"chunk_chapters": [1, 2], "target_chapter": 2},
    )
    llm = ScriptedLLM(
        [
            EX1,
            EX2,
            "Two children argue.",
            "Thomas; Becky\nDenser summary: Thomas and Becky argue.",
            "nothing readable",
            "school\nDenser summary: Thomas and Becky argue at school.",
        ]
    )
    out = get_method("kg-retrieval", density_rounds=3, max_attempts=1).run(book, llm)
    assert [s.kind for s in out.steps] == ["extract", "extract", "summarize", "densify", "densify", "densify"]
    first = llm.requests[3].messages[0]["content"]
    assert "[Current summary]\nTwo children argue." in first and "Thomas; argues with; Becky" in first
    assert first.rstrip().endswith("Missing entities:")
    assert "[Current summary]\nThomas and Becky argue." in llm.requests[5].messages[0]["content"]  # round 2 failed
    assert out.steps[3].parsed["missing"] == ["Thomas", "Becky"] and not out.steps[4].ok
    assert out.answer == "Thomas and Becky argue at school."
    nokg = ScriptedLLM(["Two children argue.", "Becky\nDenser summary: Becky argues."])
    out = get_method("no-kg", density_rounds=1).run(book, nokg)
    assert [s.kind for s in out.steps] == ["summarize", "densify"] and out.answer == "Becky argues."
    assert "knowledge graph" not in nokg.requests[1].messages[0]["content"].lower()


def test_chain_of_density_sets_the_first_summarys_length_and_every_round_keeps_it() -> None:
    """Chain of Density's first summary is about 80 words and each round rewrites it at that length
    (the paper's appendix G summaries are 58-80 words); without rounds no length is imposed."""
    book = Sample(
        id="t",
        task="book",
        chunks=("Tom painted the fence. Aunt Polly watched Tom.",),
        metadata={"chunk_chapters": [1], "target_chapter": 1},
    )
    for method, script in (
        ("kg-retrieval", [EX1, "Tom paints.", "Polly\nDenser summary: Tom paints; Polly watches."]),
        ("no-kg", ["Tom paints.", "Polly\nDenser summary: Tom paints; Polly watches."]),
    ):
        llm = ScriptedLLM(script)
        get_method(method, density_rounds=1).run(book, llm)
        first, round_1 = (r.messages[0]["content"] for r in llm.requests[-2:])
        assert "about 80 words in four or five sentences" in first, method
        assert "Rewrite the summary at the same length, about 80 words," in round_1, method
        llm = ScriptedLLM(script[:-1])
        get_method(method, density_rounds=0, density_words=60).run(book, llm)
        assert "Write a summary of this chapter in plain text." in llm.requests[-1].messages[0]["content"]
    llm = ScriptedLLM(["Tom paints.", "Polly\nDenser summary: Tom paints."])
    get_method("no-kg", density_rounds=1, density_words=60).run(book, llm)
    assert "about 60 words in four or five sentences" in llm.requests[0].messages[0]["content"]


def test_chain_of_density_asks_for_a_sparse_entity_light_first_summary_with_filler() -> None:
    """Adams et al. (From Sparse to Dense): the first summary is deliberately sparse -- few entities, the
    length reached with non-specific filler -- so each round has entities to add. Without rounds the first
    summary is the plain, informative one."""
    book = Sample(
        id="t",
        task="book",
        chunks=("Tom painted the fence. Aunt Polly watched Tom.",),
        metadata={"chunk_chapters": [1], "target_chapter": 1},
    )
    for method, script in (
        ("kg-retrieval", [EX1, "A boy does a chore.", "Tom\nDenser summary: Tom paints."]),
        ("no-kg", ["A boy does a chore.", "Tom\nDenser summary: Tom paints."]),
    ):
        llm = ScriptedLLM(script)
        out = get_method(method, density_rounds=1).run(book, llm)
        first = out.steps[-2]
        assert first.kind == "summarize" and first.template_id.startswith("s001-density-first"), method
        prompt = llm.requests[-2].messages[0]["content"]
        assert "[Chapter]\nTom painted the fence." in prompt, method
        assert "meant to be sparse" in prompt and "about 80 words in four or five sentences" in prompt, method
        assert "Name only one to three of the chapter's entities" in prompt, method
        assert "stay general about what happens" in prompt and "non-specific filler" in prompt, method
        assert "cover the chapter's main events" not in prompt, method  # the informative rule is not asked for
        assert ("[Knowledge graph]\n" in prompt) == (method == "kg-retrieval"), method
        llm = ScriptedLLM(script[:-1])
        get_method(method, density_rounds=0).run(book, llm)
        plain = llm.requests[-1].messages[0]["content"]
        assert "cover the chapter's main events in order" in plain and "sparse" not in plain, method


def test_the_graph_is_built_from_the_whole_book_and_retrieval_keeps_edges_up_to_the_target(tmp_path) -> None:
    """Sections 3.2/3.4: the graph is built, merged and pruned on the whole book, then edges from later
    chapters are left out. Built from chapter 1 alone, Tom and Becky (one edge each) would be pruned and
    chapter 1 would get no edge; built from the book, chapter 1 keeps its own edge and not chapter 2's."""
    import json

    from memloop.eval.datasets.booksum import load_booksum

    from tests.datasets.test_booksum import SUMMARY, _row

    chapters = [
        "Chapter 1\nTom met Becky at school and fell for her at once, while the others watched.",
        "Chapter 2\nTom argued with Becky. Aunt Polly scolded Tom. Becky and Aunt Polly are friends.",
    ]
    rows = [
        _row(5, "Tom", f"all_chapterized_books/5-chapters/{n}.txt", text, SUMMARY.format(who=f"Tom {n}"), "guide")
        for n, text in enumerate(chapters, 1)
    ]
    path = tmp_path / "booksum.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    [sample] = [s for s in load_booksum(path, samples=None) if s.metadata["target_chapter"] == 1]
    llm = ScriptedLLM(
        [
            "Tom\nBecky\n\nKnowledge graph edges:\n1. Tom; in love with; Becky\n",
            "Tom\nBecky\nAunt Polly\n\nKnowledge graph edges:\n1. Tom; argues with; Becky\n"
            "2. Aunt Polly; scolds; Tom\n3. Becky; friend of; Aunt Polly\n",
            "Tom falls for Becky.",
        ]
    )
    out = get_method("kg-retrieval").run(sample, llm)
    assert [s.kind for s in out.steps] == ["extract", "extract", "summarize"]  # both chapters extracted
    prompt = llm.requests[2].messages[0]["content"]
    kg_part = prompt.split("[Knowledge graph]\n")[1].split("\n\n[Chapter]")[0].splitlines()
    assert kg_part == ["Tom; in love with; Becky"]  # chapter 2's edges are later in the story
    assert out.steps[2].parsed["edges_used"] == 1 and "Chapter 2" not in prompt
