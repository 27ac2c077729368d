"""The method frame: one sample in, a final answer plus a trace of every LLM step out.

Every LLM call goes through `Trace.ask`, which renders a template, asks through `memloop.eval.asking.ask`
(schema-constrained output when the LLM supports it, otherwise the free text is parsed and the same
request retried with a fresh seed, bounded), and records one `Step` (`memloop.eval.methods.step`) with the
prompt, output, parsed value, memory after the step, its outcome (`memloop.eval.methods.outcomes`), token
usage and failures. A step's `usage` is its kept (last) attempt's, what the papers count;
`retry_usage` the rejected attempts before it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Literal

from memloop.eval.asking import ParseFailure, ask, reseed
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.llm import LLM, Usage, usage_sum
from memloop.eval.methods.outcomes import call_outcome
from memloop.eval.methods.procedure import Procedure, StepRule, from_settings
from memloop.eval.methods.step import Step, unit_failure
from memloop.eval.options import MaxTokens, PositiveInt, Seed, Temperature, TopK, TopP, check_settings
from memloop.eval.templates import Template, load_template
from memloop.eval.templates import template_hashes as _template_hashes

from memloop.sampling import DEFAULT_MAX_TOKENS, SamplingParams

__all__ = ["Method", "MethodOutput", "MethodSettings", "NOT_RUN", "ParseFailure", "Trace"]

NOT_RUN = "not run: "  # the start of a unit's error when its method could not start (MethodOutput.not_run)


# Tasks whose samples a method runs under a protocol of their own rather than its own loop alone
# (task -> run(method, sample, llm)); `memloop.eval.methods` registers them, so this frame imports none of them.
PROTOCOLS: dict[str, Callable[["Method", Sample, LLM], "MethodOutput"]] = {}


@dataclass
class MethodOutput:
    method: str
    sample_id: str
    answer: str
    steps: list[Step]
    memory: Any = None
    settings: dict[str, Any] = field(default_factory=dict)
    templates: dict[str, str] = field(default_factory=dict)  # template id -> sha256 actually used
    # why the method does not apply to this sample (e.g. the whole input exceeds the model's context for
    # the long-context ceiling): no answer to score, recorded as "n/a", never as a failure or a zero
    not_applicable: str | None = None
    # why the method could not start on this sample (e.g. no generated schema parsed): the unit failed for
    # a cause outside its own steps' work, recorded as `NOT_RUN` + cause, which a table shows as such
    not_run: str | None = None

    @property
    def usage(self) -> Usage:
        return usage_sum(s.usage for s in self.steps)

    @property
    def retry_usage(self) -> Usage:
        return usage_sum(s.retry_usage for s in self.steps)

    @property
    def failures(self) -> list[str]:
        return [f"step {s.index} ({s.kind}): {f}" for s in self.steps for f in s.failures]

    @property
    def failure(self) -> str | None:
        """Why the unit failed: none of its steps succeeded or produced anything (None: it did not)."""
        if self.not_applicable:
            return None
        return NOT_RUN + self.not_run if self.not_run else unit_failure(self.steps)


@dataclass(frozen=True)
class MethodSettings:
    """Settings shared by every method: the sampling ones first (a request's defaults, bounded by
    `memloop.sampling.check`), then these; method-specific ones extend this dataclass. They are the values
    the method ran with, as its record shows them; the run's `sampling:` overrides are laid over a method's
    defaults before it is made (`memloop.jobs.run.methods.method_settings`)."""

    max_tokens: MaxTokens = DEFAULT_MAX_TOKENS
    temperature: Temperature = 0.0
    top_k: TopK = 0
    top_p: TopP = 1.0
    seed: Seed | None = None
    max_attempts: PositiveInt = 3  # parse-and-retry bound (attempts per step, the first included)
    # retries sample at least this hot with a fresh seed: a greedy retry would repeat the rejected answer
    retry_temperature: Temperature = 0.7
    # what the method's token budgets (K, summary limits, merge packing) count in: the LLM's own tokenizer,
    # or cl100k_base as seed 000 (appendix D) and the official BooookScore code count; checks against the
    # model's window (`LLM.count_tokens`) stay in the model's tokens
    count_tokens: Literal["model", "cl100k"] = "model"

    def sampling(self, max_tokens: int | None = None, stop: tuple[str, ...] = ()) -> SamplingParams:
        """A request's sampling: these settings, with a step's own output cap and stop strings laid over them."""
        own = SamplingParams(
            max_tokens=self.max_tokens, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, seed=self.seed
        )
        return own.merge({"max_tokens": max_tokens or None, "stop": stop})


class Trace:
    """Per-run recorder: issues the LLM calls of one sample and keeps their steps."""

    def __init__(self, llm: LLM, settings: MethodSettings, judge: LLM | None = None) -> None:
        self.llm = llm
        self.judge = judge  # the run's judge model, for a method step that the paper gave a stronger model
        self.settings = settings
        self.steps: list[Step] = []
        self.templates: dict[str, str] = {}
        self.not_applicable: str | None = None  # set by a method that finds it cannot apply to the sample
        self.not_run: str | None = None  # set by a method that could not start (MethodOutput.not_run)

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` for the method's budgets, in the tokenizer `settings.count_tokens` names."""
        if self.settings.count_tokens == "cl100k":
            from memloop.eval.tokens import cl100k_count

            return cl100k_count(text)
        return self.llm.count_tokens(text)

    def ask(
        self,
        template: str | Template,
        values: dict[str, Any],
        *,
        kind: str,
        parse: Callable[[str], Any] | None = None,
        schema: dict[str, Any] | None = None,
        chunk_index: int | None = None,
        max_tokens: int | None = None,
        stop: tuple[str, ...] = (),
        raw_prompt: bool = False,
        llm: LLM | None = None,
        max_attempts: int | None = None,
        temperature: float | None = None,
        retry_values: Callable[[int], dict[str, Any]] | None = None,
    ) -> Step:
        """Render, call, parse with bounded retries; returns the recorded step (step.ok says if parsed).
        `llm` asks another model than the one under test (default: the model under test).

        `parse` maps output text to the parsed value or raises `memloop.eval.asking.ParseFailure`. With a schema and an
        LLM that supports it, the output is constrained and parsed once (a failure is still recorded).
        `raw_prompt` sends a completion prompt instead of a chat message (tool transcripts).
        `max_attempts` and `temperature` override the settings' for this one call (a method whose paper
        fixes them for one kind of step, e.g. the official incremental updating's single try).
        `retry_values(attempt)` are the template's values for 0-based retry `attempt` > 0 where a retry
        asks differently (the official hierarchical merging's lower word limit per retry).
        """
        tpl = load_template(template) if isinstance(template, str) else template
        prompt = tpl.render(**values)
        reprompt = (lambda attempt: tpl.render(**retry_values(attempt))) if retry_values is not None else None
        return self.ask_prompt(
            prompt,
            tpl,
            kind=kind,
            parse=parse,
            schema=schema,
            chunk_index=chunk_index,
            max_tokens=max_tokens,
            stop=stop,
            raw_prompt=raw_prompt,
            llm=llm,
            max_attempts=max_attempts,
            temperature=temperature,
            reprompt=reprompt,
        )

    def ask_prompt(
        self,
        prompt: str,
        tpl: Template,
        *,
        kind: str,
        parse: Callable[[str], Any] | None = None,
        schema: dict[str, Any] | None = None,
        chunk_index: int | None = None,
        max_tokens: int | None = None,
        stop: tuple[str, ...] = (),
        raw_prompt: bool = False,
        llm: LLM | None = None,
        max_attempts: int | None = None,
        temperature: float | None = None,
        reprompt: Callable[[int], str] | None = None,
    ) -> Step:
        self.templates[tpl.id] = tpl.sha256
        sampling = self.settings.sampling(max_tokens, stop).merge({"temperature": temperature})
        attempts = self.settings.max_attempts if max_attempts is None else max_attempts
        started = time.time()
        answer = ask(
            llm or self.llm,
            prompt,
            sampling,
            parse=parse,
            schema=schema,
            max_attempts=max(1, attempts),
            retry=reseed(self.settings.retry_temperature),
            raw_prompt=raw_prompt,
            reprompt=reprompt,
        )
        finished = time.time()
        failures = [
            f"attempt {a.number}: {a.reason}" + (" (output hit max_tokens)" if a.cut else "") for a in answer.failures
        ]
        step = Step(
            index=len(self.steps),
            kind=kind,
            template_id=tpl.id,
            template_sha256=tpl.sha256,
            prompt=answer.prompt or prompt,
            output=answer.text,
            parsed=answer.parsed,
            usage=kept_usage(answer.usage, answer.retry_usage),
            attempts=answer.attempts,
            failures=failures,
            chunk_index=chunk_index,
            ok=answer.ok,
            outcome=call_outcome(answer.ok, answer.cut, answer.parsed if parse is not None else answer.text),
            retry_usage=answer.retry_usage,
            cut=answer.cut,
            started_at=started,
            finished_at=finished,
        )
        self.steps.append(step)
        return step


