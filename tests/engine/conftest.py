"""Engine-model fixtures: the bundled model loaded once, and the transformers reference on the same GGUF."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def lm(smollm2_gguf):
    from memloop.engine.model.decoder import load_model

    return load_model(smollm2_gguf)


@pytest.fixture(scope="session")
def hf_model(smollm2_gguf):
    """transformers' own GGUF loader and PyTorch implementation: the numerical reference."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)  # oversubscribed CI cores make multi-threaded torch crawl
    model = AutoModelForCausalLM.from_pretrained(
        str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name, dtype=torch.float32
    )
    model.eval()
    return model


@pytest.fixture(scope="session")
def built_kernels() -> None:
    """The CPU kernels, built and loaded: a compile or load failure on a host that can have them fails
    the test with the compiler's message (tests/engine/kernel_gate.py)."""
    from memloop.engine import kernels

    kernels.load()
