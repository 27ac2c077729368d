"""`memloop view --bundle DIR RUN_URI`: the viewer's pages of one run as files that open from disk or a
bucket with no server. The same templates as the server, with relative links; the samples page holds
every unit and filters and sorts them in the page; each page's data is written beside it as JSON.

    DIR/index.html          the run page (and the report's plots next to it)
    DIR/samples.html        every unit (filters and sort in the page; `?status=failed` presets a filter)
    DIR/samples.json        the same rows
    DIR/unit/{i}.html|json  each unit's memory timeline and judges
    DIR/side/{i}-{j}.html   unit i beside unit j (the same sample under another method)
    DIR/run.json            the report's numbers (`memloop report --json`)
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode

from memloop.jobs.results.report import headline
from memloop.jobs.results.view.errors import ViewError
from memloop.jobs.results.view.pages import Links, Pages, jsonable
from memloop.jobs.results.view.runs import Query, ViewRun


class BundleLinks(Links):
    static = True

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix  # "" for pages at the bundle's root, "../" one folder down

    def home(self) -> str:
        return self.prefix + "index.html"

    def run(self, r: int) -> str:
        return self.prefix + "index.html"

    def samples(self, r: int, params: dict[str, str] | None = None) -> str:
        return self.prefix + "samples.html" + (f"?{urlencode(params)}" if params else "")

    def unit(self, r: int, i: int) -> str:
        return f"{self.prefix}unit/{i}.html"

    def unit_json(self, r: int, i: int) -> str:
        return f"{self.prefix}unit/{i}.json"

    def side(self, a: tuple[int, int], b: tuple[int, int]) -> str:
        return f"{self.prefix}side/{a[1]}-{b[1]}.html"

    def compare(self, a: int, b: int) -> str | None:
        return None


def write_bundle(run: ViewRun, dest: Path) -> Path:
    """Write the site; returns the path of its index.html. A folder that cannot be written (read-only, a file
    in the way, a full disk) is a ViewError naming it."""
    dest = Path(dest)
    try:
        return _write_bundle(run, dest)
    except OSError as exc:
        where = exc.filename or dest
        raise ViewError(
            f"--bundle {dest}: cannot write {where} ({exc.strerror or exc}); give a directory this "
            "user can write, with room for the run's pages"
        ) from None


def _write_bundle(run: ViewRun, dest: Path) -> Path:
    (dest / "unit").mkdir(parents=True, exist_ok=True)
    (dest / "side").mkdir(exist_ok=True)
    top, down = Pages.of([run], BundleLinks("")), Pages.of([run], BundleLinks("../"))
    (dest / "index.html").write_text(top.run(0))
    for name, png in run.report().plots.items():
        (dest / name).write_bytes(png)
    (dest / "run.json").write_text(json.dumps(jsonable(headline(run.data)), indent=1))
    (dest / "samples.html").write_text(top.samples(0, Query()))
    (dest / "samples.json").write_text(run.index.to_json(orient="records"))
    for i in range(len(run.index)):
        (dest / "unit" / f"{i}.html").write_text(down.unit(0, i))
        (dest / "unit" / f"{i}.json").write_text(json.dumps(jsonable(down.unit_data(0, i))))
        for j in run.siblings(i).index:
            (dest / "side" / f"{i}-{int(j)}.html").write_text(down.side((0, i), (0, int(j))))
    return dest / "index.html"
