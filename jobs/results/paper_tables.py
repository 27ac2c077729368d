"""The papers' tables, laid out with their own rows and columns, the paper's numbers beside memloop's.

A run config names the tables it reproduces (`paper_tables: [seed002-table2, ...]`); `memloop report`
then prints each one from the run's headline figures (`memloop.jobs.results.report.headline`: the same means,
standard errors and judged / total counts as every other table, computed by `memloop.eval.judges`). This
module holds only layouts and the numbers the papers print, as printed: no formula lives here.

A memloop cell reads "mean ± s.e. [95% interval]" (in the paper's unit: percentages where the paper
prints them; the s.e. over repeats where there are several, the interval a bootstrap over samples)
and, where not every unit was judged, the counts: "(k / n judged; j failed = 0; m n/a; incomplete
...)" by the rule for means (`memloop.eval.judges.aggregation`), so a failure is never hidden; "n/a" where
the method does not apply (the long-context ceiling on an input longer than the context);
"failed (k / n)" where every unit of the method failed; "not measured" where memloop has no such
metric (BERTScore); "–" where the run has no figure. Where the paper states a comparison (JSON vs
text, CoK vs GU, ...) the table declares it (`Difference`) and prints the paired difference on the
common samples with its interval, by the same function as `memloop compare`.
A cell whose method's steps did not succeed in more than `memloop.jobs.results.health.UNSUCCESSFUL_STEP_SHARE` of
cases carries the marker "⚠ k% steps not ok" (the figure's `steps_not_ok`, from the method-health table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from memloop.jobs.results.cells import cell_text, counts_text
from memloop.jobs.results.health import marker
from memloop.jobs.run.config import register_paper_tables


@dataclass(frozen=True)
class Column:
    """One memloop figure per row: judge ("" for the cost figures), metric ("{turn}" is the row's
    turn), the task whose datasets it reads (None: any), and the factor to the paper's unit."""

    label: str
    judge: str | None  # None: memloop does not measure this column (the paper's number stands alone)
    metric: str = ""
    task: str | None = None
    scale: float = 1.0
    digits: int = 1


@dataclass(frozen=True)
class Row:
    """A row of the paper: which method (MethodSpec key, or per task) and which turn or dataset it
    reads, and the paper's numbers as printed, by column label ("" or absent where it prints none)."""

    label: str
    method: str | Mapping[str, str]
    paper: Mapping[str, str] = field(default_factory=dict)
    turn: str | None = None
    dataset: str | None = None  # a dataset key suffix (e.g. "@512" for a chunk-size sweep)

    def method_for(self, task: str | None) -> str | None:
        if isinstance(self.method, str):
            return self.method
        return self.method.get(task or "")


@dataclass(frozen=True)
class Difference:
    """A comparison the paper states: `b` − `a` (methods as in `Row`), at `turn` for per-turn columns."""

    label: str
    a: str | Mapping[str, str]
    b: str | Mapping[str, str]
    turn: str | None = None

    def methods_for(self, task: str | None) -> tuple[str | None, str | None]:
        pick = lambda m: m if isinstance(m, str) else m.get(task or "")
        return pick(self.a), pick(self.b)


@dataclass(frozen=True)
class PaperTable:
    id: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    paper_label: str = "paper"  # whose numbers the paper columns hold, e.g. "paper (Ultra / Pro)"
    note: str = ""
    differences: tuple[Difference, ...] = ()
    paper_judge: str = ""  # the model that judged the paper's numbers ("" where no LLM judged them)


def _cols(labels_metrics: list[tuple[str, str]], **kw: Any) -> tuple[Column, ...]:
    return tuple(Column(label, metric=metric, **kw) for label, metric in labels_metrics)


_PRF_TURN = [("P", "precision:{turn}"), ("R", "recall:{turn}"), ("F1", "f1:{turn}")]


