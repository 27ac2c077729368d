"""The runner: what runs a step on the device. The step runner (step_runner.py: a scheduler plan ->
packed step inputs -> the jitted step -> tokens accepted into results), the jitted step functions
(step.py: the paged forward, the masked sampler, `engine_step` and `engine_decode_steps`) and their
typed inputs, the reference decoder (reference.py: one batch on a contiguous cache, what the `Engine`
is checked against), prompt scoring (prompt_scoring.py) and token pieces (token_pieces.py).
May import sched, attention, cache, model, sample and kernels; never core or serve."""
