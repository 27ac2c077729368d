"""Method health: what happened inside the units behind every figure, from the steps table.

Per (method, dataset): the steps by outcome (`memloop.eval.methods.outcomes`), the steps that did not succeed
and their share, the units with any such step, the failed units, the revisions proposed / accepted /
rejected, and the retry overhead (the tokens of rejected attempts, which the figures do not count:
they count the kept attempts, as the papers do). A figure whose steps did not succeed in more than
`UNSUCCESSFUL_STEP_SHARE` of cases carries a marker with the share (`marker`), in the paper tables,
the Markdown tables and `report --json`, so a method whose steps mostly failed never reads as one
that worked.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd
from memloop.eval.methods.outcomes import OUTCOMES, SUCCEEDED

UNSUCCESSFUL_STEP_SHARE = 0.10  # above this share of steps not succeeded, a figure is marked
UNIT = ["repeat", "sample_id"]
_COUNTS = ("revisions_proposed", "revisions_accepted", "revisions_rejected")
_RETRY = ("retry_prompt_tokens", "retry_cached_tokens", "retry_decoded_tokens")


def outcomes_of(steps: pd.DataFrame) -> pd.Series:
    """Each step's outcome; rows written before the column existed read as ok, or parse_failed when
    they carry an error."""
    if "outcome" in steps and steps["outcome"].notna().all():
        return steps["outcome"]
    legacy = (
        steps["error"].isna().map({True: "ok", False: "parse_failed"})
        if "error" in steps
        else pd.Series("ok", index=steps.index)
    )
    return steps["outcome"].fillna(legacy) if "outcome" in steps else legacy


def _int(g: pd.DataFrame, column: str) -> int:
    return int(g[column].fillna(0).sum()) if column in g else 0


def health_rows(samples: pd.DataFrame, steps: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per (method, dataset) of the run's units (units without steps count as units)."""
    st = steps.assign(outcome=outcomes_of(steps)) if not steps.empty else steps
    by_group = dict(iter(st.groupby(["method", "dataset"], sort=False))) if not st.empty else {}
    rows = []
    for (method, ds), units in samples.groupby(["method", "dataset"], sort=True):
        g = by_group.get((method, ds), st.iloc[0:0] if not st.empty else pd.DataFrame(columns=["outcome"]))
        bad = g[~g["outcome"].isin(SUCCEEDED)] if len(g) else g
        kept_p, kept_d = _int(g, "prompt_tokens"), _int(g, "decoded_tokens")
        retry = {c: _int(g, c) for c in _RETRY}
        rows.append(
            {
                "method": method,
                "dataset": ds,
                "steps": int(len(g)),
                "outcomes": {o: int(n) for o, n in g["outcome"].value_counts().items()} if len(g) else {},
                "steps_not_ok": int(len(bad)),
                "steps_not_ok_share": (len(bad) / len(g)) if len(g) else None,
                "units": int(len(units)),
                "units_with_failed_step": int(bad.drop_duplicates(UNIT).shape[0]) if len(bad) else 0,
                "failed_units": int((units["status"] == "failed").sum()),
                **{c: _int(g, c) for c in _COUNTS},
                "retried_steps": int((g["attempts"].fillna(1) > 1).sum()) if "attempts" in g and len(g) else 0,
                **retry,
                "retry_overhead_prompt": (retry["retry_prompt_tokens"] / kept_p) if kept_p else None,
                "retry_overhead_decoded": (retry["retry_decoded_tokens"] / kept_d) if kept_d else None,
            }
        )
    return rows


def shares(rows: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """{(method, dataset): share of steps not succeeded} of `health_rows`."""
    return {(r["method"], r["dataset"]): r["steps_not_ok_share"] for r in rows if r["steps_not_ok_share"] is not None}


def flagged(share: float | None) -> bool:
    return share is not None and share > UNSUCCESSFUL_STEP_SHARE


def marker(share: float | None) -> str:
    """The cell marker (with a leading space), or "" when the share is within the bound."""
    return f" ⚠ {100 * share:.0f}% steps not ok" if flagged(share) else ""


def annotate(figures: list[dict], by_unit_group: Mapping[tuple[str, str], float]) -> list[dict]:
    """Each figure with `steps_not_ok` (its method and dataset's share) and `flagged`."""
    for f in figures:
        share = by_unit_group.get((f["method"], f["dataset"]))
        f["steps_not_ok"] = share
        f["flagged"] = flagged(share)
    return figures


def note() -> str:
    """What the health table counts (printed under it)."""
    return (
        f"A step is ok when its outcome is {' or '.join(sorted(SUCCEEDED))}; ⚠ marks a method whose steps were "
        f"not ok in more than {100 * UNSUCCESSFUL_STEP_SHARE:.0f}% of cases, and every figure of it in the "
        "tables above carries the same marker with the share. Token figures count the kept attempt of each "
        "step (what the papers count); the retry overhead is the rejected attempts' tokens beside them. "
        "docs/methods.md says what each outcome means for each method."
    )


def health_cells(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the health table of `health_rows`."""
    seen = [o for o in OUTCOMES if any(r["outcomes"].get(o) for r in rows)]
    extra = sorted({o for r in rows for o in r["outcomes"]} - set(OUTCOMES))
    header = (
        ["method", "dataset", "steps"]
        + seen
        + extra
        + [
            "not ok",
            "units with a step not ok / units",
            "failed units",
            "revisions proposed / accepted / rejected",
            "retried steps",
            "retry overhead, enc. / dec. (x10^3)",
            "retry overhead, enc. / dec. (% of kept)",
        ]
    )

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.0f}"

    body = []
    for r in rows:
        share = r["steps_not_ok_share"]
        body.append(
            [r["method"], r["dataset"], str(r["steps"])]
            + [str(r["outcomes"].get(o, 0)) for o in seen + extra]
            + [
                f"{r['steps_not_ok']} ({pct(share)}%)" + (" ⚠" if flagged(share) else ""),
                f"{r['units_with_failed_step']} / {r['units']}",
                str(r["failed_units"]),
                f"{r['revisions_proposed']} / {r['revisions_accepted']} / {r['revisions_rejected']}",
                str(r["retried_steps"]),
                f"{r['retry_prompt_tokens'] / 1e3:.2f} / {r['retry_decoded_tokens'] / 1e3:.2f}",
                f"{pct(r['retry_overhead_prompt'])} / {pct(r['retry_overhead_decoded'])}",
            ]
        )
    return header, body
