"""Judges and scorers: BooookScore, SUMIE matching, KGScore, ROUGE, exact match, execution match.

Every judge is an independent unit of work with one calling convention:

    result = run_judge(name, output, gold, llm=None, metadata=None, **options) -> JudgeResult

`output` is what the method produced (`get_judge(name).prediction(method_output, n_chunks)` picks it
out of a `MethodOutput`: per-turn memories for SUMIE, the final answer for the others), `gold` is `Sample.gold`,
`metadata` is `Sample.metadata`,
`llm` is any `memloop.eval.llm.LLM` (only judges with `needs_llm` use it; they never touch the engine or
Ray). `list_judges()` names them (the registry is their single source), `get_judge(name)` gives
`JudgeInfo` (tasks it applies to, whether it needs an LLM, its templates, `prediction` and
`aggregate`), `judge_template_hashes(name)` (= `get_judge(name).template_hashes()`) the sha256 of
its prompts.
Options (`**options`, from the run config) are each judge function's keyword arguments, e.g.
`max_attempts`, `on_invalid` ("raise" | "record"), `batch_size`, `entities`, `max_edges`, `max_pairs` (SUMIE).
Bad inputs raise `memloop.eval.errors.JudgeError` with what to do.

| judge | tasks | output | gold | LLM |
| --- | --- | --- | --- | --- |
| booookscore | book | final summary (str) | unused | yes: one call per sentence |
| booookscore-batched | book | final summary (str) | unused | yes: `batch_size` sentences per call |
| sumie | sumie | per-turn predictions, see below | `{"turns": [{attr: [values]}, ...]}` | yes: pair matcher |
| sumie-exact | sumie | per-turn predictions | same | no: normalised exact match |
| kgscore | any with a reference summary | generated summary (str) | `{"reference": str}` | yes: edge extraction |
| rouge | any with a reference summary | summary (str) | `{"reference": str}` | no |
| repoqa-exact | repoqa | answer naming a function (str) | function name (str) | no |
| loft-exec | spider | rows (list of lists, or their JSON) | rows | no |
| mab | memoryagentbench | one reply per question (list of str) | `{"questions", "answers", ...}` | no |
| mab-llm | memoryagentbench | as mab | as mab, `keypoints` for ∞Bench-Sum | yes: LongMemEval and ∞Bench-Sum |

SUMIE predictions: a list with one entry per turn (the memory after chunk t), each a JSON object
`{attribute: value or [values]}` (or its JSON text; a `{"attributes": {...}}` wrapper is unwrapped);
a single object is scored as the last turn. Text predictions need the `sumie` judge (it extracts
pairs with the LLM). KGScore gold may also carry `"entities": [names]`. ROUGE and KGScore declare no
tasks: they apply to any sample whose gold carries a reference summary (`JudgeInfo.gold`,
`memloop.eval.judges.gold`); given directly, a bare reference string is also accepted.

Metrics per judge: booookscore(-batched): `booookscore`, `sentences`, `confusing`, `invalid`;
sumie(-exact): `precision`, `recall`, `f1` per turn; kgscore: `precision`, `recall`, `f1`,
`edges_generated`, `edges_reference` (and `edge_cap_hit` when `max_edges` is set; only `invalid`
when an extraction failed under `on_invalid: record`); rouge: `rouge1`, `rouge2`, `rougeL`, `rougeLsum`;
repoqa-exact and loft-exec: `accuracy`.

Records for the jobs layer's Parquet tables (laid out by `memloop.jobs.store.tables.judge_rows`):

- `judgments` rows: `{"judge": str, "index": int, "record_json": str}`; `record_json` is
  `Judgment.to_record()`: `{"item": str (what was judged: a sentence, "attr: value", an
  extraction), "label": JSON (the parsed verdict), "valid": bool, "source": "llm"|"replay"|"rule",
  "prompt": str|null, "template_id": str|null, "template_sha256": str|null, "constrained": bool,
  "raw": str|null (the last raw answer), "failures": [{"raw": str, "reason": str}], "retries": int,
  "usage": {"prompt_tokens", "cached_tokens", "decoded_tokens"}}`. `Judgment.from_record` reads one
  back, and each judge module's `score_judgments`/`rescore` recomputes its score from them.
- `scores` rows: `{"judge": str, "metric": str, "turn": int|None, "value": float}`; per-turn
  metrics (SUMIE `precision`/`recall`/`f1` at turn t, 0-based) carry `turn`, whole-sample ones
  `None`; start / last / average over turns (seed 000 table 1) are derived from the per-turn rows.

Aggregation over samples is declared by each judge (`JudgeInfo.aggregate`, all the papers' judges:
the unweighted mean, `aggregation.mean_over_samples`; mean over books for BooookScore, macro averages
for SUMIE and KGScore); the report calls it, and `sumie.turn_summary` for start / last / average
over turns. Cost accounting from engine usage lives in `memloop.eval.judges.cost` (cache hit rate, cost
index), also called by the report.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from memloop.eval.errors import JudgeError
from memloop.eval.judges.aggregation import Aggregate, mean_over_samples
from memloop.eval.judges.gold import GoldNeed
from memloop.eval.judges.predictions import final_answer
from memloop.eval.judges.records import JudgeResult, Judgment, Score
from memloop.eval.llm import LLM
from memloop.eval.registry import Registry
from memloop.eval.templates import template_hashes

if TYPE_CHECKING:
    from memloop.eval.methods.base import MethodOutput

Prediction = Callable[["MethodOutput", int], Any]


@dataclass(frozen=True)
class JudgeInfo:
    """A judge: where its function lives, what it needs, what it scores and how its scores aggregate."""

    name: str
    tasks: tuple[str, ...] | None  # None: any task whose samples' gold carries what `gold` asks for
    needs_llm: bool
    module: str
    function: str
    description: str
    templates: tuple[str, ...] = ()  # prompt templates the judge renders (their hashes go into the run id)
    predict: Prediction = final_answer  # what of a MethodOutput the judge scores
    aggregate_by: Aggregate = mean_over_samples  # per-sample values -> the dataset-level figure
    gold: GoldNeed | None = None  # what every judged sample's gold must carry (checked before a run)
    # matches structured memories only: a method that keeps a text memory (`fmt = "text"`) cannot be
    # scored by it, which a run checks before any work
    needs_json_memory: bool = False
    # the headline metrics a table shows for this judge: their columns stay (every unit "incomplete")
    # when the judge failed on every unit of a dataset and so wrote no score there
    metrics: tuple[str, ...] = ()
    per_turn: bool = False  # metrics scored per turn (SUMIE): a table shows them at start / last / avg
    # the `judge` its rows carry when another judge's (a variant of the same measure, e.g. booookscore-batched
    # writes booookscore rows; `run_judge` checks it): two judges of one run must not write the same rows
    rows_as: str | None = None

    @property
    def row_name(self) -> str:
        """The `judge` column of the rows this judge writes."""
        return self.rows_as or self.name

    def load(self) -> Callable[..., JudgeResult]:
        """The judge function itself (imports its module on first use)."""
        import importlib

        return getattr(importlib.import_module(self.module), self.function)

    def prediction(self, output: "MethodOutput", n_chunks: int) -> Any:
        """What this judge scores of `output` (a sample of `n_chunks` chunks)."""
        return self.predict(output, n_chunks)

    def aggregate(self, values: Iterable[float]) -> float:
        """One metric's per-sample values -> the dataset-level value."""
        return self.aggregate_by(values)

    def template_hashes(self) -> dict[str, str]:
        """{template id: sha256} of the prompts this judge may render (hashed into the run id)."""
        return template_hashes(self.templates)

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The judge's options validated against its function's keyword parameters (JudgeError if not)."""
        from memloop.eval.options import check_options

        fn = self.load()
        scored = tuple(inspect.signature(fn).parameters)[:3]  # (output, gold, llm): given by the run
        return check_options(fn, options, f"judge {self.name!r}", JudgeError, skip=scored + ("metadata",))


JUDGES: Registry[JudgeInfo] = Registry("judge", JudgeError)
# The index: each judge and the module whose `@judge_info(...)` (its metadata, on its function) registers it, in
# the order `list_judges` gives; a judge's module is imported when the judge is first asked for.
for _module, _names in (
    ("booookscore", ("booookscore", "booookscore-batched")),
    ("sumie", ("sumie", "sumie-exact")),
    ("kgscore", ("kgscore",)),
    ("overlap", ("rouge", "repoqa-exact", "loft-exec")),
    ("mab", ("mab", "mab-llm")),
):
    for _name in _names:
        JUDGES.index(_name, f"memloop.eval.judges.{_module}")

J = TypeVar("J", bound=Callable[..., JudgeResult])


def judge_info(
    name: str,
    tasks: tuple[str, ...] | None,
    needs_llm: bool,
    description: str,
    templates: tuple[str, ...] = (),
    **fields: Any,
) -> Callable[[J], J]:
    """Register the decorated judge function as `name`, with its metadata.

    The keywords are `JudgeInfo`'s fields (`metrics`, `predict`, `gold`, `per_turn`, `rows_as`, ...); the
    function's module must be in the index above.
    """

    def register(fn: J) -> J:
        JUDGES.entry(name)(
            JudgeInfo(name, tasks, needs_llm, fn.__module__, fn.__name__, description, templates, **fields)
        )
        return fn

    return register


def register_judge(info: JudgeInfo) -> None:
    """Add (or replace) a judge under `info.name`."""
    JUDGES.register(info.name, info)


def list_judges() -> list[str]:
    """Every registered judge's name."""
    return JUDGES.names()


