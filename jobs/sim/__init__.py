"""The scale simulation (`memloop bench scale`): engines that replay recorded steps with a latency
model (`replay`), driven by the real driver over simulated hosts (`scale_sim`).

Stands above `memloop.jobs.run` and plugs into it through the engine-handle interface; `memloop.jobs.run` never
imports it.
"""
