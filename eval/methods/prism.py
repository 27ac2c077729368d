"""Seed 002 PRISM: a typed-hierarchy memory revised by (path, add|update, value) proposals.

The prompt is (instructions+examples, question, schema class, memory, chunk): everything before
the memory is identical across steps and the memory precedes the chunk, so consecutive prompts share
a prefix. In-place memories re-render the revised JSON; amendments memories append one line per
accepted revision, so the previous memory text stays a prefix of the next. `updates=False` is the
add-only ablation. `generate_schema=True` uses an LLM-generated schema (section 3.4): one per task and model, made from
the task's query domain and example query and reused for every sample (`generated_schema`); if no
answer parses, every sample records the failure and answers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.llm import Usage
from memloop.eval.memory import Amendments, Schema, apply_revisions, parse_prism, render_in_place
from memloop.eval.memory import schemas as ready
from memloop.eval.methods import answers
from memloop.eval.methods import generated_schema as generated
from memloop.eval.methods.base import Method, MethodSettings, Trace, kept_usage
from memloop.eval.methods.outcomes import StepOutcome
from memloop.eval.methods.procedure import StepRule
from memloop.eval.methods.registry import method
from memloop.eval.methods.step import Step, record_revisions
from memloop.eval.methods.structured import constrained_schema, record_failures, revision_parser
from memloop.eval.options import MaxTokens, PositiveInt, Seed
from memloop.eval.templates import load_template

SCHEMAS: dict[str, Schema] = {
    "sumie_summary": ready.SUMIE_SUMMARY,
    "story_elements": ready.STORY_ELEMENTS,
    "book_summary": ready.BOOK_SUMMARY,
    "function_natural_descriptor": ready.FUNCTION_NATURAL_DESCRIPTOR,
    "relevant_table_info": ready.RELEVANT_TABLE_INFO,
    "table_memory": ready.TABLE_MEMORY,
}
TASK_SCHEMA = {
    "book": "book_summary",
    "arxiv": "book_summary",
    "repoqa": "function_natural_descriptor",
    "spider": "relevant_table_info",
    "sumie": "sumie_summary",
    "memoryagentbench": "sumie_summary",
}  # attributes of anything: facts, events, labels
# query domains for LLM-generated schemas (seed 002, appendix C), in our words
DOMAINS = {
    "book": "Summarizing very long narrative books; each document is a segment of the book. The story may be "
    "non-linear, with flashbacks or switches between worlds or viewpoints, so the memory must keep a "
    "consistent, chronological narrative. Key events, backgrounds, settings, characters, their objectives "
    "and motivations matter.",
    "repoqa": "Retrieving the exact name of a function from a query describing its purpose, input, output and "
    "procedure. Documents are code files. The memory should tell how well each function matches.",
    "spider": "Answering queries over SQL tables given as text; a query may need reasoning over several tables.",
    "sumie": "Summarizing details about entities (people, things, institutions) found in online documents.",
}
DOMAINS["arxiv"] = "Summarizing long scientific articles; each document is a consecutive part of the article."
# example queries of each task for LLM-generated schemas: the paper shows the LLM one example query of
# the task (appendix C), never the query of the sample being answered
EXAMPLE_QUERIES = {
    "book": "Summarize this book excerpt. Briefly introduce characters, places and other major elements when "
    "they are first mentioned.",
    "arxiv": "Summarize this article: its problem, method, main results and conclusions.",
    "repoqa": "Find the exact name of the function described by the following function description.\n"  # RepoQA's form
    "1. Purpose: builds the string that separates paragraphs, optionally with a page break.\n"
    "2. Input: the number of blank lines, whether to add a page break, and the line break character.\n"
    "3. Output: the separator string.\n"
    "4. Procedure: repeats the line break the given number of times and inserts the page break when asked.",
    "spider": "How many singers are there in total?",
    "sumie": "Describe attributes and values of HOTEL0.",
}
SCHEMA_TEMPLATE = generated.TEMPLATE


@dataclass(frozen=True)
class PrismSettings(MethodSettings):
    updates: bool = True  # False: the add-only ablation
    schema: str | None = None  # a ready schema name (see SCHEMAS); default by task
    generate_schema: bool = False  # ask the LLM for the task's schema (once per task and model)
    schema_domain: str | None = None  # generated schema: the query domain (default by task, DOMAINS)
    schema_example_query: str | None = None  # generated schema: the example query (default EXAMPLE_QUERIES)
    # generated schema: its sampling seed, the same for every repeat (one schema per task and model,
    # section 3.4; the repeat's `seed` would make one per repeat and table 4 an average of five schemas)
    schema_seed: Seed = 0
    # generated schema: attempts before the task's cell is given up as not run (the paper used one schema
    # that worked; each rejected attempt is recorded on the schema step)
    schema_attempts: PositiveInt = 10
    # "text": the paper's [OBJECTS FOR UPDATE] / [OBJECTS FOR ADD] lines, parsed line by line (appendix C);
    # "constrained": {"revisions": [...]} held to a JSON schema by the model server, with a prompt that
    # describes that form (the server must support JSON-schema decoding)
    decoding: Literal["text", "constrained"] = "text"
    max_revisions: PositiveInt | None = None  # cap on revisions per step under constrained decoding
    max_tokens: MaxTokens = 1024


class _Prism(Method):
    Settings = PrismSettings
    amendments: ClassVar[bool] = False
    step_rule = StepRule(
        "revise",
        "no revisions section parses ([OBJECTS FOR UPDATE] / [OBJECTS FOR ADD] lines, or the JSON "
        "revision list); a revision off the schema is rejected alone",
        "the complete revisions before the cut are kept (the cut one is dropped)",
        "no revision is applied; the memory stays as it was",
    )
    template_ids = (
        "s002-prism-revise",
        "s002-prism-revise-addonly",
        "s002-prism-revise-json",
        "s002-prism-revise-addonly-json",
        "s002-amendments-note",
        "s002-prism-final",
        *answers.TEMPLATE_IDS,
        "s002-schema-gen",
        "mab-answer-memory",
    )

    def _validate(self) -> None:
        s = self.settings
        if s.schema is not None and s.schema not in SCHEMAS:
            raise MethodError(f"{self.name}: unknown schema {s.schema!r}; choose one of {sorted(SCHEMAS)}")
        if s.max_revisions is not None and s.max_revisions < 1:
            raise MethodError(f"{self.name}: max_revisions must be at least 1 (or null for no cap)")
        if s.max_revisions is not None and s.decoding != "constrained":
            raise MethodError(
                f"{self.name}: max_revisions caps the JSON revision list of constrained decoding; "
                "set decoding: constrained or remove max_revisions"
            )
        if s.schema is not None and s.generate_schema:
            raise MethodError(f"{self.name}: set either schema or generate_schema, not both")
        if not s.generate_schema and (s.schema_domain is not None or s.schema_example_query is not None):
            raise MethodError(
                f"{self.name}: schema_domain and schema_example_query apply to generated schemas; "
                "set generate_schema: true or remove them"
            )

    # --- schema and question -------------------------------------------------------------------------
    def _schema(self, sample: Sample, trace: Trace) -> Schema | None:
        """The hand-made schema, or the task's generated one (None: generation failed, recorded on the trace)."""
        if not self.settings.generate_schema:
            name = self.settings.schema or TASK_SCHEMA.get(sample.task)
            if name is None:
                raise MethodError(
                    f"{self.name}: no default schema for task {sample.task!r}; set `schema` to one of "
                    f"{sorted(SCHEMAS)} or generate_schema: true"
                )
            return SCHEMAS[name]
        domain = self.settings.schema_domain or DOMAINS.get(sample.task)
        example = self.settings.schema_example_query or EXAMPLE_QUERIES.get(sample.task)
        if not domain or not example:
            raise MethodError(
                f"{self.name}: no query domain or example query for task {sample.task!r}; set "
                "`schema_domain` and `schema_example_query` in the method settings"
            )
        s = self.settings
        sampling = replace(s.sampling(), seed=s.schema_seed)
        key = (
            sample.task,
            trace.llm.name,
            domain,
            example,
            load_template(SCHEMA_TEMPLATE).sha256,
            sampling,
            s.schema_attempts,
        )
        gen, made_here = generated.SCHEMAS.get(
            key, lambda: generated.generate_schema(trace.llm, domain, example, sampling, s.schema_attempts)
        )
        # Every sample records the schema step; only the sample whose call generated it carries the usage,
        # so the run's token totals count the one generation once.
        step = Step(
            index=len(trace.steps),
            kind="schema",
            template_id=gen.template.id,
            template_sha256=gen.template.sha256,
            prompt=gen.prompt,
            output=gen.output,
            parsed=gen.schema.class_text() if gen.schema is not None else None,
            usage=kept_usage(gen.usage, gen.retry_usage) if made_here else Usage(),
            attempts=gen.attempts if made_here else 0,
            failures=list(gen.failures),
            ok=gen.ok,
            outcome=(
                StepOutcome.OK if gen.ok else StepOutcome.CUT_AT_MAX_TOKENS if gen.cut else StepOutcome.PARSE_FAILED
            ),
            retry_usage=gen.retry_usage if made_here else Usage(),
        )
        trace.steps.append(step)
        trace.templates[gen.template.id] = gen.template.sha256
        if gen.schema is None:
            last = gen.failures[-1].split(": ", 1)[-1] if gen.failures else "no answer"
            trace.not_run = (
                f"no generated schema for task {sample.task!r} parsed in {gen.attempts} attempt(s) (last: {last[:160]})"
            )
            step.failures.append(f"{trace.not_run}; the sample was not run (answer left empty)")
        return gen.schema

    # --- the incremental loop ------------------------------------------------------------------------
    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        question = answers.question(sample, self.name)
        built = self.build_memory(sample, trace, question)
        if built is None:
            return "", {}
        final = trace.ask(
            "s002-prism-final",
            {
                "memory_note": built.final_note,
                "question": question,
                "structure": built.structure,
                "memory": built.text,
                "answer_instruction": answers.answer_instruction(trace, sample.task),
            },
            kind="final",
        )
        final.memory = built.memory
        return answers.read_answer(sample.task, final.output), built.memory

    def build_memory(self, sample: Sample, trace: Trace, question: str) -> "BuiltMemory | None":
        """The revise loop over every chunk for `question` (None: no usable schema, recorded on the trace);
        the answer step is the caller's (`_run` asks one question, ask-many several)."""
        schema = self._schema(sample, trace)
        if schema is None:
            return None
        ops = ("add", "update") if self.settings.updates else ("add",)
        constrained = self.settings.decoding == "constrained"
        if constrained and not trace.llm.supports_json_schema:
            raise MethodError(
                f"{self.name}: decoding: constrained needs a model server with JSON-schema decoding, "
                f"and {trace.llm.name!r} has none; use decoding: text (the paper's format)"
            )
        tpl = ("s002-prism-revise" if self.settings.updates else "s002-prism-revise-addonly") + (
            "-json" if constrained else ""
        )
        note, final_note = "", ""
        if self.amendments:  # the note names the section it describes: [PARTIAL_SUMMARY], then [MEMORY]
            nt = load_template("s002-amendments-note")
            trace.templates[nt.id] = nt.sha256
            note = nt.render(section="[PARTIAL_SUMMARY]").strip()
            final_note = " " + nt.render(section="[MEMORY]").strip()
        opened = "[OBJECTS FOR UPDATE]" if self.settings.updates else "[OBJECTS FOR ADD]"  # where the prompt ends
        parse = revision_parser(constrained, lambda text: parse_prism(text, opened), ops, keep_complete=True)
        js = (
            constrained_schema(schema, ops, thoughts=False, max_items=self.settings.max_revisions)
            if constrained
            else None
        )
        structure = schema.class_text()
        memory: dict[str, Any] = {}
        amend = Amendments(schema, base={})
        for i, chunk in enumerate(sample.chunks):
            step = trace.ask(
                tpl,
                {
                    "memory_note": note,
                    "question": question,
                    "structure": structure,
                    "partial_summary": self._render(memory, amend),
                    "text": chunk,
                },
                kind="revise",
                parse=parse,
                schema=js,
                chunk_index=i,
            )
            if step.ok:
                parsed = step.parsed
                rejected = list(parsed.rejected)
                if self.amendments:
                    before = len(amend.revisions)
                    rejected += amend.revise(parsed.revisions, ops)
                    applied = amend.revisions[before:]
                    memory = amend.fold()
                else:
                    res = apply_revisions(memory, parsed.revisions, schema, ops)
                    rejected += res.rejected
                    applied, memory = res.applied, res.memory
                record_failures(step, rejected)
                record_revisions(step, len(parsed.revisions) + len(parsed.rejected), len(applied), len(rejected))
                step.parsed = {
                    "revisions": [r.to_dict() for r in parsed.revisions],
                    "applied": [r.to_dict() for r in applied],
                }
            step.memory = memory
            step.memory_text = self._render(memory, amend)  # what the next prompt carries (table 4's tokens)
        return BuiltMemory(memory, self._render(memory, amend), schema.class_text(), final_note)

    def _render(self, memory: dict[str, Any], amend: Amendments) -> str:
        return amend.text().rstrip("\n") if self.amendments else render_in_place(memory)


@dataclass(frozen=True)
class BuiltMemory:
    """A PRISM memory after the last chunk: the value, its rendering, the schema's class text and the
    note that names the rendering (amendments)."""

    memory: dict[str, Any]
    text: str
    structure: str
    final_note: str


@method("prism-inplace")
class PrismInPlace(_Prism):
    amendments = False


@method("prism-amendments")
class PrismAmendments(_Prism):
    amendments = True
