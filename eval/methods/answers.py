"""The answer contract of a task, one home for every method that answers the task's question.

PRISM (seed 002), incremental updating on RepoQA/Spider (seed 002's adapted baseline) and the
long-context ceiling ask the same question with the same answer instruction and read the reply the
same way, so `repoqa-exact` and `loft-exec` (eval/judges/overlap.py) score all of them alike:
RepoQA keeps the reply's first line (the function name), Spider keeps the whole reply, whose
"Final Answer: [[...]]" line `loft-exec` reads, summaries keep the whole reply.
"""

from __future__ import annotations

from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.methods.base import Trace
from memloop.eval.methods.common import entity_name
from memloop.eval.templates import load_template

BOOK_QUESTION = (
    "Summarize this book. Briefly introduce characters, places and other major elements when they are first mentioned."
)
SUMMARY_TASKS = ("book", "arxiv")
QUERY_TASKS = ("repoqa", "spider")
ANSWER_TEMPLATES = {
    "book": "s002-answer-book",
    "arxiv": "s002-answer-book",
    "repoqa": "s002-answer-repoqa",
    "spider": "s002-answer-spider",
}
GENERIC_ANSWER = "s002-answer-generic"
TEMPLATE_IDS = tuple(dict.fromkeys((*ANSWER_TEMPLATES.values(), GENERIC_ANSWER)))


def question(sample: Sample, method: str) -> str:
    """The task's question as every method asks it: a summary task's own query (or the book question),
    SUMIE's attribute question, a query task's query (which its loader must set)."""
    if sample.task in SUMMARY_TASKS:
        return sample.query or BOOK_QUESTION
    if sample.task == "sumie":
        return f"Describe attributes and values of {entity_name(sample)}."
    if not sample.query:
        raise MethodError(f"{method}: sample {sample.id} ({sample.task}) has no query; the loader must set it")
    return sample.query


def answer_instruction(trace: Trace, task: str) -> str:
    """The task's answer instruction (its template recorded on the trace as used)."""
    tpl = load_template(ANSWER_TEMPLATES.get(task, GENERIC_ANSWER))
    trace.templates[tpl.id] = tpl.sha256
    return tpl.text.strip()


def read_answer(task: str, reply: str) -> str:
    """The answer a judge scores, read from the reply to the answer instruction."""
    answer = reply.strip()
    if task == "repoqa" and answer:
        return answer.splitlines()[0].strip().strip("`").strip()
    return answer  # Spider: `loft-exec` reads LOFT's "Final Answer: [[...]]" line from the whole text
