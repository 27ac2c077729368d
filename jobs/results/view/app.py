"""The viewer's web app: read-only GET routes over the loaded runs, behind two guards (`memloop.web_guard`,
the engine server's too).

- The Host header must name the viewer (Starlette's TrustedHostMiddleware decides): a page of another site
  that rebinds its DNS name to 127.0.0.1 cannot read the runs.
- Off loopback every request needs the API key, as `Authorization: Bearer KEY` or HTTP Basic with
  the key as password (which browsers ask for on a 401); compared in constant time.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from memloop.jobs.results.view.errors import ViewError, ViewNotFound
from memloop.jobs.results.view.pages import Pages, compare_plots, jsonable
from memloop.jobs.results.view.runs import Query, ViewRun

from memloop.web_guard import HostGuard, KeyGuard, host_names, is_loopback


def check_bind(host: str, api_key: str | None) -> None:
    if not is_loopback(host) and not api_key:
        raise ViewError(
            f"--host {host} is reachable from other machines: set MEMLOOP_API_KEY or give "
            "--api-key-file FILE, or keep the default 127.0.0.1"
        )


def _refuse_host(header: str, allowed: tuple[str, ...]) -> Response:
    return PlainTextResponse(
        f"Host header {header[:100]!r} is not a name this viewer answers to (it answers to "
        f"{', '.join(sorted(allowed))}); start it with --allow-host NAME to accept that name",
        400,
    )


def _refuse_key() -> Response:
    return PlainTextResponse(
        "the viewer needs its API key (MEMLOOP_API_KEY of the viewer's host)",
        401,
        headers={"WWW-Authenticate": 'Basic realm="memloop view"'},
    )


def create_app(
    runs: list[ViewRun],
    *,
    host: str = "127.0.0.1",
    api_key: str | None = None,
    allow_hosts: tuple[str, ...] = (),
    sources: list[str] | None = None,
) -> FastAPI:
    """`sources`: the folders (or runs) the runs came from; the runs list scans them again, so a run added
    later appears, and a link to a run not held yet is looked up there."""
    check_bind(host, api_key)
    pages = Pages.of(runs, sources=sources)
    app = FastAPI(title="memloop view", docs_url=None, redoc_url=None, openapi_url=None)
    if api_key:
        app.add_middleware(KeyGuard, key=api_key, refusal=_refuse_key, basic=True)
    # the Host names: the loopback names, the bound address and --allow-host's, whether or not a key is needed
    app.add_middleware(HostGuard, allowed=host_names(host, allow_hosts), refusal=_refuse_host)  # runs first

    @app.exception_handler(ViewError)
    async def _bad_request(request: Request, exc: ViewError) -> Response:
        if isinstance(exc, ViewNotFound):
            return HTMLResponse(pages._render("error.html", title="not found", message=str(exc)), 404)
        return HTMLResponse(pages._render("error.html", title="bad request", message=str(exc)), 400)

    @app.middleware("http")
    async def _headers(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response

    @app.get("/", response_class=HTMLResponse)
    def home(request: Request) -> str:
        from memloop.jobs.results.view.log_dir import RunsQuery

        return pages.home(RunsQuery.parse(request.query_params))

    @app.get("/run/{run_id}/", response_class=HTMLResponse)
    def run_page(run_id: str) -> str:
        return pages.run(pages.index_of(run_id))

    @app.get("/run/{run_id}/samples", response_class=HTMLResponse)
    def samples(run_id: str, request: Request) -> str:
        return pages.samples(pages.index_of(run_id), Query.parse(request.query_params))

    @app.get("/run/{run_id}/samples.json")
    def samples_json(run_id: str, request: Request) -> Response:
        from memloop.jobs.results.view.runs import select

        rows, total = select(pages.run_of(pages.index_of(run_id)), Query.parse(request.query_params))
        return Response(
            rows.to_json(orient="records"), media_type="application/json", headers={"X-Total-Count": str(total)}
        )

    @app.get("/run/{run_id}/unit/{i}.json")
    def unit_json(run_id: str, i: int) -> JSONResponse:
        return JSONResponse(jsonable(pages.unit_data(pages.index_of(run_id), i)))

    @app.get("/run/{run_id}/unit/{i}", response_class=HTMLResponse)
    def unit(run_id: str, i: int) -> str:
        return pages.unit(pages.index_of(run_id), i)

    @app.get("/run/{run_id}/{name}.png")
    def plot(run_id: str, name: str) -> Response:
        run = pages.run_of(pages.index_of(run_id))
        png = run.report().plots.get(f"{name}.png")
        if png is None:
            raise ViewNotFound(f"run {run.run_id} has no plot {name}.png")
        return Response(png, media_type="image/png")

    @app.get("/side", response_class=HTMLResponse)
    def side(a: str, b: str) -> str:
        return pages.side(_ref(pages, a), _ref(pages, b))

    @app.get("/compare", response_class=HTMLResponse)
    def compare(a: str, b: str) -> str:
        return pages.compare(pages.index_of(a), pages.index_of(b))

    @app.get("/compare/{a}/{b}/{name}")
    def compare_plot(a: str, b: str, name: str) -> Response:
        png = compare_plots(pages.run_of(pages.index_of(a)), pages.run_of(pages.index_of(b))).get(name)
        if png is None:
            raise ViewNotFound(f"the comparison has no plot {name}")
        return Response(png, media_type="image/png")

    return app


def _ref(pages: Pages, text: str) -> tuple[int, int]:
    run, _, unit = text.rpartition(":")
    try:
        return pages.index_of(run), int(unit)
    except ValueError:
        raise ViewError(
            f"{text!r}: name a unit as RUN_ID:UNIT (the unit's number, as the unit pages link them)"
        ) from None
