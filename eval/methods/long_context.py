"""The long-context ceiling (seed 002, Table 2 "Long context"): the whole input in one prompt, where it fits.

The task's question and answer instruction are the ones PRISM asks (`memloop.eval.methods.answers`), the
chunks are joined in order, and the reply is read by the same contract, so every judge scores it
like the incremental methods. Where the request (prompt with the chat template, + `max_tokens`) cannot be
served, the ceiling does not exist for that model and sample: no call is made and the output is marked
not applicable (`MethodOutput.not_applicable`, recorded by the jobs layer as status "n/a"), never a
failure or a zero; its table cell is then a mean over its own sample set (the samples that fit), and
says so. One check decides: the LLM's own (`misfit(request)`, the engine's length check asked ahead),
and, where the LLM has none (an endpoint), prompt tokens + `max_tokens` against the `context_tokens`
setting, else what the LLM reports, else `DEFAULT_CONTEXT_TOKENS`. A `context_tokens` setting also
caps an engine (a smaller window than the engine's). The step memory records which check ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memloop.eval.asking import build_request
from memloop.eval.datasets.sample import Sample
from memloop.eval.methods import answers
from memloop.eval.methods.base import Method, MethodSettings, Trace
from memloop.eval.methods.procedure import Procedure, StepRule, from_settings
from memloop.eval.methods.registry import method
from memloop.eval.options import PositiveInt
from memloop.eval.templates import load_template

DEFAULT_CONTEXT_TOKENS = 8192  # SmolLM2's window, used when neither the settings nor the LLM give one
TEMPLATE = "s002-long-context"


@dataclass(frozen=True)
class LongContextSettings(MethodSettings):
    context_tokens: PositiveInt | None = None  # the model's window (prompt + output); None: ask the LLM


def context_window(settings_tokens: int | None, llm: Any) -> tuple[int, str]:
    """(context tokens, where the number came from)."""
    if settings_tokens is not None:
        return settings_tokens, "settings"
    reported = getattr(llm, "context_tokens", None)
    if isinstance(reported, int) and reported > 0:
        return reported, "llm"
    return DEFAULT_CONTEXT_TOKENS, "default"


@method("long-context")
class LongContext(Method):
    Settings = LongContextSettings
    tasks = answers.SUMMARY_TASKS + answers.QUERY_TASKS
    template_ids = (TEMPLATE, *answers.TEMPLATE_IDS, "mab-long-context")

    def procedure(self, task: str) -> Procedure:
        rule = StepRule(
            "none (one call over the whole input)",
            "n/a where the whole input does not fit the context",
            "kept as the answer",
            "the unit is n/a (not a failure) when the input does not fit",
        )
        return from_settings(self.settings, rule, compared=False)

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        tpl = load_template(TEMPLATE)
        text = "\n\n".join(c.strip("\n") for c in sample.chunks)
        prompt = tpl.render(
            question=answers.question(sample, self.name),
            text=text,
            answer_instruction=answers.answer_instruction(trace, sample.task),
        )
        why, fit = self._misfit(prompt, trace)
        if why is not None:
            trace.not_applicable = f"the whole input does not fit the model's context: {why}"
            return "", fit
        step = trace.ask_prompt(prompt, tpl, kind="final", chunk_index=len(sample.chunks) - 1)
        step.memory = fit
        return answers.read_answer(sample.task, step.output), fit

    def _misfit(self, prompt: str, trace: Trace, max_tokens: int | None = None) -> tuple[str | None, dict[str, Any]]:
        """(why the whole-input request cannot be served or None, what was checked); `max_tokens` is the
        request's output budget (default: the method's)."""
        s = self.settings
        out = max_tokens or s.max_tokens
        check = getattr(trace.llm, "misfit", None)
        if callable(check) and s.context_tokens is None:
            why = check(build_request(prompt, s.sampling(out)))
            return why, {"fit_check": "llm", "context_tokens": getattr(trace.llm, "context_tokens", None)}
        window, source = context_window(s.context_tokens, trace.llm)
        needed = trace.llm.count_tokens(prompt) + out
        fit = {"fit_check": "count", "needed_tokens": needed, "context_tokens": window, "context_source": source}
        if needed > window:
            return (f"{needed} tokens needed (prompt and max_tokens={out}) > context_tokens={window} ({source})"), fit
        if callable(check):  # a configured window below the engine's: the engine must take the request too
            why = check(build_request(prompt, s.sampling(out)))
            if why is not None:
                return why, dict(fit, fit_check="count and llm")
        return None, fit
