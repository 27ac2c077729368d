"""The methods of the five papers, each running one sample against the `memloop.eval.llm.LLM` protocol.

    from memloop.eval.methods import get_method
    out = get_method("prism-amendments", updates=False).run(sample, llm)
    out.answer, [(s.kind, s.output, s.usage) for s in out.steps]

Names: go-text go-json gu-text gu-json gm-text gm-json cok prism-inplace prism-amendments
hier-merge inc-update kg-retrieval no-kg fart-base fart-compressed fart-rolling long-context.
"""

from memloop.eval.asking import ParseFailure
from memloop.eval.methods import ask_many
from memloop.eval.methods.base import PROTOCOLS, Method, MethodOutput, MethodSettings, Trace
from memloop.eval.methods.registry import METHODS, get_method, list_methods, method_class, template_manifest
from memloop.eval.methods.step import Step

PROTOCOLS[ask_many.TASK] = ask_many.run

__all__ = [
    "Method",
    "MethodOutput",
    "MethodSettings",
    "ParseFailure",
    "Step",
    "Trace",
    "METHODS",
    "get_method",
    "list_methods",
    "method_class",
    "template_manifest",
]
