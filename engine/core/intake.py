"""Request intake: a request dict becomes a `Sequence` the scheduler can run, or a `RequestError`.

Everything a request can get wrong is found here, before it joins a batch: the prompt (exactly one
of `messages` or `prompt`, tokenised through the chat template), the sampling settings, whether
prompt + output fit the context and the page pool, and the JSON schema (compiled to a grammar
constraint). Nothing is truncated.
"""

from __future__ import annotations

import threading
from typing import Any

from memloop.engine.cache.kv_cache import PagePool, check_fits
from memloop.engine.errors import RequestError
from memloop.engine.model.tokenizer import Tokenizer
from memloop.engine.sample.sampling import request_params, seed_keys
from memloop.engine.sched.scheduler import Sequence


class RequestIntake:
    """Validates and tokenises requests for one model and page pool; builds the grammar compiler lazily."""

    def __init__(self, tokenizer: Tokenizer, pool: PagePool, max_context: int, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.pool = pool
        self.max_context = max_context
        self.vocab_size = vocab_size
        self.stop_ids = frozenset(tokenizer.stop_token_ids)
        self._grammar: Any = None
        self._grammar_lock = threading.Lock()

    @property
    def grammar(self) -> Any:
        """The grammar compiler (`memloop.engine.sample.constrained.GrammarCompiler`), built on the first constrained
        request (about a second)."""
        with self._grammar_lock:
            if self._grammar is None:
                from memloop.engine.sample.constrained import GrammarCompiler

                self._grammar = GrammarCompiler(self.tokenizer.hf, self.vocab_size, sorted(self.stop_ids))
            return self._grammar

    def prompt_ids(self, request: dict[str, Any]) -> list[int]:
        messages, prompt = request.get("messages"), request.get("prompt")
        if (messages is None) == (prompt is None):
            raise RequestError("a request needs exactly one of `messages` (chat) or `prompt` (completion)")
        if prompt is not None:
            if isinstance(prompt, (list, tuple)):
                return self.token_prompt(prompt)
            if not isinstance(prompt, str):
                raise RequestError("`prompt` must be a string or a list of token ids")
            return self.tokenizer.prompt_ids(prompt)
        if not isinstance(messages, (list, tuple)) or not messages:
            raise RequestError("`messages` must be a non-empty list of {role, content} objects")
        return self.tokenizer.chat_ids(list(messages))

    def token_prompt(self, ids: list[Any] | tuple[Any, ...]) -> list[int]:
        """A prompt given as token ids (OpenAI's `prompt: [int, ...]`), used as they are: no BOS is added."""
        if not ids:
            raise RequestError("`prompt` is an empty list of token ids; send at least one token")
        bad = [t for t in ids if type(t) is not int or not 0 <= t < self.vocab_size]
        if bad:
            raise RequestError(
                f"`prompt` token ids must be integers in [0, {self.vocab_size}) (the vocabulary), "
                f"got {str(bad[0])[:40]}"
            )
        return list(ids)

    def misfit(self, request: dict[str, Any]) -> str | None:
        """Why the request could never be served (its prompt with the chat template + max_tokens against
        the context and the page pool), or None when it fits: the check `make_sequence` applies, asked ahead."""
        params = request_params(request.get("sampling"), self.vocab_size)
        try:
            check_fits(len(self.prompt_ids(request)), params.max_tokens, self.pool, self.max_context)
        except RequestError as exc:
            return str(exc)
        return None

    def make_sequence(self, request: dict[str, Any]) -> Sequence:
        """Validate and tokenise a request dict (raises RequestError, never truncates)."""
        if not isinstance(request, dict):
            raise RequestError("a request must be a JSON object")
        params = request_params(request.get("sampling"), self.vocab_size)  # the one parser
        ids = self.prompt_ids(request)
        check_fits(len(ids), params.max_tokens, self.pool, self.max_context)
        schema = request.get("json_schema")
        constraint = self.grammar.compile(schema) if schema is not None else None
        return Sequence(
            prompt=ids,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            params=params,
            key=seed_keys([params])[0],
            stop_ids=self.stop_ids if params.stop_token_ids is None else frozenset(params.stop_token_ids),
            stop_strings=params.stop,
            constraint=constraint,
            logprobs=params.logprobs,
        )