def _sumie_rows() -> tuple[Row, ...]:
    # seed 000 table 1, "Ultra / Pro" per cell
    printed = {
        ("GO text", "go-text", "last"): ("86.2 / 85.8", "42.7 / 40.4", "56.4 / 54.1"),
        ("GO json", "go-json", "last"): ("91.2 / 85.1", "58.9 / 61.0", "70.9 / 70.1"),
        ("GU text", "gu-text", "start"): ("77.3 / 74.7", "70.0 / 66.9", "72.6 / 69.7"),
        ("GU text", "gu-text", "last"): ("76.6 / 73.3", "45.2 / 26.8", "55.8 / 38.4"),
        ("GU text", "gu-text", "avg"): ("76.1 / 73.0", "54.3 / 41.8", "62.2 / 51.2"),
        ("GU json", "gu-json", "start"): ("88.6 / 85.1", "81.6 / 80.7", "84.3 / 82.2"),
        ("GU json", "gu-json", "last"): ("80.2 / 81.7", "76.7 / 69.4", "78.1 / 74.7"),
        ("GU json", "gu-json", "avg"): ("80.9 / 83.4", "78.9 / 74.0", "79.4 / 77.9"),
        ("GM json", "gm-json", "start"): ("88.6 / 84.2", "82.9 / 82.6", "85.0 / 82.6"),
        ("GM json", "gm-json", "last"): ("86.8 / 84.6", "63.2 / 74.3", "72.7 / 78.6"),
        ("GM json", "gm-json", "avg"): ("86.5 / 84.7", "70.9 / 78.7", "77.3 / 80.9"),
        ("CoK json", "cok", "start"): ("89.1 / 81.1", "77.8 / 80.5", "82.8 / 79.9"),
        ("CoK json", "cok", "last"): ("92.6 / 84.6", "78.0 / 83.6", "84.5 / 83.9"),
        ("CoK json", "cok", "avg"): ("91.8 / 83.7", "80.5 / 83.9", "85.5 / 83.5"),
    }
    return tuple(
        Row(f"{label} {turn}", method, dict(zip(("P", "R", "F1"), vals)), turn=turn)
        for (label, method, turn), vals in printed.items()
    )


_FIG3_METHODS = (("GU text", "gu-text"), ("GU json", "gu-json"), ("GM json", "gm-json"), ("CoK json", "cok"))
_TABLE2_METHODS = (
    ("Long context", "long-context"),
    ("Incremental", "inc-update"),
    ("Hierarchical", "hier-merge"),
    ("PRISM in-place", "prism-inplace"),
    ("+ w/o updates", "prism-inplace-no-updates"),
    ("PRISM amendments", "prism-amendments"),
    ("+ w/o updates", "prism-amendments-no-updates"),
)
# Seed 002's cost columns in its definitions and one token base (`memloop.jobs.results.cost_tables.cost_frame`), then
# the
# engine's own figures as served, labelled as the engine's (the paper prints none of those)
_COST_COLS = [
    ("cache hit (%)", "prefix_hit_paper", 1.0, 0),
    ("tokens (x10^3)", "encoded", 1e-3, 0),
    ("net (x10^3)", "net_encoded", 1e-3, 0),
    ("output (x10^3)", "decoded", 1e-3, 1),
    ("cost index", "cost_index", 1.0, 2),
]
_ENGINE_COST_COLS = [
    ("engine: radix cache hit (%)", "radix_cache_hit", 1.0, 0),
    ("engine: prompt tokens (x10^3)", "engine_encoded", 1e-3, 0),
    ("engine: net (x10^3)", "engine_net_encoded", 1e-3, 0),
    ("engine: cost index", "engine_cost_index", 1.0, 2),
]
_COST_NOTE = (
    "cache hit, tokens, net, output and cost index are the paper's (section 4.2, table 3): the recorded "
    "prompts and outputs of every attempt (a retried step's prompt once per attempt, its rejected outputs' "
    "decoded tokens), in the run model's tokenizer; each prompt reuses only its longest "
    "prefix shared with the previous prompt of the same sample, net = tokens - reused (hit = 1 - net / "
    "tokens), cost index = (net + 3 x output) / 10^6. The engine: columns are what memloop's engine "
    "served (chat template and retried attempts counted; its radix cache reuses prefixes across samples "
    "and repeats), which the paper does not print. Means per sample over the samples every method "
    "finished."
)


def _cost_columns(task: str, cost_digits: int = 2, output_digits: int = 1) -> tuple[Column, ...]:
    digits = {"cost_index": cost_digits, "engine_cost_index": cost_digits, "decoded": output_digits}
    return tuple(
        Column(label, "", metric, task=task, scale=scale, digits=digits.get(metric, d))
        for label, metric, scale, d in _COST_COLS + _ENGINE_COST_COLS
    )


