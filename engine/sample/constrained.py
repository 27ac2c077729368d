"""JSON-Schema constrained decoding behind one small interface (llguidance underneath).

llguidance compiles a schema into an Earley-parser matcher over the model's tokenizer and fills a
packed int32 token bitmask (32 tokens per word) for a whole batch in parallel from numpy, with no
torch. The engine uploads that bitmask and unpacks it inside its jitted sampler (see
`unpack_bitmask`), so masking costs one small host-to-device copy per step. Swapping in another
grammar library (e.g. xgrammar) means reimplementing `GrammarCompiler` and `Constraint` only.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import jsonschema
import numpy as np
from memloop.engine.errors import RequestError

# One canonical layout (json.dumps style, no free whitespace): a small model cannot pad its output
# with endless newlines, and the text is byte-stable for prefix caching. A schema's own
# "x-guidance" options still take precedence.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

# Bounds on a schema, checked without recursion before any library walks it: jsonschema's own
# check recurses several frames per level and overflows Python's stack near 200 levels.
MAX_SCHEMA_DEPTH = 64  # nested JSON objects/arrays
MAX_SCHEMA_NODES = 20_000  # JSON values in the schema


# The integers the grammar engine's integer ranges take (signed 64-bit); past 2**64 it reports "not JSON
# serializable", and between 2**63 and 2**64 it fails to build the range.
SCHEMA_INT_RANGE = (-(2**63), 2**63 - 1)


def check_schema_bounds(schema: Any) -> None:
    """RequestError when `schema` nests deeper than MAX_SCHEMA_DEPTH, holds over MAX_SCHEMA_NODES values,
    or an integer outside SCHEMA_INT_RANGE (naming its key)."""
    stack, nodes = [(schema, 1, "")], 0
    while stack:
        value, depth, key = stack.pop()
        nodes += 1
        if depth > MAX_SCHEMA_DEPTH:
            raise RequestError(f"json_schema nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it")
        if nodes > MAX_SCHEMA_NODES:
            raise RequestError(f"json_schema has over {MAX_SCHEMA_NODES} values; send a smaller schema")
        if isinstance(value, dict):
            stack.extend((v, depth + 1, str(k)) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1, key) for v in value)
        elif (
            isinstance(value, int)
            and not isinstance(value, bool)
            and not (SCHEMA_INT_RANGE[0] <= value <= SCHEMA_INT_RANGE[1])
        ):
            digits = len(str(abs(value))) if abs(value) < 10**4000 else "over 4000"  # str() refuses past 4300
            raise RequestError(
                f"json_schema's `{key[:60]}` is an integer of {digits} digits, beyond the 64-bit "
                "integers the grammar engine reads; write it within -2**63 .. 2**63-1, or as a "
                "float (e.g. 1e30)"
            )


def one_line(message: str, limit: int = 300) -> str:
    """A grammar-engine error as one line: its own lines joined, without the echo of the schema text
    (indented lines, which for a long pattern would be the whole pattern), cut to `limit` characters."""
    lines = [x.strip() for x in str(message).splitlines() if x.strip() and not x[:1].isspace()]
    text = " ".join(lines) or str(message).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pointer(ref: str) -> tuple[str, ...] | None:
    """The path of a local JSON pointer `#/a/b` (None for a remote or non-pointer reference)."""
    if ref == "#":
        return ()
    if not ref.startswith("#/"):
        return None
    return tuple(p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/"))


def check_schema_refs(schema: Any) -> None:
    """RequestError when a local `$ref` makes the schema recursive (`{"$ref": "#"}`, a definition that
    refers to itself or to one referring back): a grammar of a recursive schema either matches
    nothing useful or takes the grammar engine down paths with no end, so it is refused in one line."""
    refs: list[tuple[tuple[str, ...], str]] = []  # (path of the node holding $ref, the $ref)
    stack: list[tuple[Any, tuple[str, ...]]] = [(schema, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            if isinstance(value.get("$ref"), str):
                refs.append((path, value["$ref"]))
            stack.extend((v, path + (str(k),)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, path + (str(i),)) for i, v in enumerate(value))
    targets = {ref: t for _, ref in refs if (t := _pointer(ref)) is not None}
    # an edge T -> T2: the subschema at T holds a $ref to T2; a cycle is a recursive schema
    edges = {t: {targets[r] for p, r in refs if r in targets and p[: len(t)] == t} for t in targets.values()}
    for start, ref in ((t, r) for r, t in targets.items()):
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt == start:
                    raise RequestError(
                        f"json_schema is recursive: $ref {ref!r} leads back to a schema that "
                        "contains it; constrained decoding needs a finite schema, so expand the "
                        "recursion to a fixed depth"
                    )
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)


class Constraint:
    """The grammar state of one request: which tokens may come next, and whether it may stop."""

    def __init__(self, matcher: Any) -> None:
        self._m = matcher

    def consume(self, token: int) -> None:
        """Advance past a sampled token (the mask guarantees it is allowed)."""
        if not self._m.consume_token(int(token)):
            raise RequestError(f"constrained decoding rejected token {token}: {self._m.get_error()}")

    @property
    def done(self) -> bool:
        """The grammar is complete (the JSON value is closed and only end-of-sequence may follow)."""
        return bool(self._m.is_stopped())

    def rollback(self, n: int) -> None:
        self._m.rollback(n)


class GrammarCompiler:
    """Builds llguidance's tokenizer once per model and compiles schemas into `Constraint`s."""

    def __init__(
        self, hf_tokenizer: Any, vocab_size: int, eos_token_ids: Sequence[int] | None = None, threads: int | None = None
    ) -> None:
        import llguidance
        import llguidance.hf

        self.vocab_size = vocab_size
        eos = list(eos_token_ids) if eos_token_ids else None
        self.lltok = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size, eos_token=eos)
        self._executor = llguidance.LLExecutor(num_threads=threads)
        self._llg = llguidance
        self._grammars: dict[str, str] = {}

    @property
    def words(self) -> int:
        """int32 words per bitmask row."""
        return (self.vocab_size + 31) // 32

    def compile(self, schema: dict[str, Any]) -> Constraint:
        """A fresh matcher for `schema`; a schema that is not valid JSON Schema is a `RequestError`."""
        if not isinstance(schema, dict):
            raise RequestError("json_schema must be a JSON object (a JSON Schema); got " + type(schema).__name__)
        check_schema_bounds(schema)
        check_schema_refs(schema)
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise RequestError(f"json_schema is not a valid JSON Schema: {exc.message}") from None
        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is None:
            try:
                grammar = self._llg.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_STYLE)
            except ValueError as exc:
                raise RequestError(
                    f"json_schema cannot be compiled: {one_line(str(exc))}; rewrite that part of the schema"
                ) from None
            is_err, msgs = self._llg.LLMatcher.validate_grammar_with_warnings(grammar, self.lltok)
            if is_err:
                raise RequestError(
                    f"json_schema is not supported by the grammar engine: {one_line(msgs[0])}; "
                    "rewrite that part of the schema"
                )
            self._grammars[key] = grammar
        matcher = self._llg.LLMatcher(self.lltok, grammar, log_level=0)
        if matcher.is_error():
            raise RequestError(
                f"json_schema is not supported by the grammar engine: {one_line(matcher.get_error())}; "
                "rewrite that part of the schema"
            )
        return Constraint(matcher)

    def fill(self, constraints: Sequence[Constraint | None], bitmask: np.ndarray) -> None:
        """Write row i of `bitmask` ([rows, words] int32) for constraint i; rows without one allow all."""
        bitmask.fill(-1)
        todo = [(c._m, i) for i, c in enumerate(constraints) if c is not None]
        if todo:
            from llguidance.numpy import fill_next_token_bitmask_par

            fill_next_token_bitmask_par(self._executor, todo, bitmask)


def unpack_bitmask(bitmask: Any, vocab_size: int) -> Any:
    """[rows, words] packed int32 -> [rows, vocab] bool, inside jit (bit j of word w is token 32w+j)."""
    import jax.numpy as jnp

    bits = (bitmask[:, :, None] >> jnp.arange(32, dtype=jnp.int32)[None, None, :]) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].astype(bool)
