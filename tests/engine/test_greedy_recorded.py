"""The engine's greedy outputs on the bundled SmolLM2 are exactly what was recorded
(tests/engine/data/greedy-smollm2.json, written by tests/engine/record_greedy.py before engine/ was
split into floors): the serving engine's texts and finish reasons, and the reference decoder's token ids.
A refactor of engine/ must keep this; a change to what the engine computes re-records it on purpose."""

from __future__ import annotations

import json

from tests.engine.record_greedy import RECORD, greedy_outputs


def test_greedy_outputs_match_the_recorded_run(smollm2_engine, lm) -> None:
    recorded = json.loads(RECORD.read_text())
    got = greedy_outputs(smollm2_engine, lm)
    assert got["served"] == recorded["served"], "served outputs changed; if on purpose, re-record"
    assert got["reference"] == recorded["reference"], "reference decoder changed; if on purpose, re-record"
