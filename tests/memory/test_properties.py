"""Property tests over random schemas, memories and revision sequences."""

from __future__ import annotations

import copy
import json
import os

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from memloop.eval.memory import (
    Amendments,
    Path,
    Revision,
    Schema,
    apply_revisions,
    fold_amendments,
    parse_amendments,
    render_amendments,
    render_in_place,
    shared_prefix_chars,
)
from memloop.eval.memory.literal import loads

from tests.memory.strategies import KEYS, existing_paths, memories, schema_children, schema_descendants, schemas, values

# MEMLOOP_MEMORY_EXAMPLES=2000 runs a deeper search locally; the default keeps the suite fast.
EXAMPLES = int(os.environ.get("MEMLOOP_MEMORY_EXAMPLES", "120"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def draw_revision(data: st.DataObject, schema: Schema, memory: dict) -> Revision:
    """A revision that is often valid and often not: existing or new paths, typed or random values."""
    paths = existing_paths(memory)
    containers = [Path()] + [p for p in paths if isinstance(_get(memory, p), (dict, list))]
    new_paths = [c for p in containers for c in _safe_children(schema, memory, p)]
    kind = data.draw(
        st.sampled_from(
            ["update-existing", "add-new", "add-existing", "update-new", "junk-path", "add-deep", "update-deep"]
        )
    )
    if kind.endswith("-deep"):
        path = schema_descendants(schema, data.draw(st.sampled_from(containers)), data, data.draw(st.integers(1, 3)))
    elif kind in ("update-existing", "add-existing") and paths:
        path = data.draw(st.sampled_from(paths))
    elif kind in ("add-new", "update-new") and new_paths:
        path = data.draw(st.sampled_from(new_paths))
    else:
        path = Path(tuple(data.draw(st.lists(st.one_of(KEYS, st.integers(0, 3)), min_size=1, max_size=3))))
    op = "update" if kind.startswith("update") else "add"
    try:
        node = schema.node_at(path)
        typed = values(node, 1)
    except Exception:
        typed = st.none()
    junk = st.recursive(
        st.one_of(st.integers(), st.text(max_size=3), st.none()),
        lambda c: st.one_of(st.lists(c, max_size=2), st.dictionaries(KEYS, c, max_size=2)),
        max_leaves=4,
    )
    value = data.draw(st.one_of(typed, typed, junk))
    return Revision(path, op, value)


def _get(memory, path):
    cur = memory
    for s in path.segments:
        cur = cur[s]
    return cur


def _safe_children(schema, memory, path):
    try:
        return schema_children(schema, memory, path)
    except Exception:
        return []


@SETTINGS
@given(st.data())
def test_revision_sequences_keep_memory_valid_and_rejections_change_nothing(data):
    schema = data.draw(schemas())
    memory = data.draw(memories(schema))
    assert schema.errors(memory) == [], schema.errors(memory)
    state = memory
    applied = []
    for _ in range(data.draw(st.integers(1, 6))):
        rev = draw_revision(data, schema, state)
        before = copy.deepcopy(state)
        res = apply_revisions(state, [rev], schema)
        assert state == before  # the input is never mutated
        event(f"{rev.op} {'rejected' if res.rejected else 'applied'}")
        if res.rejected:
            assert res.memory == before and res.rejected[0].reason
        else:
            assert schema.errors(res.memory) == []
            applied.append(rev)
        state = res.memory
    # the whole sequence at once equals the step-by-step result
    assert apply_revisions(memory, applied, schema).memory == state
    # folding the amendments rendering (text) gives the same memory
    text = render_amendments(memory, applied)
    assert fold_amendments(text, schema) == state
    base, revs = parse_amendments(text)
    assert base == memory and revs == applied


@SETTINGS
@given(st.data())
def test_amendments_step_i_is_a_byte_prefix_of_step_i_plus_1(data):
    schema = data.draw(schemas())
    am = Amendments(schema, data.draw(memories(schema)))
    prev = am.text()
    for _ in range(data.draw(st.integers(1, 5))):
        am.revise([draw_revision(data, schema, am.fold())])
        nxt = am.text()
        assert nxt.startswith(prev)
        assert shared_prefix_chars(prev, nxt) == len(prev)
        prev = nxt


@SETTINGS
@given(st.data())
def test_in_place_rendering_is_canonical_json(data):
    schema = data.draw(schemas())
    memory = data.draw(memories(schema))
    text = render_in_place(memory)
    assert json.loads(text) == memory and loads(text) == memory
    assert render_in_place(json.loads(text)) == text  # byte-stable through a JSON round trip
    assert render_in_place(copy.deepcopy(memory)) == text


@SETTINGS
@given(schemas())
def test_class_text_parses_back_to_the_same_schema(schema):
    again = Schema.from_text(schema.class_text())
    assert again.root == schema.root
    assert again.json_schema() == schema.json_schema()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(KEYS, st.integers(0, 50)), max_size=5))
