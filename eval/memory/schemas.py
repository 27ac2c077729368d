"""The papers' schemas as ready-made classes (seed 000 appendix B and figure 5; seed 002 appendices A and C).

Docstrings and field comments are written in our own words, carrying the papers' instructions.
Use them with `Schema.from_class(...)`, or the ready `Schema` objects at the bottom.
"""

from __future__ import annotations

import dataclasses
from typing import NewType, TypedDict

from memloop.eval.memory.schema import Schema


class Summary(TypedDict):
    attributes: dict[str, list[str]]  # Keyed by attribute; each holds a list of details with enough context about it.


@dataclasses.dataclass
class StoryElements:
    """A book memory in six parts (seed 000 appendix B). Each part is keyed by a name (a character, an
    event, a setting, ...) and holds short explanations about it."""

    characters: dict[str, list[str]]  # Keyed by character name; explanations of who they are and what they do.
    events: dict[str, list[str]]  # Keyed by event name; what happened and why.
    background: dict[str, list[str]]  # Keyed by setting or context; explanations of the background.
    motivations: dict[str, list[str]]  # Keyed by character or group; what drives them.
    objectives: dict[str, list[str]]  # Keyed by character or group; the goals they pursue.
    other: dict[str, list[str]]  # Anything important to the main story that fits no other part.


@dataclasses.dataclass
class BookSummary:
    """Keys can be anything you choose. The values summarize, in sentences, only the most important
    attributes of the book, including the essential details: the main characters and what motivates
    them, the main plot and events, background information, and the main theme."""

    attributes: dict[str, list[str]]


@dataclasses.dataclass
class FunctionDescription:
    """purpose says what the function does; input describes its parameters; output what it returns;
    procedure how it is implemented. Describe what you see in [TEXT]; do not repeat the description
    given in [QUESTION]."""

    purpose: str
    input: str
    output: str
    procedure: str


@dataclasses.dataclass
class FunctionNaturalDescriptor:
    """candidate_functions is keyed by the exact function name and holds FunctionDescription objects.
    Add one entry per function, method, property, getter or setter (anything defined with def) in
    [TEXT] that may match the description in [QUESTION]. Never add a function twice, only add
    functions similar to the description, and make very similar functions distinguishable."""

    candidate_functions: dict[str, FunctionDescription]


@dataclasses.dataclass
class TableDescription:
    """columns_observed gives the exact name and data type of each column seen in the table.
    relevant_statistics holds statistics computed for answering the query. relationships names the
    other tables related to this one that matter for the query."""

    table_name: str
    table_description: str
    columns_observed: list[str]
    relevant_statistics: list[str]
    relationships: list[str]


@dataclasses.dataclass
class RelevantTableInfo:
    """table_descriptions is a list of TableDescription objects, one per table."""

    table_descriptions: list[TableDescription]


@dataclasses.dataclass
class TableNotes:
    """table_description briefly summarizes the table. thoughts lists information from the table that
    helps answer the query. Refer to fields and columns by their exact names."""

    table_description: str
    thoughts: list[str]


@dataclasses.dataclass
class TableMemory:
    """table_descriptions is keyed by table name; the value describes that table. One per table."""

    table_descriptions: dict[str, TableNotes]


Facet = NewType("Facet", str)


class Comparison:
    """Compares two products facet by facet; each value pairs the first product's value with the second's."""

    product_names: tuple[str, str]
    values: dict[Facet, tuple[str, str]]


SUMIE_SUMMARY = Schema.from_class(Summary)
STORY_ELEMENTS = Schema.from_class(StoryElements)
BOOK_SUMMARY = Schema.from_class(BookSummary)
FUNCTION_NATURAL_DESCRIPTOR = Schema.from_class(FunctionNaturalDescriptor)
RELEVANT_TABLE_INFO = Schema.from_class(RelevantTableInfo)
TABLE_MEMORY = Schema.from_class(TableMemory)
COMPARISON = Schema.from_class(Comparison)
