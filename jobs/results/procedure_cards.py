"""One procedure card per paper table: what each compared method's memory step does, side by side.

For every method a table compares, the card reads `Method.procedure(task)` of the method as the config
builds it (`memloop.eval.methods.procedure`: the settings and accessors the method's own code applies):
its output cap, attempts per step, validity rule, what a cut output meets, what happens on the last
failure, decoding, temperatures and the token counter of its limits; then the token counter of the
chunks and, where the model's weights are here, whether a step (chunk + instructions + cap) fits the
model's window in the model's own tokens. The paper's setting stands beside each row where the paper (or
the official code it adopts) states one, and every row whose value differs between compared methods is
flagged: justified where the paper states it (`PAPER`) or `JUSTIFIED` gives the methods and the reason,
"NOT JUSTIFIED" otherwise (tests/jobs/test_procedure_cards.py fails on such a flag).

`memloop report` prints the card under each paper table and `memloop run --dry-run` before the plan;
`python -m memloop.jobs.results.procedure_cards` rewrites the cards the docs pages quote
(`docs/papers/seed00N.md`, between `<!-- procedure-card: ID -->` and `<!-- /procedure-card -->`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from memloop.eval.methods.procedure import CARD_FIELDS, Procedure
from memloop.jobs.results.paper_tables import TABLES, PaperTable
from memloop.jobs.run.config import RunConfig, load_config

ROOT = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = ROOT / "jobs" / "configs" / "papers"
COMPARED_FIELDS = tuple(f for f, _ in CARD_FIELDS if f != "step")  # the step's kind names, it is no budget

# What each paper (or the official code it adopts) states, per card row; absent: the paper states nothing.
PAPER: dict[str, dict[str, str]] = {
    "seed000": {
        "temperature": "0.8 (section 4)",
        "counter": "cl100k_base (appendix D)",
        "output_cap": "not stated",
        "attempts": "not stated",
    },
    "seed002": {
        "temperature": "0.8, top-k 40 (section 4.1)",
        "output_cap": "not stated",
        "attempts": "not stated",
        "decoding": "free text, [OBJECTS FOR UPDATE] / [OBJECTS FOR ADD] (appendix C)",
        "counter": "not stated",
    },
    "seed003": {
        "temperature": "0.5 (official code: summaries), 1.0 (compression)",
        "output_cap": "max_summary_len 900 (official code)",
        "counter": "cl100k_base (official code)",
        "attempts": "incremental: one update, then compress and redo up to 6 times (official code)",
    },
    "seed004": {"output_cap": "not stated", "attempts": "not stated"},
}


@dataclass(frozen=True)
class Justified:
    """Methods (by name) whose value of a row may differ from the rest of the table's, and why."""

    methods: tuple[str, ...]  # ("*",): any method (a table whose paper compares none of them)
    reason: str


_OFFICIAL_INC = (
    "the incremental baseline follows Chang et al.'s official code, which the paper adopts: an "
    "update is asked once and an invalid one is compressed and redone (compression at temperature 1)"
)
_OWN_FORM = (
    "each method checks its own output form: a summary or notes (non-empty, within the limit, not cut), "
    "PRISM's revision lines (each revision checked against the schema)"
)
_HIER = (
    "hierarchical merging follows Chang et al.'s official code: a level's summary limit is also its output cap "
    "(max_summary_len 900 at the top, 0.65 of it per level below) and the last invalid summary is kept"
)
_FORMATS = (
    "the paper compares memory formats, and each is read as its own form: a text summary as text (a cut "
    "text is still a summary), a JSON memory as a whole JSON object (a cut one fails), CoK's revise step "
    "as figure 5's revision sections; docs/papers/seed000.md states the direction (cut text is kept: "
    "favours the text methods)"
)
JUSTIFIED: dict[str, dict[str, Justified]] = {
    "seed000": {
        "validity": Justified(("go-text", "gu-text", "gm-text", "cok"), _FORMATS),
        "cut_output": Justified(("go-text", "gu-text", "gm-text", "cok"), _FORMATS),
    },
    "seed002": {
        "validity": Justified(("inc-update", "hier-merge"), _OWN_FORM),
        "cut_output": Justified(("inc-update", "hier-merge"), _OWN_FORM + "; " + _OFFICIAL_INC),
        "on_last_failure": Justified(("inc-update", "hier-merge"), _OFFICIAL_INC + "; " + _HIER),
        "other_temperatures": Justified(("inc-update",), _OFFICIAL_INC),
        "output_cap": Justified(("hier-merge",), _HIER),
    },
    "seed003": {
        "validity": Justified(("inc-update", "hier-merge"), "the official code's checks of each method's summaries"),
        "output_cap": Justified(("hier-merge",), _HIER),
        "cut_output": Justified(("inc-update", "hier-merge"), _OFFICIAL_INC + "; " + _HIER),
        "on_last_failure": Justified(("inc-update", "hier-merge"), _OFFICIAL_INC + "; " + _HIER),
        "attempts": Justified(("inc-update",), _OFFICIAL_INC),
        "retry_temperature": Justified(("inc-update",), _OFFICIAL_INC),
        "other_temperatures": Justified(("inc-update",), _OFFICIAL_INC),
    },
    "memoryagentbench": {
        f: Justified(
            ("*",), "MemoryAgentBench compares none of these methods: memloop runs each with its own paper's procedure"
        )
        for f in COMPARED_FIELDS
    },
}


