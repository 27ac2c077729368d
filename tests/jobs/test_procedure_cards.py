"""The procedure card of every paper table (jobs/results/procedure_cards.py): each compared method's output
cap, attempts, validity rule, cut-output and last-failure handling, decoding, temperatures and token counter,
read from the methods as the configs build them; a difference between compared methods that neither the
paper states nor the docs justify fails here. The docs pages quote the cards as the code prints them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from memloop.jobs.results import procedure_cards as pc
from memloop.jobs.results.cost_tables import _paper_costs
from memloop.jobs.results.paper_tables import TABLES
from memloop.jobs.results.prompt_tokens import PromptTokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("table_id", sorted(TABLES))
def test_every_paper_tables_card_flags_no_difference_the_paper_or_docs_do_not_justify(table_id: str) -> None:
    card = pc.card(table_id)
    assert card.tasks, f"{table_id}: the card shows no method"
    text = pc.card_markdown(card)
    assert f"Procedure card: {table_id}" in text
    assert not card.unjustified, "\n".join(f.text() for f in card.unjustified)


def test_a_difference_between_compared_methods_is_flagged_and_unjustified_without_a_reason() -> None:
    """The check is live: an output cap that only one PRISM variant gets is flagged and nothing excuses it."""
    from memloop.jobs.run.config import load_config

    cfg = load_config(pc.config_for("seed002-table2"))
    methods = [
        m.model_copy(update={"options": {**m.options, "max_tokens": 512}}) if m.key == "prism-amendments" else m
        for m in cfg.methods
    ]
    card = pc.card("seed002-table2", cfg.model_copy(update={"methods": methods}))
    [flag] = [f for f in card.unjustified if f.task == "book"]
    assert flag.field == "output_cap" and flag.values["prism-amendments"] == "512 model tokens"
    assert "NOT JUSTIFIED" in pc.card_markdown(card)


def test_seed002_compared_methods_share_output_cap_and_attempts_and_the_cap_is_not_the_old_1024() -> None:
    """Seed 002 states no output limit and no retries: every compared method decodes up to the same cap (ours,
    not the 900 / 1024 that capped the cost comparison) with the same attempts per step; hierarchical merging's
    cap is the official code's summary limit, a justified difference."""
    card = pc.card("seed002-table2")
    for task, per in card.tasks.items():
        compared = {k: p for k, p in per.items() if p.compared}
        assert {p.attempts for p in compared.values()} == {1}, task
        caps = {p.output_cap for k, p in compared.items() if k != "hier-merge"}
        assert caps == {"8192 model tokens"}, (task, caps)


def test_the_docs_pages_quote_the_cards_the_code_prints() -> None:
    for paper, page in pc.DOC_PAGES.items():
        quoted = pc.quoted_cards((ROOT / page).read_text())
        tables = {t for t in TABLES if pc.paper_of(t) == paper}
        assert set(quoted) == tables, (page, sorted(tables - set(quoted)))
        for tid, text in quoted.items():
            assert text == pc.card_markdown(pc.card(tid)), (
                f"{page}: the card of {tid} differs from the code's; run "
                "`python -m memloop.jobs.results.procedure_cards` to rewrite it"
            )


def test_every_attempts_prompt_and_output_count_in_the_paper_cost_columns() -> None:
    """A step retried 3 times sends its prompt 3 times (each retry reusing the whole previous prompt) and
    decodes its rejected outputs too: the cost columns count all of them, not the kept attempt alone."""
    steps = pd.DataFrame(
        {
            "repeat": [0, 0],
            "sample_id": ["s", "s"],
            "step": [0, 1],
            "kind": ["initial", "update"],
            "prompt": ["a b c", "a b d e"],
            "output": ["x y", "z"],
            "attempts": [1, 3],
            "retry_decoded_tokens": [0, 7],
        }
    )
    cost = _paper_costs(steps, PromptTokenizer(str.split, "words"))[(0, "s")]
    assert cost.total == 3 + 3 * 4  # every attempt's prompt
    assert cost.hit == 2 + 2 * 4  # the first update shares "a b"; each retry its whole prompt
    assert cost.output == 2 + 1 + 7  # kept outputs and the rejected attempts' decoded tokens
