"""memloop's LLM engine, in floors (each may import only the floors below it; `engine-floors` in
pyproject.toml checks this):

    serve      the OpenAI-compatible HTTP server and the Ray actor
    sched      requests to tokens: intake, scheduler, step runner and loop, prompt scoring, the `Engine`,
               and the reference decoder the engine is checked against
    attention  attention over the paged KV cache (Pallas backends, the CPU kernel in place) and the
               jitted paged step that plugs it into the decoder
    cache      the KV cache: page pool, page reads and writes, the radix prefix cache
    model      the decoder from weights to logits: config, weights, GGUF blocks, int8, mesh, tokenizer
    sample     logits to tokens: sampling settings and sampler, grammar constraints (apart from model)
    kernels    the CPU kernels (quantised matmul, paged attention) and their builder

Beside the floors, imported by any and importing none: `errors` (the `EngineError` root),
`engine_config` (the engine's own settings) and `assets` (where weights and built artefacts live).
"""
