"""The model benchmark's arithmetic: multiply-adds per token and the compute ceiling it reports."""
from __future__ import annotations

import pytest

from bench.model import macs_per_token


def _matrix_weights(lm) -> int:
    """Weights of every matrix a decoded token multiplies by: layer matrices and the output head."""
    total = 0
    for layer in lm.params["layers"]:
        for key in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"):
            w = layer[key]
            total += w.shape[0] * w.shape[1]
    head = lm.params.get("lm_head", lm.params["embed"])
    return total + head.shape[0] * head.shape[1]


def test_macs_per_token_counts_every_matrix(lm):
    assert macs_per_token(lm) == _matrix_weights(lm)
    assert 130e6 < macs_per_token(lm) < 140e6  # SmolLM2-135M: 106M in layers + 28M tied head



@pytest.mark.slow
def test_served_decode_rate_with_the_gather_path_restores_the_kernel(lm, monkeypatch):
    """The gather-path measurement is a real served decode and leaves later steps on the kernel."""
    import os

    from bench.model import served_decode_tps

    monkeypatch.delenv("MEMLOOP_PAGED_KERNEL", raising=False)
    assert served_decode_tps(lm, 64, 3, gather=True) > 0
    assert "MEMLOOP_PAGED_KERNEL" not in os.environ
