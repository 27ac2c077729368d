"""memloop's LLM engine, in floors (each may import only the floors below it; `engine-floors` in
pyproject.toml checks this):

    serve      the OpenAI-compatible HTTP server and the Ray actor
    core       the `Engine`, request intake and admission checks, the step loop thread, the scoring queue
    runner     what runs on the device: the step runner, the jitted step functions and their typed inputs,
               the reference decoder the engine is checked against, prompt scoring, token pieces
    sched      continuous batching: which sequences run in the next step, with which pages
    attention  attention over the paged KV cache: the paged hooks (gather, the CPU kernel in place) and
               the Pallas backends (apart from sched)
    cache      the KV cache: page pool, the pools and their reads and writes, the radix prefix cache
    model      the decoder from weights to logits: config, weights, GGUF blocks, int8, mesh, tokenizer
    sample     logits to tokens: sampling settings and sampler, grammar constraints (apart from model)
    kernels    the CPU kernels (quantised matmul, paged attention) and their builder

Beside the floors, imported by any and importing none: `errors` (the `EngineError` root),
`engine_config` (the engine's own settings) and `assets` (where weights and built artefacts live).
"""
