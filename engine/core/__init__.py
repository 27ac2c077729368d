"""The engine core: the `Engine` facade (engine.py), request intake and admission checks (intake.py:
request dict -> `Sequence` or a `RequestError`), the step loop thread that plans and runs steps
(step_loop.py) and the scoring queue (scoring_queue.py). It decides what runs; the runner runs it.
May import runner, sched, attention, cache, model, sample and kernels; never serve."""
