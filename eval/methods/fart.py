"""Seed 004 (F-ART): summarise chunk by chunk with a key-value tool memory.

The model continues a transcript `Q1: [tool] ...`, we stop it at the end of the tool call, run the
tool against this sample's store and append `#k: result` and `Qk+1:`. [EOQ] ends a chunk; on the
last chunk [ans] gives the summary. The paper sets no limit on tool calls: `max_tool_calls` is only
a safety bound against a model that never ends a chunk (64, far above the ~2 calls per stored note
a last chunk needs), recorded as a failure when hit; when the last chunk ends without [ans] we append
`[ans]` ourselves and let the model write the answer (recorded as a failure).

Instructions follow the paper: the first and last chunks get one (store notes under keys that say
what they hold; read all stored information and answer), middle chunks none. Generation stops at the
transcript's own next markers (`\n#k:`, `\nQk+1:`), so a note with a line starting "Q" or "#" is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from memloop.eval.asking import ParseFailure
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.methods.base import Method, MethodSettings, Trace
from memloop.eval.methods.outcomes import StepOutcome
from memloop.eval.methods.registry import method
from memloop.eval.options import MaxTokens, PositiveInt
from memloop.eval.templates import load_template

_CALL = re.compile(r"^\s*\[(read|write|list-keys|ans|EOQ|E0Q)\]\s*(.*)$", re.S | re.I)
_WRITE = re.compile(r"^\((.+?)\)\s*(.*)$", re.S)
_WRITE_COLON = re.compile(r"^([\w.-]+):\s*(.+)$", re.S)  # `[write] key: text`, a common small-model variant
_ECHO = re.compile(r"^\s*Q\d+:\s*")  # the model repeating the `Qk:` it was given
END_STOPS = ("\nInput:", "----END")


def stops(q: int) -> tuple[str, ...]:
    """Stop sequences of the q-th call: the result marker it would be given and the next question."""
    return (f"\n#{q}:", f"\nQ{q + 1}:", *END_STOPS)


@dataclass(frozen=True)
class FartSettings(MethodSettings):
    max_tool_calls: PositiveInt = 64  # per chunk: a safety bound, not a limit of the method (none in the paper)
    max_tokens: MaxTokens = 400


def parse_call(text: str) -> dict[str, str]:
    """`[write] (key) text` -> {"tool": "write", "key": ..., "value": ...} etc.; ParseFailure otherwise."""
    first = _ECHO.sub("", text.strip())
    m = _CALL.match(first)
    if not m:
        raise ParseFailure(f"expected a tool call [read]/[write]/[list-keys]/[ans]/[EOQ], got {first[:60]!r}")
    tool, arg = m.group(1).lower(), m.group(2).strip()
    if tool in ("eoq", "e0q"):
        return {"tool": "EOQ"}
    if tool == "write":
        w = _WRITE.match(arg) or _WRITE_COLON.match(arg)
        if not w or not w.group(2).strip():
            raise ParseFailure("[write] needs `(key) text`")
        return {"tool": "write", "key": w.group(1).strip(), "value": w.group(2).strip()}
    if tool == "read":
        if not arg:
            raise ParseFailure("[read] needs a key")
        return {"tool": "read", "key": arg.splitlines()[0].strip().strip("()")}
    if tool == "ans":
        if not arg:
            raise ParseFailure("[ans] needs the summary text")
        return {"tool": "ans", "value": arg}
    return {"tool": "list-keys"}


def render_call(call: dict[str, str]) -> str:
    tool = call["tool"]
    if tool == "write":
        return f"[write] ({call['key']}) {call['value']}"
    if tool == "read":
        return f"[read] {call['key']}"
    if tool == "ans":
        return f"[ans] {call['value']}"
    return f"[{tool}]"


class _Fart(Method):
    Settings = FartSettings
    tasks = ("arxiv", "book")  # summarisation of long documents
    template: ClassVar[str] = ""

    def _validate(self) -> None:
        if self.settings.max_tool_calls < 1:
            raise MethodError(f"{self.name}: max_tool_calls must be at least 1")

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        store: dict[str, str] = {}
        n = len(sample.chunks)
        answer = ""
        for i, chunk in enumerate(sample.chunks):
            last = i == n - 1
            which = "only" if n == 1 else ("first" if i == 0 else ("last" if last else None))
            instructions = ""
            if which is not None:  # the paper instructs the first and last chunks only
                instr = load_template(f"s004-instr-{which}")
                trace.templates[instr.id] = instr.sha256
                instructions = instr.text.strip()
            tpl = load_template(self.template)
            transcript = tpl.render(instructions=instructions, i=i + 1, n=n, text=" ".join(chunk.split())).rstrip()
            transcript = transcript.replace("now.  Here", "now. Here")  # no instruction: no double space
            got = self._chunk(trace, tpl, transcript, store, i, last)
            if last:
                answer = got
        return answer, dict(store)

    def _chunk(self, trace: Trace, tpl: Any, transcript: str, store: dict[str, str], i: int, last: bool) -> str:
        wrote = False  # a chunk that ends without a [write] leaves no note of itself
        for q in range(1, self.settings.max_tool_calls + 1):
            step = trace.ask_prompt(
                transcript, tpl, kind="tool", parse=parse_call, chunk_index=i, stop=stops(q), raw_prompt=True
            )
            if not step.ok:
                step.memory = dict(store)
                step.failures.append("no usable tool call; chunk ended")
                break
            call = step.parsed
            failures = len(step.failures)
            result = self._execute(call, store, last, step)
            wrote = wrote or call["tool"] == "write"
            if len(step.failures) > failures:
                step.outcome = StepOutcome.TOOL_ERROR
            step.parsed = {**call, "result": result}
            step.memory = dict(store)
            if call["tool"] == "ans" and last:
                return call["value"]
            if call["tool"] == "EOQ":
                if last:
                    step.failures.append("[EOQ] on the last chunk instead of [ans]")
                    step.outcome = StepOutcome.TOOL_ERROR
                    break
                if not wrote:
                    step.failures.append(f"chunk {i + 1} ended without a [write]")
                    step.outcome = StepOutcome.EMPTY
                return ""
            transcript += f" {render_call(call)}\n#{q}: {result}\nQ{q + 1}:"
        else:
            trace.steps[-1].failures.append(
                f"chunk {i + 1} hit the safety bound of {self.settings.max_tool_calls} tool calls (max_tool_calls)"
            )
            trace.steps[-1].outcome = StepOutcome.TOOL_CALL_CAP
            q = self.settings.max_tool_calls + 1
        if not last:
            return ""
        # degrade: ask for the answer directly after the transcript so far
        transcript += " [ans]"
        step = trace.ask_prompt(transcript, tpl, kind="final", chunk_index=i, stop=stops(q), raw_prompt=True)
        step.failures.append("the model did not give [ans] on the last chunk; the answer was requested directly")
        if step.outcome == StepOutcome.OK:  # an empty forced answer stays `empty`
            step.outcome = StepOutcome.FORCED_BY_HARNESS
        step.memory = dict(store)
        return step.output.strip()

    @staticmethod
    def _execute(call: dict[str, str], store: dict[str, str], last: bool, step: Any) -> str:
        tool = call["tool"]
        if tool == "write":
            store[call["key"]] = call["value"]
            return ""
        if tool == "read":
            if call["key"] not in store:
                step.failures.append(f"[read] of missing key {call['key']!r}")
                return f"(no entry named {call['key']})"  # the paper's [read] returns what is stored, nothing more
            return store[call["key"]]
        if tool == "list-keys":
            return ", ".join(store) if store else "(empty)"
        if tool == "ans" and not last:
            step.failures.append("[ans] before the last chunk was ignored")
            return "(not the last chunk: store notes with [write] and finish with [EOQ])"
        return ""


_INSTR = ("s004-instr-first", "s004-instr-last", "s004-instr-only")


@method("fart-base")
class FartBase(_Fart):
    template = "s004-fart-base"
    template_ids = (template,) + _INSTR


@method("fart-compressed")
class FartCompressed(_Fart):
    template = "s004-fart-compressed"
    template_ids = (template,) + _INSTR


@method("fart-rolling")
class FartRolling(_Fart):
    template = "s004-fart-rolling"
    template_ids = (template,) + _INSTR