def _cost_table(
    tid: str,
    title: str,
    task: str,
    printed: Mapping[str, tuple[str, ...]],
    note: str = _COST_NOTE,
    cost_digits: int = 2,
) -> "PaperTable":
    """A table-3-shaped table: seed 002's rows that the paper prints for `task`, the cost columns, the cost
    index to the paper's precision for the table (`cost_digits`)."""
    labels = [c[0] for c in _COST_COLS]
    rows = tuple(
        Row(label, method, dict(zip(labels, printed[method]))) for label, method in _TABLE2_METHODS if method in printed
    )
    return PaperTable(tid, title, _cost_columns(task, cost_digits), rows, "paper", note)


# seed 002 table 2: each task's score, then its "Ch. Tokens" (the input one step reads, x10^3)
_TABLE2_COLS = tuple(
    c
    for label, judge, metric, task, digits in (
        ("BooookScore", "booookscore", "booookscore", "book", 3),
        ("RepoQA acc.", "repoqa-exact", "accuracy", "repoqa", 2),
        ("LOFT-Spider acc.", "loft-exec", "accuracy", "spider", 2),
    )
    for c in (
        Column(label, judge, metric, task=task, digits=digits),
        Column(f"{label.split()[0]} ch. tokens (x10^3)", "", "context_tokens", task=task, scale=1e-3),
    )
)


