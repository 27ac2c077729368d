"""Mutation testing of the formulas: change one operator, number, name or keyword at a time in the scoring,
aggregation, cache-accounting and sampling functions (mutmut's mutation rules) and run the fast tests that
cover that file; a change no test notices (a surviving mutant) is a formula the tests do not pin down.

    python scripts/mutation.py                 # every target (`make mutation`); about 45 CPU-minutes
    python scripts/mutation.py mab sumie       # some targets
    python scripts/mutation.py --list          # the targets, their functions and mutant counts

Only the functions named per target are mutated (not messages, docstrings or plumbing), and mutants of
strings, f-strings and decorators are not made: they change what a number is called, not the number. Each
mutant runs in a forked child of a process that imported the tests' third-party libraries once, so a
mutant costs the tests' own time; the file is restored after each. The tally and every survivor (line and
mutated text) go to stdout and runs/mutation/<target>.json. Known equivalent mutants (same numbers for every
input) are listed in EQUIVALENT with why, and reported apart from the survivors.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "mutation"
SKIPPED_TYPES = {"string", "fstring", "decorator"}  # messages and registration, not numbers


@dataclass(frozen=True)
class Target:
    path: str  # repository-relative source file
    functions: tuple[str, ...]  # top-level functions or Class.method names whose bodies are mutated
    tests: tuple[str, ...]  # pytest arguments: the fast tests that cover them
    preload: tuple[str, ...] = ()  # third-party modules imported once before forking
    # (original line, mutated line), stripped -> why the mutant computes the same numbers for every input
    equivalent: dict[tuple[str, str], str] = field(default_factory=dict)


ANNOTATION = "a type annotation: never evaluated (`from __future__ import annotations`)"
_PAST_THE_END = (
    "a page past the key's or the tokens' end compares unequal (a shorter slice) and stops the loop "
    "there, so the bound only saves that compare"
)
_NO_UNIT_COLUMN = (
    "the judges' failures come with their columns whenever they have rows (`run_data.FAILURE_COLUMNS`): an empty "
    "frame filtered or read stays empty, so either way no unit is a judge's failure"
)
JUDGE_PRELOAD = ("numpy", "pandas", "pydantic", "rouge_score.rouge_scorer", "nltk", "jsonschema", "hypothesis")

# The tests per target are the fast ones that check the formulas' numbers (a mutant costs one run of them).
TARGETS: dict[str, Target] = {
    "booookscore": Target(
        "eval/judges/booookscore.py",
        ("is_confusing", "score_judgments", "_result", "_units"),
        ("tests/judges/test_booookscore.py",),
        JUDGE_PRELOAD,
    ),
    "mab": Target(
        "eval/judges/mab.py",
        ("normalize", "f1_score", "text_metrics", "_recall_in", "_draws", "_interval"),
        (
            "tests/judges/test_mab.py",
            "-k",
            "normalisation or factconsolidation or several_accepted or "
            "icl_scores or sources_average or one_context or by_hand or percentile_interval",
        ),
        JUDGE_PRELOAD,
    ),
    "mab-figures": Target(
        "eval/judges/mab.py",
        ("_by_source", "source_figures", "family", "competency_label", "base_competency", "competency_figures"),
        (
            "tests/judges/test_mab_figures.py",
            *(
                f"tests/judges/test_mab.py::test_{t}"
                for t in (
                    "sources_average_over_questions_and_competencies_over_sources",
                    "overall_needs_every_competency_with_every_source_scored",
                    "the_icl_sets_are_one_column_of_test_time_learning_and_overall_averages_the_competencies",
                    "without_the_recommendation_set_ttl_is_labelled_mcc_only_and_there_is_no_overall",
                    "a_source_of_one_context_has_no_interval_rather_than_a_degenerate_one",
                )
            ),
        ),
        JUDGE_PRELOAD,
        {
            (
                "grouped: dict[str, dict[str, list[float | None]]] = {}",
                "grouped: dict[str, dict[str, list[float & None]]] = {}",
            ): ANNOTATION,
            (
                'return label.split(" (", 1)[0]',
                'return label.split(" (", 2)[0]',
            ): "the text before the first ' (' is the same whatever the split limit",
        },
    ),
    "sumie": Target(
        "eval/judges/sumie.py",
        ("prf", "exact_support", "turn_summary", "aggregate_turns", "both_ways_prf"),
        ("tests/judges/test_sumie.py",),
        JUDGE_PRELOAD,
        {
            (
                "complete = turns == list(range(turns[-1] + 1)) if turns else False",
                "complete = turns == list(range(turns[-1] + 1)) if turns else True",
            ): "no turns: turn_summary raises before `complete` is read"
        },
    ),
    "overlap": Target(
        "eval/judges/overlap.py",
        ("_lines", "rouge_scores", "normalise_cell", "normalise_rows", "exec_match"),
        ("tests/judges/test_overlap_cost.py", "-k", "rouge or exec_match_edge or loft_exec"),
        JUDGE_PRELOAD,
    ),
    "kgscore": Target(
        "eval/judges/kgscore.py",
        ("kg_prf", "score_edges"),
        ("tests/judges/test_kgscore.py", "-k", "equations or empty_summary or embedder_it_is_given"),
        JUDGE_PRELOAD,
        {
            (
                "by_pair: dict[tuple[str, str | None], list[str]] = {}",
                "by_pair: dict[tuple[str, str & None], list[str]] = {}",
            ): ANNOTATION
        },
    ),
    "aggregation": Target(
        "eval/judges/aggregation.py",
        (
            "mean_over_samples",
            "mean_se",
            "bootstrap",
            "paired_mean_delta",
            "paired_ratio_delta",
            "_per_repeat",
            "figure",
            "paired_difference",
            "_none",
        ),
        (
            "tests/judges/test_aggregation.py",
            "tests/jobs/test_means.py::test_figure_and_paired_difference_directly",
            "tests/jobs/test_means.py::test_cells_carry_a_seeded_bootstrap_interval_clustered_by_sample",
            "tests/jobs/test_means.py::test_a_repeat_whose_units_all_failed_counts_as_zero_not_dropped",
        ),
        JUDGE_PRELOAD,
    ),
    "cells": Target(
        "jobs/results/cells.py",
        ("unit_values", "cost_figure"),
        (
            "tests/jobs/test_means.py",
            "-k",
            "figure_and_paired or bootstrap_interval or all_failed or unit_values or cost_cell",
        ),
        JUDGE_PRELOAD,
    ),
    "cells-scores": Target(
        "jobs/results/cells.py",
        ("unit_states", "common_units", "score_columns", "score_cells", "score_figures"),
        ("tests/jobs/test_score_cells.py",),
        (*JUDGE_PRELOAD, "pyarrow.parquet"),
        {
            (
                "return (pd.concat(keep) if keep else s.iloc[0:0]), excluded",
                "return (pd.concat(keep) if keep else s.iloc[1:0]), excluded",
            ): "both slices are empty: no unit, the same columns"
        },
    ),
    "mab-table": Target(
        "jobs/results/mab_table.py",
        ("judge_of", "question_scores", "unit_counts", "_no_items", "ask_many_cost", "mab_table", "competency_columns"),
        ("tests/jobs/test_mab_table.py", "tests/jobs/test_mab_columns.py"),
        (*JUDGE_PRELOAD, "pyarrow.parquet", "tiktoken"),
        {
            (
                "return next((j for j in JUDGES if j in present), JUDGES[-1])",
                "return next((j for j in JUDGES if j in present), JUDGES[+1])",
            ): "JUDGES has two names: [+1] and [-1] are the same one",
            (
                'failed_judging = set(judge_failures["unit"]) if not judge_failures.empty and "unit" in '
                "judge_failures else set()",
                'failed_judging = set(judge_failures["unit"]) if not judge_failures.empty or "unit" in '
                "judge_failures else set()",
            ): _NO_UNIT_COLUMN,
            (
                'if not failures.empty and "judge" in failures:',
                'if not failures.empty or "judge" in failures:',
            ): _NO_UNIT_COLUMN,
        },
    ),
    "budget": Target(
        "eval/memory/budget.py",
        ("memory_tokens", "trim_to_budget", "_largest_container"),
        ("tests/memory/test_render_budget.py", "-k", "trim or token_counts"),
        JUDGE_PRELOAD,
    ),
    "radix": Target(
        "engine/cache/radix.py",
        (
            "RadixCache._page_key",
            "RadixCache._match_len",
            "RadixCache._split",
            "RadixCache.match",
            "RadixCache.insert",
            "RadixCache._evictable",
            "RadixCache.evict",
            "RadixCache.evictable_pages",
            "RadixCache._nodes",
            "RadixCache.cached_pages",
            "RadixCache.clear",
        ),
        ("tests/serving/test_radix_exact.py", "tests/serving/test_radix.py"),
        ("numpy", "hypothesis", "jax"),
        {
            **{
                ("while n < len(key) and start + n + ps <= len(tokens):", m): _PAST_THE_END
                for m in (
                    "while n <= len(key) and start + n + ps <= len(tokens):",
                    "while n < len(key) and start - n + ps <= len(tokens):",
                    "while n < len(key) and start + n - ps <= len(tokens):",
                    "while n < len(key) or start + n + ps <= len(tokens):",
                )
            },
            (
                "while pos + self.ps <= len(tokens):",
                "while pos - self.ps <= len(tokens):",
            ): "a key shorter than a page is no child's key: the lookup stops there as before",
            (
                "upper.last_access = node.last_access",
                "upper.last_access = None",
            ): "both callers set the returned node's last use right after the split",
            (
                "while pos < len(tokens):",
                "while pos <= len(tokens):",
            ): "at the end it hangs a page-less empty leaf: no page is matched, adopted, counted or freed "
            "differently (eviction drops it first, for 0 pages)",
            ("continue", "break"): "within one evict no popped node has become unevictable (each enters "
            "the heap once and nothing takes references meanwhile): the skip never runs",
        },
    ),
    "cost": Target(
        "eval/judges/cost.py",
        (
            "_check",
            "_checked",
            "total",
            "cache_hit_rate",
            "net_encoded",
            "cost_index",
            "usage_of",
            "cost_summary",
            "per_sample_cost",
            "prefix_hits",
            "prefix_hit_rate",
            "paper_sample_cost",
            "paper_per_sample",
        ),
        ("tests/judges/test_overlap_cost.py", "-k", "cost or total or hit"),
        JUDGE_PRELOAD,
    ),
    "rope": Target(
        "engine/model/decoder.py",
        ("rope_tables", "_rope_tables_once", "rotary"),
        (
            "tests/engine/test_engine_reference.py",
            "tests/engine/test_engine_reference_decoder.py",
            "-k",
            "logits_match_transformers or rotary_tables",
        ),
        ("numpy", "jax", "torch", "transformers"),
        {
            (
                "return jax.lax.cond(jnp.any(positions >= 0), rope_tables, rope_tables, positions, inv_freq)",
                mutant,
            ): "both branches of the conditional are `rope_tables`: the predicate only keeps it a runtime one"
            for mutant in (
                "return jax.lax.cond(jnp.any(positions > 0), rope_tables, rope_tables, positions, inv_freq)",
                "return jax.lax.cond(jnp.any(positions >= 1), rope_tables, rope_tables, positions, inv_freq)",
            )
        },
    ),
    "sampling": Target(
        "engine/sample/sampling.py",
        ("next_pow2", "candidate_cap", "logprob_width"),
        ("tests/engine/test_engine_sampling.py", "-k", "candidate_cap or logprob_width"),
        ("numpy", "hypothesis", "pydantic", "jax"),
    ),
}


def _spans(path: Path, names: tuple[str, ...]) -> list[tuple[int, int]]:
    """0-based line spans (first, last) of the bodies of `names` (their signatures and docstrings left out)."""
    tree = ast.parse(path.read_text())
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}.{sub.name}"] = sub
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"{path}: no function {', '.join(missing)} (update TARGETS in {Path(__file__).name})")
    spans = []
    for n in names:
        body = found[n].body  # type: ignore[attr-defined]
        first = body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            body = body[1:] or body  # the docstring
        spans.append((body[0].lineno - 1, found[n].end_lineno - 1))  # type: ignore[attr-defined]
    return spans


@dataclass(frozen=True)
class _Config:
    """The part of mutmut's Config its mutation rules read: which parso node types to mutate."""

    mutation_types_to_apply: frozenset[str]
    covered_lines_by_filename: None = None