@dataclass(frozen=True)
class Flag:
    task: str
    field: str
    values: dict[str, str]  # method key -> value
    justification: str | None  # None: not justified

    def text(self) -> str:
        label = dict(CARD_FIELDS)[self.field]
        groups: dict[str, list[str]] = {}
        for k, v in self.values.items():
            groups.setdefault(v, []).append(k)
        vals = "; ".join(f"{', '.join(ks)}: {v}" for v, ks in groups.items())
        why = f"justified: {self.justification}" if self.justification else "NOT JUSTIFIED by the paper or the docs"
        return f"- ⚠ {self.task}, {label} differs ({vals}); {why}"


@dataclass(frozen=True)
class Card:
    table: PaperTable
    config: str
    tasks: dict[str, dict[str, Procedure]]  # task -> method key -> procedure
    chunks: str  # the token counter of the chunks
    fits: dict[str, dict[str, str]]  # task -> method key -> window fit (empty: not computed)
    flags: tuple[Flag, ...]

    @property
    def unjustified(self) -> list[Flag]:
        return [f for f in self.flags if f.justification is None]


def paper_of(table_id: str) -> str:
    return table_id.split("-", 1)[0]


def config_for(table_id: str) -> Path:
    """The paper config under jobs/configs/papers/ that names `table_id` in its `paper_tables`."""
    for path in sorted(PAPER_CONFIGS.glob("*.yaml")):
        if table_id in (load_config(path).paper_tables or ()):
            return path
    raise LookupError(f"no config under {PAPER_CONFIGS} names the paper table {table_id!r}")


def _table_tasks(table: PaperTable, cfg: RunConfig) -> list[str]:
    wanted = {c.task for c in table.columns}
    tasks = [d.task for d in cfg.datasets]
    return list(dict.fromkeys(t for t in tasks if None in wanted or t in wanted))


def _row_keys(table: PaperTable, task: str) -> list[str]:
    return list(dict.fromkeys(k for r in table.rows if (k := r.method_for(task)) is not None))


def procedures(table: PaperTable, cfg: RunConfig) -> dict[str, dict[str, Procedure]]:
    """task -> {method key: its procedure}, for the table's rows that the config runs on that task."""
    from memloop.eval.methods import get_method
    from memloop.jobs.run.methods import method_settings, method_tasks

    specs = {m.key: m for m in cfg.methods}
    out: dict[str, dict[str, Procedure]] = {}
    for task in _table_tasks(table, cfg):
        per: dict[str, Procedure] = {}
        for key in _row_keys(table, task):
            spec = specs.get(key)
            if spec is None:
                continue
            tasks = method_tasks(spec)
            if tasks is not None and task not in tasks:
                continue
            per[key] = get_method(spec.name, **method_settings(cfg, spec, cfg.seed)).procedure(task)
        if per:
            out[task] = per
    return out


def flags(table: PaperTable, cfg: RunConfig, per_task: Mapping[str, Mapping[str, Procedure]]) -> tuple[Flag, ...]:
    """Every compared row whose value differs between the table's compared methods, with its justification."""
    names = {m.key: m.name for m in cfg.methods}
    paper = paper_of(table.id)
    out = []
    for task, per in per_task.items():
        compared = {k: p.values() for k, p in per.items() if p.compared}
        for f in COMPARED_FIELDS:
            values = {k: v[f] for k, v in compared.items()}
            if len(set(values.values())) <= 1:
                continue
            j = JUSTIFIED.get(paper, {}).get(f)
            ok = j is not None and (
                "*" in j.methods or len({v for k, v in values.items() if names.get(k, k) not in j.methods}) <= 1
            )
            out.append(Flag(task, f, values, j.reason if ok and j else None))
    return tuple(out)


def chunk_counter(cfg: RunConfig) -> str:
    if cfg.count_tokens == "cl100k":
        return "cl100k_base (count_tokens: cl100k)"
    if cfg.model.kind != "engine":
        return "cl100k_base (the endpoint's model has no local tokenizer)"
    return "the run model's tokenizer (cl100k_base where its weights are not on this machine)"


