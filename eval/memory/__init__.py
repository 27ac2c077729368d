"""Structured memories: schemas, JSONPath revisions, in-place and amendments renderings, budgets.

The data structure shared by the structured methods (CoK, PRISM, GU/GM in JSON). Pure Python.

Schemas (a typed hierarchy, seed 002 definition 3.2)::

    schema = Schema.from_class(MyDataclassOrTypedDictOrPydanticModel)   # or Schema.from_text(llm_text)
    schema.class_text()        # Python class text for the prompt's [CLASS] section
    schema.json_schema()       # JSON Schema (2020-12) of a whole memory (partial objects, '???'/None allowed)
    schema.json_schema_at(p)   # JSON Schema of the value at a path
    schema.errors(memory)      # list of reasons, [] when valid
    schema.fingerprint         # short stable hash for run records
    schemas.SUMIE_SUMMARY, STORY_ELEMENTS, BOOK_SUMMARY, FUNCTION_NATURAL_DESCRIPTOR,
    RELEVANT_TABLE_INFO, TABLE_MEMORY, COMPARISON   # the papers' schemas, ready-made

Paths and revisions (seed 002 definition 3.4)::

    Path.parse("$. 'attributes'. 'Food & Beverage'")   # also $.attributes.Noise Level, $.a[0]
    Revision(path, "add" | "update", value)
    res = apply_revisions(memory, revisions, schema)   # -> ApplyResult(memory, applied, rejected)
    res.rejected[i].reason                             # input memory is never mutated
    apply_revision(memory, rev, schema)                # one revision; RevisionError on rejection

Model output formats::

    parse_cok(text)      # [UPDATED_OBJECTS] / [ADDED_OBJECTS]          -> ParsedRevisions(revisions, rejected)
    parse_prism(text)    # [OBJECTS FOR UPDATE] / [OBJECTS FOR ADD]
    revision_list_schema(schema, ops=("add", "update"))  # JSON Schema for constrained decoding
    parse_revision_list(text_or_obj)                      # its output -> ParsedRevisions
    render_cok(revisions), render_prism(revisions)        # the same formats, written

Renderings (byte-stable, for prefix caching)::

    render_in_place(memory)                   # canonical JSON
    Amendments(schema, base).revise(revs)     # appends only accepted revisions; .text(), .fold(), .from_text()
    render_amendments(base, revisions); parse_amendments(text); fold_amendments(text, schema)
    shared_prefix_chars(prev, next); shared_prefix_tokens(prev, next, encode=None)

Budgets (seed 000 appendix F)::

    memory_tokens(memory, count_tokens=None)  # default: tiktoken cl100k_base (offline)
    fit_to_budget(memory, k, schema, compress=fn(memory, k) -> memory, count_tokens=None, trim=False)
    trim_to_budget(memory, k, count_tokens=None)

Errors (all subclass memloop.eval.errors.MemoryError_): SchemaError, PathError, RevisionError,
RevisionParseError, LiteralParseError, BudgetError.
"""

from memloop.eval.memory.budget import (
    BudgetOutcome,
    cl100k_count,
    cl100k_encode,
    fit_to_budget,
    memory_tokens,
    trim_to_budget,
)
from memloop.eval.memory.errors import (
    BudgetError,
    LiteralParseError,
    PathError,
    RevisionError,
    RevisionParseError,
    SchemaError,
)
from memloop.eval.memory.formats import (
    ParsedRevisions,
    parse_cok,
    parse_prism,
    parse_revision_list,
    render_cok,
    render_prism,
    revision_list_schema,
)
from memloop.eval.memory.literal import loads as loads_lenient
from memloop.eval.memory.paths import Path
from memloop.eval.memory.render import (
    Amendments,
    fold_amendments,
    parse_amendments,
    render_amendments,
    render_in_place,
    render_revision,
    shared_prefix_chars,
    shared_prefix_tokens,
)
from memloop.eval.memory.revisions import ApplyResult, Rejection, Revision, apply_revision, apply_revisions, check
from memloop.eval.memory.schema import PLACEHOLDER, Schema

__all__ = [
    "Amendments",
    "ApplyResult",
    "BudgetError",
    "BudgetOutcome",
    "LiteralParseError",
    "PLACEHOLDER",
    "ParsedRevisions",
    "Path",
    "PathError",
    "Rejection",
    "Revision",
    "RevisionError",
    "RevisionParseError",
    "Schema",
    "SchemaError",
    "apply_revision",
    "apply_revisions",
    "check",
    "cl100k_count",
    "cl100k_encode",
    "fit_to_budget",
    "fold_amendments",
    "loads_lenient",
    "memory_tokens",
    "parse_amendments",
    "parse_cok",
    "parse_prism",
    "parse_revision_list",
    "render_amendments",
    "render_cok",
    "render_in_place",
    "render_prism",
    "render_revision",
    "revision_list_schema",
    "shared_prefix_chars",
    "shared_prefix_tokens",
    "trim_to_budget",
]
