"""The engine served: the OpenAI-compatible HTTP server over an in-process `Engine` (server.py wires
the app: the guard, then one serving class per route family from openai_serving.py, speaking the
request and response shapes of protocol.py) and the Ray actor that hosts an engine in a cluster
(actor.py). Top floor: may import every floor below; only the actor imports Ray, and the server never
goes through the actor (contracts in pyproject.toml)."""
