"""Errors the engine raises for conditions a user can cause or fix."""

from memloop.errors import MemloopError
from memloop.sampling import SamplingError


class EngineError(MemloopError):
    """Base class: every message says what the user should do next."""


class ModelNotFoundError(EngineError):
    """The model weights are not where they were expected."""


class ModelFormatError(EngineError):
    """The weights file is corrupt, truncated, or of an unsupported architecture/quantisation."""


class RequestError(EngineError):
    """A generation request is malformed or cannot be served (too long, bad schema, ...)."""


class SamplingRequestError(RequestError, SamplingError):
    """A request's sampling settings are out of bounds: `memloop.sampling.check`'s message, as this request's
    RequestError (HTTP 400)."""


class StepError(RequestError):
    """This request's own processing failed inside an engine step; the requests batched with it went on."""


class NonFiniteLogitsError(EngineError):
    """The model's logits for one request hold NaN or infinity: the engine's numbers failed, not the
    request (the server answers 500, never an empty completion)."""


class EngineFailure(EngineError):
    """The engine itself failed (e.g. its device state was lost): every pending request is aborted."""


class ServerConfigError(EngineError):
    """`memloop serve` was given options it cannot serve with safely (a bad port, no key off loopback)."""


class ScoringCancelled(EngineError):
    """A prompt scoring whose request was abandoned (its client left, or it ran past the timeout)."""