def kept_usage(total: Usage, retries: Usage) -> Usage:
    """The kept attempt's usage: every attempt's less the rejected ones'."""
    return Usage(
        total.prompt_tokens - retries.prompt_tokens,
        total.cached_tokens - retries.cached_tokens,
        total.decoded_tokens - retries.decoded_tokens,
    )


class Method:
    """Base class: subclasses set `name`, `template_ids`, `Settings` and implement `_run`."""

    name: ClassVar[str] = ""
    template_ids: ClassVar[tuple[str, ...]] = ()
    Settings: ClassVar[type[MethodSettings]] = MethodSettings
    tasks: ClassVar[tuple[str, ...] | None] = None  # sample tasks this method accepts (None: any)
    # the memory step as the procedure card shows it (`procedure`); a method whose step does more says so
    step_rule: ClassVar[StepRule] = StepRule()

    def __init__(self, **settings: Any) -> None:
        self.settings = check_settings(self.Settings, settings, f"method {self.name!r}", MethodError)
        self._validate()

    def _validate(self) -> None:
        """Subclasses check their settings here and raise MethodError with what to change."""

    def procedure(self, task: str) -> Procedure:
        """This method's memory step on `task` as its code applies it (`memloop.eval.methods.procedure`): the
        settings `Trace.ask` reads and the class's `step_rule`. A method that applies other values overrides
        this with the accessors its own code calls."""
        return from_settings(self.settings, self.step_rule)

    def asks_judge(self) -> bool:
        """Whether a step of this method asks the run's judge model (the run then starts its judge engine)."""
        return False

    def run(self, sample: Sample, llm: LLM, judge: LLM | None = None) -> MethodOutput:
        """Run on `sample` with `llm`, the model under test; `judge` is the run's judge model, which a
        method may use for a step its paper gave a stronger model (None: the model under test)."""
        protocol = PROTOCOLS.get(sample.task)
        if protocol is not None:  # e.g. MemoryAgentBench: one context, many questions (memloop.eval.methods.ask_many)
            return protocol(self, sample, llm)
        if self.tasks is not None and sample.task not in self.tasks:
            raise MethodError(
                f"method {self.name!r} handles tasks {list(self.tasks)}, not {sample.task!r} "
                f"(sample {sample.id}); pick a method made for that task"
            )
        if not sample.chunks:
            raise MethodError(f"sample {sample.id} has no chunks; check the dataset loader and chunk size")
        trace = Trace(llm, self.settings, judge)
        answer, memory = self._run(sample, trace)
        return MethodOutput(
            method=self.name,
            sample_id=sample.id,
            answer=answer,
            steps=trace.steps,
            memory=memory,
            settings=asdict(self.settings),
            templates=dict(trace.templates),
            not_applicable=trace.not_applicable,
            not_run=trace.not_run,
        )

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        raise NotImplementedError

    @classmethod
    def template_hashes(cls) -> dict[str, str]:
        """{template id: sha256} of every template this method may render (hashed into the run id)."""
        return _template_hashes(cls.template_ids)