TABLES: dict[str, PaperTable] = {
    t.id: t
    for t in (
        PaperTable(
            "seed000-table1",
            "Seed 000, table 1: SUMIE P / R / F1 at the first turn, the last turn and averaged",
            _cols(_PRF_TURN, judge="sumie", task="sumie", scale=100.0),
            _sumie_rows(),
            "paper (Ultra / Pro)",
            "GO has no start or average (one summary at the end). memloop's P / R / F1 are the means over "
            "entities of the judge's per-turn values. The paper's SUMIE evaluator is Gemini-Pro (temperature "
            "0.8) for both the Ultra and the Pro columns.",
            (
                Difference("GO json − GO text", "go-text", "go-json", "last"),
                Difference("GU json − GU text", "gu-text", "gu-json", "avg"),
                Difference("CoK json − GU json", "gu-json", "cok", "avg"),
            ),
            "Gemini-Pro (seed 000 appendix: SUMIE evaluator, temperature 0.8)",
        ),
        PaperTable(
            "seed000-table2",
            "Seed 000, table 2: BooookScore with the memory limited to K = 1000 tokens",
            (Column("BooookScore", "booookscore", "booookscore", task="book", scale=100.0),),
            tuple(
                Row(label, f"{method}-k1000", {"BooookScore": score})
                for (label, method), score in zip(
                    _FIG3_METHODS, ("53.1 / 51.9", "58.5 / 61.7", "61.5 / 60.1", "62.2 / 63.1")
                )
            ),
            "paper (Pro / Ultra)",
            "",
            (
                Difference("GU json − GU text", "gu-text-k1000", "gu-json-k1000"),
                Difference("CoK json − GU json", "gu-json-k1000", "cok-k1000"),
            ),
            "Gemini-Ultra (seed 000 appendix: BooookScore evaluator, temperature 0.8)",
        ),
        PaperTable(
            "seed000-fig3",
            "Seed 000, figure 3 and appendix A: SUMIE F1 averaged over turns, and memory tokens, "
            "with the memory limited to K tokens",
            (
                Column("F1 avg", "sumie", "f1:avg", task="sumie", scale=100.0),
                Column("memory tokens per turn", "", "memory_tokens", task="sumie", digits=0),
                Column("turns where K bound (%)", "", "k_bound", task="sumie", scale=100.0, digits=0),
            ),
            tuple(
                Row(f"{label}, K={k}", f"{method}-k{k}", {"memory tokens per turn": f"< {bound}"})
                for k, bound in ((200, 130), (300, 180))
                for label, method in _FIG3_METHODS
            ),
            "paper (appendix A)",
            "Figure 3 plots F1 without printing numbers; appendix A states the memory stays under 130 tokens at "
            "K = 200 and under 180 at K = 300 for every method. memory tokens: the existing information each turn's "
            "prompt receives (the memory carried out of the turn before, after compression), in the run's token "
            "count (`count_tokens`), averaged over turns and then over samples. turns where K bound: the share of "
            "turns whose memory exceeded K and was compressed or trimmed; at 0 the limited-memory condition "
            "never occurred and the F1 is that of an unlimited memory.",
        ),
        PaperTable(
            "seed001-table1",
            "Seed 001, table 1: summaries with and without knowledge-graph retrieval",
            (
                Column("ROUGE-1", "rouge", "rouge1", scale=100.0, digits=2),
                Column("ROUGE-2", "rouge", "rouge2", scale=100.0, digits=2),
                Column("ROUGE-L", "rouge", "rougeL", scale=100.0, digits=2),
                Column("BERTScore F1", None),
                Column("P_KG", "kgscore", "precision", scale=100.0, digits=2),
                Column("R_KG", "kgscore", "recall", scale=100.0, digits=2),
                Column("F_KG", "kgscore", "f1", scale=100.0, digits=2),
            ),
            (
                Row(
                    "No-KG",
                    "no-kg",
                    {
                        "ROUGE-1": "28.80 / 25.06",
                        "ROUGE-2": "5.48 / 3.76",
                        "ROUGE-L": "13.96 / 14.03",
                        "BERTScore F1": "53.82 / 56.28",
                        "P_KG": "22.54 / 23.26",
                        "R_KG": "15.69 / 18.67",
                        "F_KG": "17.73 / 20.00",
                    },
                ),
                Row(
                    "KG",
                    "kg-retrieval",
                    {
                        "ROUGE-1": "30.07 / 24.14",
                        "ROUGE-2": "5.91 / 3.60",
                        "ROUGE-L": "14.51 / 13.76",
                        "BERTScore F1": "54.58 / 55.96",
                        "P_KG": "23.07 / 25.57",
                        "R_KG": "16.59 / 20.17",
                        "F_KG": "18.34 / 21.75",
                    },
                ),
            ),
            "paper (LongT5 / GPT-4)",
            "100 BookSum test chapters drawn at random (the config's seed), each summarised with the book's "
            "chapters up to it and scored against its own reference. memloop does not compute BERTScore.",
            (Difference("KG − No-KG", "no-kg", "kg-retrieval"),),
            "Mixtral 8x7B (seed 001 section 3.5: KGScore edge extraction)",
        ),
        PaperTable(
            "seed002-table2",
            "Seed 002, table 2: task performance (BooookScore, RepoQA accuracy, LOFT-Spider accuracy) "
            "and the tokens one step reads",
            _TABLE2_COLS,
            tuple(
                Row(label, method, dict(zip([c.label for c in _TABLE2_COLS], printed)))
                for (label, method), printed in zip(
                    _TABLE2_METHODS,
                    (
                        (".67 ± .004", "100k", ".92", "121k", ".44 ± .01", "30k"),
                        (".63 ± .010", "–", ".24 ± .03", "–", ".12 ± .02", "–"),
                        (".51 ± .006", "–", "n/a", "–", "n/a", "–"),
                        (".63 ± .008", "2k", ".42 ± .02", "8k", ".22 ± .03", "8k"),
                        (".63 ± .006", "", ".50 ± .03", "", ".26 ± .02", ""),
                        (".65 ± .004", "2k", ".48 ± .03", "8k", ".14 ± .01", "8k"),
                        (".63 ± .005", "", ".53 ± .02", "", ".22 ± .02", ""),
                    ),
                )
            ),
            "paper",
            "Chunks: 2k tokens on books, 8k on RepoQA and Spider (the paper's); the long-context row is n/a "
            "where the whole input does not fit the model's context. ch. tokens: what one step reads, per sample: "
            "the whole input for the long-context row (cl100k), the dataset's chunk size otherwise (the run "
            'model\'s tokenizer); the paper prints "–" for its baselines and one figure per PRISM pair.',
            (
                Difference("amendments − in-place", "prism-inplace", "prism-amendments"),
                Difference("hierarchical − incremental", "inc-update", "hier-merge"),
            ),
            "not named in the paper (BooookScore's LLM judge; the methods ran on Gemini 1.5 Pro)",
        ),
        _cost_table(
            "seed002-table3",
            "Seed 002, table 3: cache hit, tokens and cost index per sample (BooookScore)",
            "book",
            {
                "long-context": ("–", "100", "100", "1", "–"),
                "inc-update": ("0", "249", "248", "141", "0.67"),
                "hier-merge": ("1", "227", "225", "70", "0.43"),
                "prism-inplace": ("49", "495", "250", "131", "0.64"),
                "prism-inplace-no-updates": ("34", "619", "409", "14", "0.45"),
                "prism-amendments": ("69", "559", "171", "47", "0.31"),
                "prism-amendments-no-updates": ("37", "676", "424", "15", "0.47"),
            },
        ),
        _cost_table(
            "seed002-table3-repoqa",
            "Seed 002, table 3 (RepoQA part): cache hit, tokens and cost index per sample",
            "repoqa",
            {
                "long-context": ("–", "121", "121", "0", "–"),
                "inc-update": ("1", "180", "178", "28", "0.26"),
                "prism-inplace": ("71", "491", "142", "9", "0.17"),
                "prism-inplace-no-updates": ("68", "437", "139", "6", "0.16"),
                "prism-amendments": ("75", "581", "144", "11", "0.18"),
                "prism-amendments-no-updates": ("68", "435", "138", "6", "0.15"),
            },
        ),
        _cost_table(
            "seed002-table5",
            "Seed 002, table 5 (appendix D): cache hit, tokens and cost index per sample (LOFT-Spider)",
            "spider",
            {
                "long-context": ("0", "30", "30", "0.4", ""),
                "inc-update": ("0", "31", "31", "1.5", "0.035"),
                "prism-inplace": ("41", "56", "33", "0.7", "0.035"),
                "prism-inplace-no-updates": ("39", "54", "33", "0.4", "0.030"),
                "prism-amendments": ("39", "54", "33", "0.6", "0.035"),
                "prism-amendments-no-updates": ("40", "54", "33", "0.4", "0.034"),
            },
            cost_digits=3,
        ),
        PaperTable(
            "seed002-table4",
            "Seed 002, table 4: hand-made against LLM-generated schemas, and their memory tokens",
            (
                Column("BooookScore", "booookscore", "booookscore", task="book", digits=3),
                Column("RepoQA acc.", "repoqa-exact", "accuracy", task="repoqa", digits=2),
                Column("LOFT-Spider acc.", "loft-exec", "accuracy", task="spider", digits=2),
                Column("BooookScore memory tokens", "", "memory_tokens", task="book", digits=0),
                Column("RepoQA memory tokens", "", "memory_tokens", task="repoqa", digits=0),
                Column("LOFT-Spider memory tokens", "", "memory_tokens", task="spider", digits=0),
            ),
            (
                Row(
                    "Manual",
                    {"book": "manual-book", "repoqa": "manual-repoqa", "spider": "manual-spider"},
                    {"BooookScore": ".65 ± .004", "RepoQA acc.": ".53 ± .02", "LOFT-Spider acc.": ".26 ± .02"},
                ),
                Row(
                    "Generated",
                    {"book": "generated-book", "repoqa": "generated-repoqa", "spider": "generated-spider"},
                    {"BooookScore": ".61 ± .010", "RepoQA acc.": ".53 ± .02", "LOFT-Spider acc.": ".15 ± .03"},
                ),
            ),
            "paper",
            "Each task's manual row is its best hand-made variant of table 2 (amendments on books, amendments "
            "without updates on RepoQA, in-place without updates on Spider); the generated row is the same "
            "variant with the schema the LLM wrote from the task's example query. memory tokens: the memory text "
            "each step's prompt carries (indented in-place JSON, or the base plus amendment lines) in the run "
            "model's tokenizer, averaged over steps and samples, per task; the paper states "
            "one figure per row in its caption (manual 760 tokens, generated 790), not per task.",
            (
                Difference(
                    "Generated − Manual",
                    {"book": "manual-book", "repoqa": "manual-repoqa", "spider": "manual-spider"},
                    {"book": "generated-book", "repoqa": "generated-repoqa", "spider": "generated-spider"},
                ),
            ),
            "not named in the paper (BooookScore's LLM judge; the methods ran on Gemini 1.5 Pro)",
        ),
        PaperTable(
            "seed002-fig5",
            "Seed 002, figure 5: RepoQA at five chunk sizes, amendments without updates",
            (Column("acc.", "repoqa-exact", "accuracy", task="repoqa", digits=2),) + _cost_columns("repoqa", 3),
            tuple(
                Row(f"{size} tokens", "prism-amendments", dataset=f"@{size}") for size in (512, 1024, 2048, 4096, 8192)
            ),
            "paper",
            "The figure plots these without printing numbers; its finding is a near-constant cost index over "
            "chunk sizes with accuracy slightly lower at small chunks (cost_vs_chunk.png plots memloop's).",
        ),
        PaperTable(
            "seed003-hier-inc",
            "Seed 003: hierarchical merging against incremental updating (BooookScore, 2048-token chunks)",
            (Column("BooookScore", "booookscore", "booookscore", task="book", scale=100.0),),
            (
                Row("Hierarchical merging", "hier-merge", {"BooookScore": "89.4 / 91.4 / 84.8"}),
                Row("Incremental updating", "inc-update", {"BooookScore": "82.9 / 79.0 / 68.9"}),
            ),
            "release (GPT-4 / Claude 2 / ChatGPT)",
            "The seed text prints no table; the release column is the official BooookScore release's GPT-4 "
            "judgments of its own 2048-token summaries, replayed by `memloop.eval.judges.booookscore_replay` over its "
            "100 books (tests/judges recompute it from the release files).",
            (Difference("Hierarchical − Incremental", "inc-update", "hier-merge"),),
            "GPT-4 (the BooookScore release)",
        ),
        PaperTable(
            "seed004-table1",
            "Seed 004, table 1: F-ART's three prompts on arXiv (ROUGE F-measures)",
            _cols(
                [("ROUGE-1", "rouge1"), ("ROUGE-2", "rouge2"), ("ROUGE-L", "rougeL"), ("ROUGE-Lsum", "rougeLsum")],
                judge="rouge",
                task="arxiv",
                scale=100.0,
            ),
            tuple(
                Row(label, method, dict(zip(("ROUGE-1", "ROUGE-2", "ROUGE-L", "ROUGE-Lsum"), printed)))
                for label, method, printed in (
                    ("Base", "fart-base", ("11.7", "4.0", "6.1", "8.2")),
                    ("Compressed intermediates", "fart-compressed", ("29.4", "9.7", "15.1", "23.1")),
                    ("Rolling summary", "fart-rolling", ("34.2", "8.8", "18.7", "27.3")),
                )
            ),
            "paper",
        ),
    )
}
# MemoryAgentBench (Hu, Wang, McAuley, ICLR 2026), inject once, ask many: every context's replies scored by
# the `mab-llm` judge (or `mab`, without the LLM-judged sources); the per-competency and per-source
# breakdown, and the paper's own rows (its agents, not memloop's methods) beside them, are the report's
# own section (jobs/results/mab_table.py, jobs/results/mab_published.py).
_MAB_METHODS = (
    ("Long context", "long-context"),
    ("PRISM in-place", "prism-inplace"),
    ("PRISM amendments", "prism-amendments"),
    ("Incremental", "inc-update"),
    ("GU json (no answer step)", "gu-json"),
    ("CoK (no answer step)", "cok"),
)
TABLES["memoryagentbench"] = PaperTable(
    "memoryagentbench",
    "MemoryAgentBench: the table metric over every question, and the cost of asking many",
    (
        Column("accuracy (%)", "mab-llm", "accuracy", task="memoryagentbench", scale=100.0),
        *_cost_columns("memoryagentbench"),
    ),
    tuple(Row(label, method) for label, method in _MAB_METHODS),
    "paper",
    "accuracy: each context's mean of its source's table metric over its questions (judge `mab-llm`; a run "
    "judged by `mab` alone has its figures in the section below), then the mean over contexts; "
    "the competencies and sources are in the section 'MemoryAgentBench: per competency and source'. " + _COST_NOTE,
)
register_paper_tables(TABLES)


