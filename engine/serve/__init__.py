"""The engine served: the OpenAI-compatible HTTP server over an in-process `Engine` (server.py) and the
Ray actor that hosts one in a cluster (actor.py). Top floor: may import every floor below; only the
actor imports Ray, and the server never goes through the actor (contracts in pyproject.toml)."""
