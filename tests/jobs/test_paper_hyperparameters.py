"""The shipped configs carry the papers' hyperparameters (seed 000 section 4 and seed 002 section 4)."""

from __future__ import annotations

from pathlib import Path

import memloop.jobs.results.paper_tables  # noqa: F401  (registers the papers' table ids the paper configs name)
from memloop.jobs.run.config import load_config

CONFIGS = Path(__file__).resolve().parents[2] / "jobs" / "configs"


def test_seed_002_chunks_are_8k_tokens_on_repoqa_and_spider() -> None:
    for name in ("code.yaml", "tables.yaml"):
        cfg = load_config(CONFIGS / name)
        assert [d.options.get("chunk_tokens") for d in cfg.datasets] == [8192], name
        assert cfg.sampling.temperature == 0.8 and cfg.sampling.top_k == 40, name


def test_seed_000_samples_methods_and_judges_at_temperature_0_8() -> None:
    cfg = load_config(CONFIGS / "sumie.yaml")
    assert cfg.sampling.temperature == 0.8
    judges = {j.name: j.options for j in cfg.judges}
    assert judges["sumie"] == {"temperature": 0.8}


def test_seed_002_figure_5_sweeps_chunk_size_on_repoqa_with_amendments_without_updates() -> None:
    cfg = load_config(CONFIGS / "papers" / "seed002-fig5.yaml")
    assert {d.task for d in cfg.datasets} == {"repoqa"}
    assert sorted(d.options["chunk_tokens"] for d in cfg.datasets) == [
        512,
        1024,
        2048,
        4096,
        8192,
    ]  # "five different chunk sizes"
    assert [(m.name, m.options) for m in cfg.methods] == [("prism-amendments", {"updates": False, "max_attempts": 1})]


def test_seed_002_figure_5_8k_point_is_table_2s_run_and_hierarchical_merging_packs_the_papers_window() -> None:
    """Figure 5's 8k point is table 2's amendments-without-updates RepoQA run, so both decode up to the same
    max_tokens; hierarchical merging packs its merge prompts for the paper's 32k window, less the output,
    so a merge fits the configured 32k model."""
    from memloop.eval.methods import get_method
    from memloop.jobs.run.methods import method_settings

    fig5, table2 = (load_config(CONFIGS / "papers" / n) for n in ("seed002-fig5.yaml", "seed002-table2.yaml"))
    assert fig5.sampling == table2.sampling and table2.sampling.max_tokens == 8192
    [hier] = [m for m in table2.methods if m.name == "hier-merge"]
    method = get_method("hier-merge", **method_settings(table2, hier, table2.seed))
    settings = method.settings
    # a merge decodes at most its level's limit (the official max_summary_len at the top)
    cap = int(method.procedure("book").output_cap.split()[0])
    assert cap == settings.max_summary_tokens == 900 and settings.context_window + 1024 == 32 * 1024


def test_seed_004_table_1_config() -> None:
    """F-ART table 1: arXiv validation split, n = 10, 15-sentence chunks, the three prompts, ROUGE."""
    cfg = load_config(CONFIGS / "papers" / "seed004-table1.yaml")
    (ds,) = cfg.datasets
    assert ds.task == "arxiv" and ds.limit == 10
    assert {k: ds.options[k] for k in ("split", "chunk_sentences")} == {"split": "validation", "chunk_sentences": 15}
    assert ds.options["config_name"] == "section"  # the hub layout that keeps one sentence per line
    assert [m.name for m in cfg.methods] == ["fart-base", "fart-compressed", "fart-rolling"]
    assert [j.name for j in cfg.judges] == ["rouge"]


def test_seed_003_summarisers_decode_at_the_official_temperature() -> None:
    """BooookScore's official summarisation code samples at temperature 0.5 (issue 30 point 13)."""
    cfg = load_config(CONFIGS / "papers" / "seed003-hier-inc.yaml")
    assert cfg.sampling.temperature == 0.5
    assert [m.name for m in cfg.methods] == ["hier-merge", "inc-update"]


def test_seed_001_rows_summarise_with_chain_of_density() -> None:
    cfg = load_config(CONFIGS / "papers" / "seed001-table1.yaml")
    assert [(m.name, m.options) for m in cfg.methods] == [
        ("no-kg", {"density_rounds": 4}),
        ("kg-retrieval", {"density_rounds": 4, "extraction_model": "judge"}),
    ]


def test_memoryagentbench_takes_the_benchmarks_context_counts() -> None:
    """No cut in the paper config: each source's contexts as the benchmark's max_test_samples take them
    (DetectiveQA 10, ∞Bench-Sum 100), with the paper's chunk sizes (section 4.1)."""
    cfg = load_config(CONFIGS / "papers" / "memoryagentbench.yaml")
    assert all(d.options.get("contexts_per_source") is None for d in cfg.datasets)
    from memloop.eval.datasets.mab_sources import MAX_TEST_SAMPLES

    assert MAX_TEST_SAMPLES["detective_qa"] == 10 and MAX_TEST_SAMPLES["infbench_sum_eng_shots2"] == 100
    assert sorted(d.options["chunk_tokens"] for d in cfg.datasets) == [512, 4096]


def test_memoryagentbench_runs_the_recommendation_source_so_ttl_is_the_papers() -> None:
    """Table 2's TTL is mean(MCC, Recom.): the config runs ReDial beside the ICL sets, at 4096-token chunks."""
    cfg = load_config(CONFIGS / "papers" / "memoryagentbench.yaml")
    by_chunk = {d.options["chunk_tokens"]: d.options["sources"] for d in cfg.datasets}
    assert "recsys_redial_full" in by_chunk[4096] and "icl_*" in by_chunk[4096]