def mutants(target: Target) -> list[tuple[object, str]]:
    """(mutmut's mutation id, the mutated source) for each mutant inside the target's functions."""
    import mutmut

    path = ROOT / target.path
    source = path.read_text()
    spans = _spans(path, target.functions)
    cfg = _Config(frozenset(mutmut.mutations_by_type) - SKIPPED_TYPES)
    out = []
    for mid in mutmut.list_mutations(mutmut.Context(source=source, filename=target.path, config=cfg)):
        if not any(a <= mid.line_number <= b for a, b in spans):
            continue
        mutated, n = mutmut.mutate(mutmut.Context(source=source, mutation_id=mid, filename=target.path, config=cfg))
        if n == 1 and mutated != source:
            out.append((mid, mutated))
    return out


def _run_tests(target: Target, limit_s: float) -> str:
    """Run the target's tests in a forked child: "passed", "failed" or "timeout"."""
    pid = os.fork()
    if pid == 0:  # the child: fresh imports of memloop (the parent never imported it), quiet output
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # stopping the run is the parent's business
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest

            code = pytest.main(["-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", *target.tests])
        except BaseException:  # noqa: BLE001  (any error in the child is the mutant's doing)
            code = 3
        os._exit(int(code))
    deadline = time.monotonic() + limit_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "passed" if os.waitstatus_to_exitcode(status) == 0 else "failed"
        if time.monotonic() > deadline:  # a mutant that loops forever is caught, by the clock
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.05)


