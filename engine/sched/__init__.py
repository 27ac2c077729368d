"""Requests to tokens: intake (request dict -> Sequence), the continuous-batching scheduler, the step
runner and step loop, prompt scoring, token pieces, the `Engine` that ties them (serving.py), and the
reference decoder (reference.py: one batch on a contiguous cache, what the `Engine` is checked against).
May import attention, cache, model, sample and kernels; never serve."""
