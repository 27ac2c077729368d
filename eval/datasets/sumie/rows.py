"""The official SUMIE record (`dataset_sumie.jsonl`, as its release's README lays it out) as pydantic models.

A record: entity_name, entity_category, paragraph_summaries = [{paragraph: [[sentence id, text], ...],
summary: [{attribute, value, sentence_ids, evidences}, ...], paragraph_sentiment, paragraph_writing_style}, ...],
distractor_sentences = [sentence id, ...]. Also accepted: `sentences` instead of `paragraph`, a plain-string
paragraph (one pseudo-sentence per line), a number as a value, one id in place of a list, and `[id, text]` pairs
in `distractor_sentences`. Unknown top-level fields are kept (`model_extra`); unknown nested ones are ignored.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictStr,
    field_validator,
    model_validator,
)

FIX = "fix the record to the SUMIE release's format (memloop.eval.datasets.sumie.rows)"


def _text_value(value: Any) -> str:
    if value is None or isinstance(value, (dict, list)):
        raise ValueError(f"must be a string or number, got {type(value).__name__}")
    return str(value)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]  # the release writes one id bare


class SumieFact(BaseModel):
    """One attribute-value pair of a paragraph's summary and the sentences it cites."""

    attribute: StrictStr
    value: Annotated[str, BeforeValidator(_text_value)]
    sentence_ids: Annotated[list[Any], BeforeValidator(_as_list)] = []
    evidences: Annotated[list[Any], BeforeValidator(_as_list)] = []


class SumieParagraph(BaseModel):
    """One paragraph: its tagged sentences and the summary of the entity up to it."""

    sentences: list[tuple[Any, StrictStr]] = Field(
        min_length=1, validation_alias=AliasChoices("paragraph", "sentences")
    )
    untagged: StrictStr | None = None  # the paragraph as given, when it came as one string under `paragraph`
    summary: list[SumieFact]
    paragraph_sentiment: Any = None
    paragraph_writing_style: Any = None

    @model_validator(mode="before")
    @classmethod
    def _untagged(cls, data: Any) -> Any:
        """A plain-string paragraph: one pseudo-sentence per non-blank line, the string kept as the chunk."""
        key = "paragraph" if isinstance(data, dict) and "paragraph" in data else "sentences"
        raw = data.get(key) if isinstance(data, dict) else None
        if not isinstance(raw, str):
            return data
        lines = [line for line in raw.split("\n") if line.strip()]
        return {
            **data,
            key: [[f"line{i}", line] for i, line in enumerate(lines)],
            **({"untagged": raw} if key == "paragraph" else {}),
        }

    @property
    def chunk(self) -> str:
        return self.untagged if self.untagged is not None else " ".join(text for _, text in self.sentences)


class SumieRecord(BaseModel):
    """One entity of the release."""

    model_config = ConfigDict(extra="allow")

    entity_name: StrictStr
    entity_category: StrictStr
    paragraph_summaries: list[SumieParagraph]
    distractor_sentences: list[Any] = []

    @field_validator("paragraph_summaries")
    @classmethod
    def _some_paragraph(cls, value: list[SumieParagraph]) -> list[SumieParagraph]:
        if not value:
            raise ValueError("is empty: an entity needs at least one paragraph")
        return value

    @property
    def distractor_ids(self) -> list[Any]:
        """The distractor sentences' ids (the release may give `[id, text]` pairs)."""
        return [d[0] if isinstance(d, (list, tuple)) and d else d for d in self.distractor_sentences]