def run_target(name: str, target: Target) -> dict:
    path = ROOT / target.path
    original = path.read_text()
    stat = path.stat()
    found = mutants(target)
    t0 = time.monotonic()
    if _run_tests(target, 1800) != "passed":
        raise SystemExit(f"{name}: the tests fail on the unmutated code; fix them first")
    baseline = time.monotonic() - t0
    limit = 5 * baseline + 30
    results = []
    try:
        for i, (mid, mutated) in enumerate(found):
            path.write_text(mutated)
            outcome = _run_tests(target, limit)
            line = mutated.splitlines()[mid.line_number] if mid.line_number < len(mutated.splitlines()) else ""
            if outcome == "passed" and (mid.line.strip(), line.strip()) in target.equivalent:
                outcome = "equivalent"
            results.append(
                {"line": mid.line_number + 1, "original": mid.line.strip(), "mutant": line.strip(), "outcome": outcome}
            )
            print(
                f"  [{i + 1}/{len(found)}] {outcome:10} {target.path}:{mid.line_number + 1}: {line.strip()}", flush=True
            )
    finally:
        path.write_text(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    counts = {k: sum(r["outcome"] == k for r in results) for k in ("failed", "timeout", "passed", "equivalent")}
    killed = counts["failed"] + counts["timeout"]
    scored = len(results) - counts["equivalent"]
    summary = {
        "target": name,
        "path": target.path,
        "mutants": len(results),
        "killed": killed,
        "survived": counts["passed"],
        "equivalent": counts["equivalent"],
        "score": round(killed / scored, 4) if scored else 1.0,
        "baseline_s": round(baseline, 1),
        "survivors": [r for r in results if r["outcome"] == "passed"],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(dict(summary, results=results), indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", help=f"default: all ({', '.join(TARGETS)})")
    ap.add_argument("--list", action="store_true", help="list the targets and their mutant counts, run nothing")
    args = ap.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    chosen = args.targets or list(TARGETS)
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    sys.dont_write_bytecode = True  # a mutant's bytecode must never be cached beside the source
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped: restore the file being mutated
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (also when started in the background)
    if args.list:
        for n in chosen:
            print(f"{n:12} {len(mutants(TARGETS[n])):4} mutants  {TARGETS[n].path}: {', '.join(TARGETS[n].functions)}")
        return 0
    totals = {"mutants": 0, "killed": 0, "survived": 0, "equivalent": 0}
    for n in chosen:
        t = TARGETS[n]
        for mod in t.preload:
            __import__(mod)
        leaked = [m for m in sys.modules if m == "memloop" or m.startswith("memloop.")]
        assert not leaked, f"the parent imported {leaked[:3]}: a forked child would test the unmutated code"
        print(f"{n}: {t.path} ({', '.join(t.tests)})", flush=True)
        s = run_target(n, t)
        for k in totals:
            totals[k] += s[k]
        print(
            f"{n}: {s['killed']}/{s['mutants'] - s['equivalent']} killed, score {s['score']:.1%}, "
            f"{s['survived']} survived, {s['equivalent']} equivalent",
            flush=True,
        )
        for r in s["survivors"]:
            print(f"  SURVIVED {t.path}:{r['line']}: {r['original']}  ->  {r['mutant']}")
    scored = totals["mutants"] - totals["equivalent"]
    print(
        f"total: {totals['killed']}/{scored} killed ({totals['killed'] / max(1, scored):.1%}), "
        f"{totals['survived']} survived, {totals['equivalent']} equivalent"
    )
    return 1 if totals["survived"] else 0


if __name__ == "__main__":
    sys.exit(main())