def test_path_text_round_trips_through_jsonpath_ng(segments):
    p = Path(tuple(segments))
    assert Path.parse(p.text) == p


def _unchanged_rejection(schema: Schema, memory: dict, rev: Revision) -> str:
    before = copy.deepcopy(memory)
    res = apply_revisions(memory, [rev], schema)
    assert memory == before and res.memory == before and not res.applied
    assert len(res.rejected) == 1 and res.rejected[0].reason
    return res.rejected[0].reason


@SETTINGS
@given(st.data())
def test_each_kind_of_invalid_revision_is_rejected_with_its_reason(data):
    schema = data.draw(schemas())
    memory = data.draw(memories(schema))
    paths = existing_paths(memory)
    containers = [Path()] + [p for p in paths if isinstance(_get(memory, p), (dict, list))]
    new_paths = [c for p in containers for c in _safe_children(schema, memory, p)]
    if new_paths:  # update of a path that does not exist
        reason = _unchanged_rejection(schema, memory, Revision(data.draw(st.sampled_from(new_paths)), "update", None))
        assert "does not exist" in reason and "use 'add'" in reason
    appendable = [p for p in paths if isinstance(_get(memory, p), list)]
    fixed = [p for p in paths if p not in appendable]
    if fixed:  # add at an existing path (that is not a list one could append to)
        p = data.draw(st.sampled_from(fixed))
        reason = _unchanged_rejection(schema, memory, Revision(p, "add", _get(memory, p)))
        assert "already exists" in reason
    # a field the schema does not define
    reason = _unchanged_rejection(schema, memory, Revision(Path(("no such field",)), "add", 1))
    assert "leaves the schema" in reason and "no such field" in reason
    # a value of the wrong type: an object where the schema wants a number/string/list, etc.
    typed = [p for p in paths + new_paths if _is_typed_leaf_or_list(schema, p)]
    if typed:
        p = data.draw(st.sampled_from(typed))
        op = "update" if p in paths else "add"
        # no type of the strategies admits a list mixing a list, a string, a float and an object
        reason = _unchanged_rejection(schema, memory, Revision(p, op, {"k": [[True], "s", 1.5, {"a": 1}, False]}))
        assert "expects" in reason


def _is_typed_leaf_or_list(schema: Schema, path: Path) -> bool:
    from memloop.eval.memory.types import EnumOf, ListOf, Prim, TupleOf, strip_none

    try:
        node = strip_none(schema.node_at(path))
    except Exception:
        return False
    return isinstance(node, (ListOf, TupleOf, EnumOf)) or (isinstance(node, Prim) and node.kind not in ("Any", "None"))


@SETTINGS
@given(st.data())
def test_malformed_revision_text_is_rejected_and_the_rest_is_kept(data):
    from memloop.eval.memory import parse_prism, render_prism

    schema = data.draw(schemas())
    memory = data.draw(memories(schema))
    revs = [draw_revision(data, schema, memory) for _ in range(data.draw(st.integers(1, 4)))]
    text = render_prism(revs)
    lines = text.split("\n")
    body_lines = [i for i, l in enumerate(lines) if l.startswith('{"')]
    broken = data.draw(st.sampled_from(body_lines))
    cut = data.draw(st.integers(2, max(2, len(lines[broken]) - 2)))
    lines[broken] = lines[broken][:cut] + " ]]oops"  # damage one line
    parsed = parse_prism("\n".join(lines))
    assert len(parsed.rejected) == 1 and parsed.rejected[0].raw
    assert len(parsed.revisions) == len(revs) - 1


SEG_TEXT = st.one_of(
    KEYS.map(lambda k: ". '" + k.replace("\\", "\\\\").replace("'", "\\'") + "'"),
    KEYS.map(lambda k: ".'" + k.replace("\\", "\\\\").replace("'", "\\'") + "'"),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True).map(lambda k: "." + k),
    st.integers(0, 999).map(lambda i: f"[{i}]"),
    st.sampled_from([".where", ". 'where'", "[01]", ".a b", ". 'x'.", "[*]", "..y", ".'unterminated"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(SEG_TEXT, min_size=1, max_size=4))
def test_fast_path_reader_agrees_with_jsonpath_ng(parts):
    from memloop.eval.memory.errors import PathError
    from memloop.eval.memory.paths import _fast_parse, _jsonpath_ng_parse

    text = "$" + "".join(parts)
    fast = _fast_parse(text)
    try:
        slow = _jsonpath_ng_parse(text)
    except PathError:
        slow = None
    if fast is not None:
        assert fast == slow, text
