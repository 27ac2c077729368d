"""Continuous batching (scheduler.py): which sequences run in the next step and with which pages --
admission with back-pressure, chunked prefill, page growth, preemption. Pure Python over the page
pool and the prefix cache; its `Sequence` and `StepPlan` are what the runner executes.
May import cache, model, sample and kernels; never attention, runner, core or serve."""
