"""One request to each endpoint a run calls, before any unit runs.

`GET {base_url}/models` (the OpenAI-compatible listing that the OpenAI API, vLLM, SGLang and
`memloop serve` all answer) checks that the server answers, that the key is accepted and that the
model name is one it serves. A refusal (401, 403, 404, another 4xx) or a model it does not list stops
the run in one line naming the endpoint, the status and what to do, instead of every unit failing the
same way later. A server that does not answer, or answers 429/5xx, is reported as a warning and left
to the run's own retries and failure accounting (it may be starting, or briefly overloaded).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

import httpx
from memloop.jobs.errors import JobsError

if TYPE_CHECKING:
    from memloop.jobs.run.config import EndpointSpec, RunConfig

PREFLIGHT_TIMEOUT_S = 30.0  # one listing request; a run's own requests have their own timeout
_ADVICE = {
    401: "the API key was refused: check the key in {key}",
    403: "the key may not use this endpoint or model: check the key in {key} and its permissions",
    404: "no OpenAI-compatible API at this URL: the base URL usually ends in /v1 (e.g. http://HOST:PORT/v1)",
}


class EndpointCheckError(JobsError):
    """An endpoint the run would call refused the check request, never answered, or does not serve the model."""


def models_url(base_url: str) -> str:
    """The listing URL, with /v1 added as the run's client adds it (`memloop.eval.llm_http`)."""
    root = base_url.rstrip("/")
    return (root if root.endswith("/v1") else root + "/v1") + "/models"


def run_endpoints(cfg: "RunConfig") -> list[tuple[str, "EndpointSpec"]]:
    """(config section, endpoint) of every endpoint the run calls: the model's, and the judges' when
    some judge asks an LLM."""
    from memloop.eval.judges import get_judge

    out = []
    if cfg.model.kind == "openai" and cfg.model.endpoint is not None:
        out.append(("model.endpoint", cfg.model.endpoint))
    jm = cfg.judge_model
    if jm.kind == "openai" and jm.endpoint is not None and any(get_judge(j.name).needs_llm for j in cfg.judges):
        if not out or jm.endpoint != out[0][1]:
            out.append(("judge_model.endpoint", jm.endpoint))
    g = cfg.graph_model
    if g is not None and g.kind == "openai" and g.endpoint is not None and all(g.endpoint != ep for _, ep in out):
        out.append(("graph_model.endpoint", g.endpoint))
    return out


def check_endpoint(where: str, ep: "EndpointSpec", transport: httpx.BaseTransport | None = None) -> str | None:
    """Raise EndpointCheckError when `ep` refuses its model listing (401, 403, 404, another 4xx) or does
    not list `ep.model`. An endpoint that does not answer, or answers 429/5xx, is not refused here: the
    run's requests retry it and record what fails; the returned line says so (None when all is well)."""
    url = models_url(ep.base_url)
    key = os.environ.get(ep.api_key_env) if ep.api_key_env else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    name = f"`{where}` {ep.base_url} (model {ep.model!r})"
    try:
        with httpx.Client(timeout=min(ep.timeout_s, PREFLIGHT_TIMEOUT_S), transport=transport) as client:
            r = client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        return (
            f"{name} does not answer GET {url} ({type(exc).__name__}: {str(exc)[:200]}); "
            "the run's requests will retry it"
        )
    if r.status_code in _ADVICE:
        advice = _ADVICE[r.status_code].format(key=ep.api_key_env or "`api_key_env` (none is set)")
        raise EndpointCheckError(f"{name}: HTTP {r.status_code} from GET {url}; {advice}")
    if r.status_code == 429 or r.status_code >= 500:
        return f"{name} answers HTTP {r.status_code} to GET {url}; the run's requests will retry it"
    if r.status_code >= 400:
        raise EndpointCheckError(f"{name}: HTTP {r.status_code} from GET {url}: {r.text[:200]}")
    _check_listed(name, ep.model, r)
    return None


def _check_listed(name: str, model: str, r: httpx.Response) -> None:
    """The model must be in the listing; a listing that is not the OpenAI shape is not held against it."""
    try:
        ids = [m["id"] for m in r.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return
    if ids and model not in ids:
        shown = ", ".join(repr(i) for i in ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        raise EndpointCheckError(
            f"{name}: the server does not serve model {model!r}; it serves {shown}: use one of those names"
        )


def check_endpoints(cfg: "RunConfig", log: Callable[[str], None] | None = None) -> None:
    """The check of every endpoint the run calls (nothing when it calls none); warnings go to `log`."""
    for where, ep in run_endpoints(cfg):
        warning = check_endpoint(where, ep)
        if warning and log is not None:
            log(f"warning: {warning}")