# ---------------------------------------------------------------------------------------------
# laying a table out from a run's headline figures


def _task(dataset_key: str) -> str:
    return dataset_key.split(":", 1)[0]


def _find(
    figures: list[dict], *, method: str, judge: str, metric: str, task: str | None, dataset: str | None
) -> dict | None:
    hits = [
        f
        for f in figures
        if f["method"] == method
        and f["judge"] == judge
        and f["metric"] == metric
        and (task is None or _task(f["dataset"]) == task)
        and (dataset is None or f["dataset"].endswith(dataset))
    ]
    return sorted(hits, key=lambda f: f["dataset"])[0] if hits else None


def cell(
    table: PaperTable, row: Row, col: Column, figures: list[dict], status: Mapping[tuple[str, str], Mapping[str, int]]
) -> dict[str, Any]:
    """memloop's figure for (row, column) in the paper's unit, with its interval, counts and display string."""
    if col.judge is None:
        return {"text": "not measured", "mean": None}
    method = row.method_for(col.task)
    if method is None:
        return {"text": "", "mean": None}
    fig = _find(
        figures,
        method=method,
        judge=col.judge,
        metric=col.metric.format(turn=row.turn),
        task=col.task,
        dataset=row.dataset,
    )
    counts = cell_status(status, method, col.task, row.dataset)
    if not counts.get("ok", 0) and counts.get("not_run", 0) and counts.get("not_run") == counts.get("failed"):
        # the method never started (e.g. its generated schema never parsed): a cause, not a score of 0
        return {
            "text": f"failed ({counts['failed']} / {_units(counts)}): not run, {counts.get('cause', '?')}",
            "mean": None,
        }
    if fig is None or fig.get("mean") is None:
        if not counts.get("ok", 0) and counts.get("n/a", 0):
            return {"text": "n/a", "mean": None}
        if not counts.get("ok", 0) and counts.get("failed", 0):
            return {"text": f"failed ({counts['failed']} / {_units(counts)})", "mean": None}
        return {"text": "–", "mean": None, "incomplete": bool(fig and fig.get("incomplete"))}
    scaled = {k: (fig[k] * col.scale if fig.get(k) is not None else None) for k in ("mean", "se", "lo", "hi")}
    done = fig.get("judged", fig.get("samples"))
    total = fig.get("total")
    text = cell_text(fig, col.digits, col.scale, counts=False)
    if done is not None and total is not None and done < total:
        text += f" ({done} / {total})"
    extra = counts_text({k: v for k, v in fig.items() if k not in ("judged", "total", "n/a")})
    if extra:
        text = text[:-1] + "; " + extra[2:] if text.endswith(")") else text + extra
    skipped = counts.get("n/a", 0)
    if skipped:  # a mean over the samples the method applies to only: its own sample set, said in the cell
        text += f" (own samples: {skipped} n/a)"
    share = fig.get("steps_not_ok")
    text += marker(share)
    return {
        "text": text,
        **scaled,
        "n": done,
        "total": total,
        "incomplete": bool(fig.get("incomplete")),
        "steps_not_ok": share,
    }


