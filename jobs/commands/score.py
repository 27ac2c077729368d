"""`memloop score ...`: score result files with the judges outside a run.

`memloop score booookscore --summaries FILE --replay ANNOTATIONS [--json]` scores a summaries file
in the official BooookScore format (`{book: summary}`) with recorded judgments
(`{book: {sentence: {"questions", "types"}}}`) instead of calling a judge model.
`memloop score booookscore-release DIR` prints the table for every file pair of an official release.
`memloop score loft --queries Q --preds P` scores LOFT SQL predictions by execution match.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

score_app = typer.Typer(help="Score result files with the judges (BooookScore replay, ...).", no_args_is_help=True)


@score_app.command("booookscore")
def booookscore(
    summaries: Path = typer.Option(..., "--summaries", help="JSON file {book: final summary}."),
    replay: Path = typer.Option(
        ...,
        "--replay",
        help="Recorded judgments {book: {sentence: {questions, types}}}; only confusing sentences need to be listed.",
    ),
    as_json: bool = typer.Option(False, "--json", help="End with one JSON line {booookscore, books, sentences}."),
    per_book: bool = typer.Option(False, "--per-book", help="Also print each book's score."),
) -> None:
    """BooookScore of a summaries file, judged by recorded annotations (mean over books)."""
    from memloop.eval.judges.booookscore_replay import score_release

    s = score_release(summaries, replay)
    if per_book:
        for book, v in s.per_book.items():
            print(f"{v:.4f}  {book}")
    print(
        f"BooookScore {100 * s.booookscore:.1f} over {s.books} books, {s.sentences} sentences"
        + (f"; {s.unmatched} annotated sentences do not occur in their summary (not counted)" if s.unmatched else "")
    )
    if as_json:
        print(json.dumps({"booookscore": s.booookscore, "books": s.books, "sentences": s.sentences}))


@score_app.command("booookscore-release")
def booookscore_release(
    release: Path = typer.Argument(..., help="Directory with annotations/ and summaries/ (official release layout)."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as one JSON list."),
) -> None:
    """BooookScore per (model, chunk size, method) of an official release directory."""
    from memloop.eval.judges.booookscore_replay import release_table

    rows = release_table(release)
    if as_json:
        print(json.dumps(rows))
        return
    print(f"{'model':8} {'chunk':>6} {'method':6} {'score':>6} {'books':>5} {'sentences':>9}")
    for r in rows:
        print(
            f"{r['model']:8} {r['chunk']:>6} {r['method']:6} {100 * r['booookscore']:6.1f} {r['books']:>5} "
            f"{r['sentences']:>9}"
        )


@score_app.command("loft")
def loft(
    queries: Path = typer.Option(..., "--queries", help="LOFT queries.jsonl (qid, answers, metadata)."),
    preds: Path = typer.Option(..., "--preds", help="LOFT preds.jsonl (qid, model_outputs)."),
    as_json: bool = typer.Option(False, "--json", help="End with one JSON line {accuracy, queries}."),
) -> None:
    """LOFT SQL execution accuracy of a predictions file (every query must have a prediction)."""
    from memloop.eval.judges.loft_files import score_loft_files

    s = score_loft_files(queries, preds)
    print(f"LOFT execution accuracy {100 * s.accuracy:.1f} over {s.queries} queries")
    if as_json:
        print(json.dumps({"accuracy": s.accuracy, "queries": s.queries}))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.add_typer(score_app, name="score")
