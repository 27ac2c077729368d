"""MemoryAgentBench's published rows, copied as the paper prints them, to stand beside a run's own.

Source: Hu, Wang, McAuley, "Evaluating Memory in LLM Agents via Incremental Multi-Turn Interactions",
ICLR 2026 (arXiv 2507.05257), Table 2 "Overall Performance Comparison". Every RAG and commercial memory
agent there runs on GPT-4o-mini; its long-context row is the paper's reference. The paper's columns
and the run's sources they correspond to (`COLUMNS`): SH-QA / MH-QA are RULER-QA 1 and 2, LME(S*)
LongMemEval S*, MCC the mean of the five ICL classification sets, Recom. the ReDial recommendation
set, Summ. ∞Bench-Sum, DetQA DetectiveQA, FC-SH / FC-MH FactConsolidation at 262K tokens; each
competency's Avg. is the mean of its columns and Overall the mean of the four competencies. The
paper names the fourth competency Selective Forgetting (SF); memloop keeps the dataset's split name,
Conflict Resolution (CR). Chunks: 512 tokens for SH-QA, MH-QA, LME(S*) and FactConsolidation, 4096
for the rest (the paper's section 4.1), as jobs/configs/papers/memoryagentbench.yaml sets them.
"""

from __future__ import annotations

CITATION = "Hu, Wang, McAuley, ICLR 2026 (arXiv 2507.05257), Table 2"

# (the paper's column, the run's column it corresponds to: a source, a family of sources, a competency)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("SH-QA", "ruler_qa1_197K"),
    ("MH-QA", "ruler_qa2_421K"),
    ("LME(S*)", "longmemeval_s*"),
    ("EventQA", "eventqa_full"),
    ("AR Avg.", "AR"),
    ("MCC", "icl_*"),
    ("Recom.", "recsys_redial_full"),
    ("TTL Avg.", "TTL"),
    ("Summ.", "infbench_sum_eng_shots2"),
    ("DetQA", "detective_qa"),
    ("LRU Avg.", "LRU"),
    ("FC-SH", "factconsolidation_sh_262k"),
    ("FC-MH", "factconsolidation_mh_262k"),
    ("SF Avg.", "CR"),
    ("Overall", "overall"),
)