def get_judge(name: str) -> JudgeInfo:
    """The registered judge `name` (a named error listing the known ones if there is none)."""
    return JUDGES.get(name)


def judge_template_hashes(name: str) -> dict[str, str]:
    """{template id: sha256} of the prompts judge `name` may render."""
    return get_judge(name).template_hashes()


def headline_metrics(name: str) -> list[str]:
    """The metric columns a table keeps for judge `name`.

    Per-turn ones as "metric:start|last|avg"; a judge the registry does not hold: one column named after it.
    """
    if name not in JUDGES:
        return [name]
    info = get_judge(name)
    return [f"{m}:{w}" for m in info.metrics for w in ("start", "last", "avg")] if info.per_turn else list(info.metrics)


def aggregator(name: str) -> Aggregate:
    """How judge `name` aggregates over samples.

    A name the registry does not hold (scores written by an older memloop, or by a judge registered
    elsewhere) aggregates by the mean, as all the papers do.
    """
    return get_judge(name).aggregate_by if name in JUDGES else mean_over_samples


def run_judge(
    name: str, output: Any, gold: Any, llm: LLM | None = None, metadata: dict[str, Any] | None = None, **options: Any
) -> JudgeResult:
    """Run one judge on one output (a self-contained unit of work: safe to ship to a Ray task)."""
    info = get_judge(name)
    if info.needs_llm and llm is None:
        raise JudgeError(f"judge {name!r} needs a judge LLM; configure `judge_model` in the run config")
    result = info.load()(output, gold, llm, metadata=metadata or {}, **info.check_options(options))
    if result.judge != info.row_name:  # the registry's `rows_as` is what keeps a run's judges' rows apart
        raise JudgeError(
            f"judge {name!r} wrote rows as {result.judge!r} but is registered to write "
            f"{info.row_name!r}; set its `rows_as` in memloop.eval.judges"
        )
    return result


__all__ = [
    "Judgment",
    "JudgeResult",
    "Score",
    "JudgeInfo",
    "JUDGES",
    "judge_info",
    "list_judges",
    "get_judge",
    "register_judge",
    "run_judge",
    "judge_template_hashes",
    "aggregator",
    "headline_metrics",
]
