"""An on-disk response cache for any `memloop.eval.llm.LLM`: identical requests are answered from disk.

Re-running a method after a judge or report change, or resuming a run whose endpoint bills per
token, need not pay for the same completions twice. The key is the sha256 of the model's identity
(weights digest or endpoint + model) and the whole request (messages or prompt, sampling, schema);
only deterministic requests are cached (greedy, or sampled with a seed), since an unseeded sample
is meant to differ. A hit returns the stored text, finish reason and the usage of the original call
(the cost of a method is a property of the method, not of the cache); `hits`/`misses` count both.

Storage is SQLite (stdlib) in WAL mode, so the driver's threads and judge tasks on the same host
share one file; on a cluster, put the directory on shared storage or each host keeps its own.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from memloop.eval.llm import LLM, LLMRequest, LLMResult, request_key

SCHEMA = "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, result TEXT NOT NULL)"


def cacheable(request: LLMRequest) -> bool:
    s = request.sampling
    return s.temperature == 0.0 or s.seed is not None


class CachedLLM:
    def __init__(self, llm: LLM, directory: str | Path, model_key: str) -> None:
        self.llm = llm
        self.directory = Path(directory).expanduser()
        self.model_key = model_key
        self.name = llm.name
        self.supports_json_schema = llm.supports_json_schema
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.directory / "responses.sqlite3", check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(SCHEMA)
        self._db.commit()

    def __reduce__(self):  # into Ray tasks: the wrapped LLM travels, the connection is reopened there
        return (CachedLLM, (self.llm, str(self.directory), self.model_key))

    @property
    def context_tokens(self) -> int | None:
        """The wrapped model's window, where it reports one."""
        return getattr(self.llm, "context_tokens", None)

    def key(self, request: LLMRequest) -> str:
        return hashlib.sha256(f"{self.model_key}\0{request_key(request)}".encode()).hexdigest()

    def complete(self, request: LLMRequest) -> LLMResult:
        if not cacheable(request):
            return self.llm.complete(request)
        key = self.key(request)
        with self._lock:
            row = self._db.execute("SELECT result FROM responses WHERE key = ?", (key,)).fetchone()
        if row is not None:
            with self._lock:
                self.hits += 1
            return LLMResult.from_dict(json.loads(row[0]))
        result = self.llm.complete(request)
        with self._lock:
            self.misses += 1
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, result) VALUES (?, ?)", (key, json.dumps(result.to_dict()))
            )
            self._db.commit()
        return result

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)