def window_fits(cfg: RunConfig, per_task: Mapping[str, Mapping[str, Procedure]]) -> dict[str, dict[str, str]]:
    """task -> method key -> whether chunk + instructions + output cap fit the model's window, in the
    model's own tokens (`memloop.jobs.run.chunk_fit`); "unknown here" without the weights on this machine."""
    from memloop.eval.methods import get_method
    from memloop.eval.tokens import token_counter
    from memloop.jobs.run.chunk_fit import instruction_tokens, model_context, model_encoder, weights_here
    from memloop.jobs.run.methods import method_settings

    from memloop.errors import MemloopError

    try:  # weights that cannot be read here leave the fit unknown, as weights that are not here
        path = weights_here(cfg)
        context = model_context(cfg, path) if path is not None else None
        count = token_counter(model_encoder(str(path))) if context is not None else None
    except MemloopError:
        context, count = None, None
    specs = {m.key: m for m in cfg.methods}
    out: dict[str, dict[str, str]] = {}
    for task, per in per_task.items():
        chunk = max((d.options.get("chunk_tokens") or 0 for d in cfg.datasets if d.task == task), default=0)
        row = {}
        for key, proc in per.items():
            if count is None or not isinstance(chunk, int) or not chunk:
                row[key] = "unknown here (no chunk size, or the model's weights are not on this machine)"
                continue
            method = get_method(specs[key].name, **method_settings(cfg, specs[key], cfg.seed))
            cap = proc.cap_tokens
            needed = chunk + instruction_tokens(method, count) + cap
            verdict = "fits" if needed <= context else "DOES NOT FIT"
            unit = " in cl100k" if cfg.count_tokens == "cl100k" else ""
            row[key] = (
                f"{verdict}: {needed} of {context} (chunk_tokens {chunk}{unit} + instructions + cap in "
                "model tokens; the memory comes on top)"
            )
        out[task] = row
    return out


def card(table_id: str, cfg: RunConfig | None = None, config_name: str = "", window: bool = False) -> Card:
    """The card of `table_id` for `cfg` (default: the paper config that names it); `window`: check each
    step against the model's window (needs the model's weights here)."""
    table = TABLES[table_id]
    if cfg is None:
        path = config_for(table_id)
        cfg, config_name = load_config(path), path.name
    per_task = procedures(table, cfg)
    fits = window_fits(cfg, per_task) if window else {}
    return Card(table, config_name or cfg.name, per_task, chunk_counter(cfg), fits, flags(table, cfg, per_task))


def _cell(v: str) -> str:
    return v.replace("|", "/")


def card_markdown(c: Card) -> str:
    paper = PAPER.get(paper_of(c.table.id), {})
    parts = [
        f"#### Procedure card: {c.table.id} ({c.config})",
        "",
        f"Chunks and their limits count in {c.chunks}; the output cap is `max_tokens`, which the engine "
        "counts in the model's tokens.",
    ]
    for task, per in c.tasks.items():
        keys = list(per)
        header = ["", *keys, "paper"]
        rows = [
            [label, *(_cell(per[k].values()[f]) for k in keys), _cell(paper.get(f, "–"))] for f, label in CARD_FIELDS
        ]
        if c.fits:
            rows.append(["fits the model's window (model tokens)", *(_cell(c.fits[task][k]) for k in keys), "–"])
        parts += [
            "",
            f"Task `{task}`:",
            "",
            "| " + " | ".join(header) + " |",
            "| " + " | ".join("---" for _ in header) + " |",
        ] + ["| " + " | ".join(r) + " |" for r in rows]
        ceiling = [k for k in keys if not per[k].compared]
        if ceiling:
            parts += ["", f"Not compared (a single call over the whole input): {', '.join(ceiling)}."]
    if not c.fits:
        parts += [
            "",
            "Window fit: `memloop run --dry-run` and `memloop report` check each step (chunk + "
            "instructions + cap) against the model's window in its own tokens where its weights are here.",
        ]
    parts += ["", "Differences between compared methods:" if c.flags else "No value differs between compared methods."]
    parts += [f.text() for f in c.flags]
    return "\n".join(parts)


# ---- the docs pages quote the cards ----------------------------------------------------------------

DOC_PAGES = {
    "seed000": "docs/papers/seed000.md",
    "seed002": "docs/papers/seed002.md",
    "seed003": "docs/papers/seed003.md",
}
_QUOTE = re.compile(r"(<!-- procedure-card: (?P<id>[\w-]+) -->\n)(?P<body>.*?)(\n<!-- /procedure-card -->)", re.S)


def quoted_cards(text: str) -> dict[str, str]:
    """{table id: the card text a docs page quotes}."""
    return {m["id"]: m["body"] for m in _QUOTE.finditer(text)}


def rewrite_quotes(text: str, render: Callable[[str], str] = lambda tid: card_markdown(card(tid))) -> str:
    return _QUOTE.sub(lambda m: m.group(1) + render(m["id"]) + m.group(4), text)


def main(argv: list[str]) -> int:
    """Rewrite the cards quoted by the docs pages (all of DOC_PAGES, or the paths given)."""
    pages = argv or [str(ROOT / p) for p in DOC_PAGES.values()]
    for page in pages:
        path = Path(page)
        path.write_text(rewrite_quotes(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
