"""The sentence embedder, the one home of sentence-transformers: all-MiniLM-L6-v2, loaded once per process.

KGScore compares predicates (seed 001, eq. 7) and the KG method ranks edges by keyword similarity
with it. The weights come from the packaged copy (`memloop.eval.assets.minilm_path`, never downloaded) and
run on the CPU. One model is shared by every caller; a lock guards loading and encoding, since a
SentenceTransformer is not documented as safe to call from several threads at once.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

_LOCK = threading.Lock()
_MODEL: Any = None


def _model() -> Any:
    global _MODEL
    if _MODEL is None:
        from memloop.eval.assets import minilm_path
        from sentence_transformers import SentenceTransformer

        _MODEL = SentenceTransformer(str(minilm_path()), device="cpu")
    return _MODEL


def embed(texts: Sequence[str]) -> np.ndarray:
    """Unit-normalised MiniLM embeddings, one float32 row per text."""
    with _LOCK:
        return np.asarray(
            _model().encode(list(texts), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        )