Paired = Callable[[str, str, Column, "str | None", "str | None"], "dict[str, Any] | None"]


def difference(table: PaperTable, diff: Difference, col: Column, paired: Paired | None) -> dict[str, Any]:
    """The paired difference b − a of a stated comparison in one column, in the paper's unit."""
    if col.judge in (None, "") or paired is None:
        return {"text": "", "delta": None}
    a, b = diff.methods_for(col.task)
    if a is None or b is None:
        return {"text": "", "delta": None}
    metric = col.metric.format(turn=diff.turn)
    got = paired(a, b, Column(col.label, col.judge, metric, col.task, col.scale, col.digits), diff.turn, None)
    if not got or got.get("delta") is None:
        return {"text": "–", "delta": None}
    sc = {k: got[k] * col.scale if got.get(k) is not None else None for k in ("delta", "lo", "hi")}
    dg = col.digits
    text = f"{sc['delta']:+.{dg}f}" + (f" [{sc['lo']:+.{dg}f}, {sc['hi']:+.{dg}f}]" if sc["lo"] is not None else "")
    return {"text": text + f" (n = {got['n']})", **sc, "n": got["n"]}


def layout(
    table: PaperTable,
    figures: list[dict],
    status: Mapping[tuple[str, str], Mapping[str, int]],
    paired: Paired | None = None,
    models: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The table as data: per row, per column, memloop's cell and the paper's number; the paired
    differences the paper states (`paired(a, b, column, turn, dataset)` computes one, as `memloop
    compare` does); and who judged: the model under test, memloop's judge, the paper's judge."""
    rows = []
    for row in table.rows:
        cells = {}
        for col in table.columns:
            c = cell(table, row, col, figures, status)
            cells[col.label] = dict(
                memloop=c["mean"],
                se=c.get("se"),
                lo=c.get("lo"),
                hi=c.get("hi"),
                n=c.get("n"),
                total=c.get("total"),
                incomplete=c.get("incomplete", False),
                text=c["text"],
                paper=row.paper.get(col.label, "") or None,
                steps_not_ok=c.get("steps_not_ok"),
            )
        rows.append({"label": row.label, "cells": cells})
    diffs = [
        {"label": d.label, "cells": {col.label: difference(table, d, col, paired) for col in table.columns}}
        for d in table.differences
    ]
    return {
        "id": table.id,
        "title": table.title,
        "paper_label": table.paper_label,
        "note": judged_note(table, models),
        "rows": rows,
        "differences": diffs,
        "incomplete": any(c["incomplete"] for r in rows for c in r["cells"].values()),
    }


def judged_note(table: PaperTable, models: Mapping[str, Any] | None) -> str:
    """The table's note, then who judged whom: the model under test, memloop's judge (saying so when
    the model judged itself), and the paper's judge."""
    parts = [table.note] if table.note else []
    if models:
        judge = models.get("judge") or "?"
        who = f"Model under test: {models.get('model') or '?'}; judge: {judge}"
        if models.get("self_judged"):
            who += " (self-judged: the model under test judged its own outputs)"
        if models.get("graph_extraction") and any(r.method == "kg-retrieval" for r in table.rows):
            who += f"; knowledge graph extracted by: {models['graph_extraction']}"
        if table.paper_judge:
            who += f"; the paper's judge: {table.paper_judge}"
        parts.append(who + ".")
    read = {m for r in table.rows for m in ([r.method] if isinstance(r.method, str) else r.method.values())}
    decoding = {m: v for m, v in ((models or {}).get("decoding") or {}).items() if m in read}
    if decoding:
        parts.append(
            "Decoding of the JSON steps: "
            + ", ".join(f"{m} {v}" for m, v in sorted(decoding.items()))
            + " (text: written freely and parsed, retried like the text formats; constrained: held to "
            "the JSON schema by the model server)."
        )
    return " ".join(parts)


def method_status(samples: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """{(method, dataset): {status: units}} from a samples table (the n/a rows of methods that do not apply)."""
    if samples is None or len(samples) == 0:
        return {}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (method, dataset, status), n in samples.groupby(["method", "dataset", "status"]).size().items():
        out.setdefault((method, dataset), {})[status] = int(n)
    if "error" in samples:  # units whose method could not start: counted, with the first one's cause
        from memloop.eval.methods.base import NOT_RUN

        failed = samples[(samples["status"] == "failed") & samples["error"].fillna("").str.startswith(NOT_RUN)]
        for (method, dataset), g in failed.groupby(["method", "dataset"], sort=True):
            out[(method, dataset)].update(not_run=int(len(g)), cause=str(g["error"].iloc[0])[len(NOT_RUN) :])
    return out


def _units(counts: Mapping[str, Any]) -> int:
    """The units of a cell's status counts (its statuses; `not_run` is a subset of `failed`, `cause` a text)."""
    return sum(n for k, n in counts.items() if isinstance(n, int) and k != "not_run")


def cell_status(
    status: Mapping[tuple[str, str], Mapping[str, int]], method: str, task: str | None, dataset: str | None
) -> dict[str, Any]:
    """Units per status of one cell: the method's units on the datasets the cell reads (its column's task,
    its row's dataset suffix), never the method's units on other tasks."""
    out: dict[str, Any] = {}
    for (m, ds), counts in status.items():
        if m == method and (task is None or _task(ds) == task) and (dataset is None or ds.endswith(dataset)):
            for k, n in counts.items():
                if isinstance(n, str):  # a cause: the first one stands for the cell
                    out.setdefault(k, n)
                else:
                    out[k] = out.get(k, 0) + n
    return out