# (group, agent, the row's numbers in COLUMNS order) as printed
ROWS: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    (
        "Long-Context Agents",
        "GPT-4o",
        (72.0, 51.0, 32.0, 77.2, 58.1, 87.6, 12.3, 50.0, 32.2, 77.5, 54.9, 60.0, 5.0, 32.5, 48.8),
    ),
    (
        "Long-Context Agents",
        "GPT-4o-mini",
        (64.0, 43.0, 30.7, 59.0, 49.2, 82.0, 15.1, 48.6, 28.9, 63.4, 46.2, 45.0, 5.0, 25.0, 42.2),
    ),
    (
        "Long-Context Agents",
        "GPT-4.1-mini",
        (83.0, 66.0, 55.7, 82.6, 71.8, 75.6, 16.7, 46.2, 41.9, 56.3, 49.1, 36.0, 5.0, 20.5, 46.9),
    ),
    (
        "Long-Context Agents",
        "Gemini-2.0-Flash",
        (87.0, 59.0, 47.0, 67.2, 65.1, 84.0, 8.7, 46.4, 23.9, 59.2, 41.6, 30.0, 3.0, 16.5, 42.4),
    ),
    (
        "Long-Context Agents",
        "Claude-3.7-Sonnet",
        (77.0, 53.0, 34.0, 74.6, 59.7, 89.4, 18.3, 53.9, 52.5, 71.8, 62.2, 43.0, 2.0, 22.5, 49.6),
    ),
    (
        "Simple RAG Agents",
        "BM25",
        (66.0, 56.0, 45.3, 74.6, 60.5, 75.4, 13.6, 44.5, 19.0, 52.1, 35.6, 48.0, 3.0, 25.5, 41.5),
    ),
    (
        "Embedding RAG Agents",
        "Contriever",
        (22.0, 31.0, 15.7, 66.8, 33.9, 70.6, 15.2, 42.9, 17.2, 42.3, 29.8, 18.0, 7.0, 12.5, 29.8),
    ),
    (
        "Embedding RAG Agents",
        "Text-Embed-3-Small",
        (60.0, 44.0, 48.3, 63.0, 53.8, 70.0, 15.3, 42.7, 17.7, 54.9, 36.3, 28.0, 3.0, 15.5, 37.1),
    ),
    (
        "Embedding RAG Agents",
        "Text-Embed-3-Large",
        (54.0, 44.0, 50.3, 70.0, 54.6, 72.4, 16.2, 44.3, 18.2, 56.3, 37.3, 28.0, 4.0, 16.0, 38.0),
    ),
    (
        "Embedding RAG Agents",
        "Qwen3-Embedding-4B",
        (57.0, 47.0, 43.3, 71.4, 54.7, 78.0, 12.2, 45.1, 14.8, 59.2, 37.0, 29.0, 3.0, 16.0, 38.2),
    ),
    (
        "Structure-Augmented RAG Agents",
        "RAPTOR",
        (29.0, 38.0, 34.3, 45.8, 36.8, 59.4, 12.3, 35.9, 13.4, 42.3, 27.9, 14.0, 1.0, 7.5, 27.0),
    ),
    (
        "Structure-Augmented RAG Agents",
        "GraphRAG",
        (47.0, 47.0, 35.0, 34.4, 40.9, 39.8, 9.8, 24.8, 0.4, 39.4, 19.9, 14.0, 2.0, 8.0, 23.4),
    ),
    (
        "Structure-Augmented RAG Agents",
        "MemoRAG",
        (29.0, 33.0, 20.0, 56.0, 34.5, 77.0, 13.1, 45.1, 9.2, 50.7, 30.0, 21.0, 7.0, 14.0, 30.9),
    ),
    (
        "Structure-Augmented RAG Agents",
        "HippoRAG-v2",
        (76.0, 66.0, 50.7, 67.6, 65.1, 61.4, 10.2, 35.8, 14.6, 57.7, 36.2, 54.0, 5.0, 29.5, 41.6),
    ),
    (
        "Structure-Augmented RAG Agents",
        "Mem0",
        (25.0, 32.0, 36.0, 37.5, 32.6, 32.4, 10.0, 21.2, 4.8, 36.6, 20.7, 18.0, 2.0, 10.0, 21.1),
    ),
    (
        "Structure-Augmented RAG Agents",
        "Cognee",
        (31.0, 26.0, 29.3, 26.8, 28.3, 35.4, 10.1, 22.8, 2.3, 29.6, 16.0, 28.0, 3.0, 15.5, 20.6),
    ),
    (
        "Structure-Augmented RAG Agents",
        "Zep",
        (44.0, 25.0, 38.3, 42.5, 37.5, 62.8, 12.1, 37.5, 4.2, 28.2, 16.2, 7.0, 3.0, 5.0, 24.0),
    ),
    (
        "Agentic Memory Agents",
        "Self-RAG",
        (35.0, 42.0, 25.7, 31.8, 33.6, 11.6, 12.8, 12.2, 0.9, 35.2, 18.1, 19.0, 3.0, 11.0, 18.7),
    ),
    (
        "Agentic Memory Agents",
        "MemGPT",
        (41.0, 38.0, 32.0, 26.2, 34.3, 67.6, 14.0, 40.8, 2.5, 42.3, 22.4, 28.0, 3.0, 15.5, 28.3),
    ),
    (
        "Agentic Memory Agents",
        "MIRIX",
        (62.0, 61.0, 37.3, 29.8, 47.5, 38.4, 9.8, 24.1, 9.9, 40.8, 25.4, 14.0, 2.0, 8.0, 26.2),
    ),
    (
        "Agentic Memory Agents",
        "MIRIX (4.1-mini)",
        (73.0, 75.0, 51.0, 53.0, 63.0, 61.0, 10.3, 35.7, 18.9, 62.0, 40.5, 20.0, 3.0, 11.5, 37.7),
    ),
)


def published_markdown() -> str:
    """The paper's rows as a Markdown table, its columns named with the run's columns they correspond to."""
    head = [f"{paper} ({ours})" for paper, ours in COLUMNS]
    lines = [
        f"The paper's own rows ({CITATION}; its agents and backbones, not memloop's: compare the protocol's "
        "shape, not the numbers, unless the run used the same model):",
        "",
        "| group | agent | " + " | ".join(head) + " |",
        "|---|---|" + "---|" * len(head),
    ]
    lines += [
        f"| {group} | {agent} | " + " | ".join(f"{v:.1f}" for v in values) + " |" for group, agent, values in ROWS
    ]
    return "\n".join(lines)
