"""`memloop view` in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`)
driven by Selenium over a real run on the scripted model. Skipped with the reason where either is
missing; `.ci/run` installs them. Screenshots go to the test's temp dir."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    pytest.skip(
        f"no Chromium to drive: {CHROMIUM} or {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

from memloop.jobs.results.view.app import create_app  # noqa: E402
from memloop.jobs.results.view.bundle import write_bundle  # noqa: E402
from memloop.jobs.results.view.runs import ViewRun  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

from tests.http_server import serve_app  # noqa: E402
from tests.jobs.view_run import HOSTILE  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


class Pages:
    """The browser on one page after another: fails on any console error, screenshots every page."""

    def __init__(self, driver, shots: Path) -> None:
        self.d, self.shots, self.n = driver, shots, 0
        shots.mkdir(parents=True, exist_ok=True)
        driver.get_log("browser")  # drop what earlier tests left

    def check(self, name: str) -> None:
        self.n += 1
        height = self.d.execute_script("return document.documentElement.scrollHeight")
        self.d.set_window_size(1400, min(max(height, 600), 6000))  # the whole page, up to 6000 px
        self.d.save_screenshot(str(self.shots / f"{self.n:02d}-{name}.png"))
        errors = [e for e in self.d.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        assert not errors, f"JavaScript console errors on {self.d.current_url}: {errors}"
        # the hostile output was shown as text: no element or alert came of it
        assert self.d.execute_script("return document.querySelectorAll('img[src=x], script:not([nonce])').length") == 0

    def text(self) -> str:
        return self.d.find_element(By.TAG_NAME, "body").text


@pytest.fixture(scope="module")
def run(view_run) -> ViewRun:
    return ViewRun.load(view_run)


def test_run_page_to_a_unit_with_filters_diff_revisions_and_verdicts(browser, run, tmp_path) -> None:
    p = Pages(browser, tmp_path / "screens")
    with serve_app(create_app([run, run])) as url:
        browser.get(url + f"/run/{run.run_id}/")
        p.check("run")
        assert "Report" in p.text() and "Scores by input length" in p.text() and "Root causes" not in p.text()
        assert browser.execute_script("return Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
        browser.find_element(By.LINK_TEXT, "samples").click()
        p.check("samples")
        Select(browser.find_element(By.ID, "f-method")).select_by_value("cok")
        Select(browser.find_element(By.ID, "f-dataset")).select_by_value("book:lighthouse-keeper@128")
        browser.find_element(By.ID, "apply").click()
        p.check("samples-filtered")
        rows = browser.find_elements(By.CSS_SELECTOR, "#samples tbody tr")
        assert len(rows) == 1 and rows[0].get_attribute("data-method") == "cok"
        rows[0].find_element(By.TAG_NAME, "a").click()
        p.check("unit")
        assert HOSTILE.split(" The")[0] in p.text()  # the markup shown as the text it is
        assert browser.find_elements(By.CSS_SELECTOR, "table.revisions tr.rejected")
        assert browser.find_elements(By.CSS_SELECTOR, "table.revisions tr.accepted")
        assert "/characters/<b>keeper<~1b>" in browser.find_element(By.CSS_SELECTOR, ".diff table.patch").text
        verdict = browser.find_element(By.CSS_SELECTOR, 'section.verdict[data-judge="booookscore"]')
        assert "confusing" in verdict.text and "Who is <i>she</i>?" in verdict.text
        for summary in browser.find_elements(By.CSS_SELECTOR, "details.prompt summary"):
            summary.click()  # open every prompt: the part shared with the previous prompt is marked
        assert any(e.text for e in browser.find_elements(By.CSS_SELECTOR, "details.prompt .shared"))
        p.check("unit-prompt-open")
        browser.find_element(By.LINK_TEXT, "inc-update").click()
        p.check("side-by-side")
        assert "chunk 0" in p.text() and "chunk 2" in p.text()
        browser.get(url + f"/run/{run.run_id}/unit/1")
        assert (
            browser.find_elements(By.CSS_SELECTOR, ".diff .worddiff ins, .diff .worddiff del")
            or "the first memory" in p.text()
        )
        p.check("text-memory")
        browser.get(url + f"/compare?a={run.run_id}&b={run.run_id}")
        p.check("compare")
        assert "Deltas (B − A)" in p.text()


def test_the_bundle_opens_from_disk_with_the_same_content(browser, run, tmp_path) -> None:
    p = Pages(browser, tmp_path / "screens")
    index = write_bundle(run, tmp_path / "site")
    browser.get(index.as_uri())
    p.check("bundle-run")
    assert "Report" in p.text() and "Scores by input length" in p.text()
    assert browser.execute_script("return Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
    browser.get(index.with_name("samples.html").as_uri() + "?method=cok")
    p.check("bundle-samples")
    shown = [r for r in browser.find_elements(By.CSS_SELECTOR, "#samples tbody tr") if r.is_displayed()]
    assert len(shown) == 2 and all(r.get_attribute("data-method") == "cok" for r in shown)
    browser.find_element(By.ID, "f-q").send_keys("beatrix")
    browser.find_element(By.ID, "apply").click()
    shown = [r for r in browser.find_elements(By.CSS_SELECTOR, "#samples tbody tr") if r.is_displayed()]
    assert len(shown) == 1
    shown[0].find_element(By.TAG_NAME, "a").click()
    p.check("bundle-unit")
    assert browser.find_elements(By.CSS_SELECTOR, "section.step") and "sumie-exact" in p.text()


def test_a_folder_of_runs_the_runs_list_sorts_filters_and_opens_a_unit_beside_its_gold(
    browser, view_run, second_run, tmp_path
) -> None:
    """`memloop view DIR`: the runs list of a folder holding two runs, sorted and filtered in the browser,
    then a SUMIE unit's gold facts marked as the judge scored them, and the step-outcome filter."""
    from memloop.jobs.results.view.log_dir import expand

    folder = Path(view_run).parent
    runs = [ViewRun.load(u) for u in expand([str(folder)])]
    p = Pages(browser, tmp_path / "screens")
    with serve_app(create_app(runs)) as url:
        browser.get(url + "/")
        p.check("runs-list")
        rows = browser.find_elements(By.CSS_SELECTOR, "#runs tr.run-row")
        assert len(rows) == 2 and "2 of 2 runs" in p.text()
        # at 1,400 px the scores are in view, no sideways scrolling (the text columns wrap)
        right = browser.execute_script(
            "return Math.max(...Array.from(document.querySelectorAll('#runs td.score'))"
            ".map(td => td.getBoundingClientRect().right))"
        )
        assert 0 < right <= browser.execute_script("return window.innerWidth"), right
        assert rows[0].find_element(By.TAG_NAME, "a").get_attribute("href").startswith(url + "/run/")
        assert not rows[0].find_element(By.TAG_NAME, "a").get_attribute("href").endswith("/run/0/")
        browser.find_element(By.CSS_SELECTOR, 'a.sort[data-col="run_id"]').click()
        p.check("runs-sorted")
        ids = [
            r.find_element(By.TAG_NAME, "a").text for r in browser.find_elements(By.CSS_SELECTOR, "#runs tr.run-row")
        ]
        assert ids == sorted(ids, reverse=ids[0] > ids[1]) and len(ids) == 2
        browser.find_element(By.NAME, "q").send_keys("gu-json")
        browser.find_element(By.CSS_SELECTOR, "#runs-filter button").click()
        p.check("runs-filtered")
        rows = browser.find_elements(By.CSS_SELECTOR, "#runs tr.run-row")
        assert len(rows) == 1 and "gu-json" in rows[0].text and "1 of 2 runs" in p.text()
        browser.get(url + "/?status=nonsense")  # answered, not ignored (the 400 is the browser log's only entry)
        assert "filter by one of running" in p.text() and browser.title == "bad request"
        assert [e["message"] for e in browser.get_log("browser")] == [
            f"{url}/?status=nonsense - Failed to load resource: the server responded with a status of 400 (Bad Request)"
        ]
        p.check("bad-request")  # its console entry was read above
        view = next(i for i, r in enumerate(runs) if r.uri == view_run)
        browser.get(url + f"/run/{runs[view].run_id}/samples?dataset=sumie:synthetic&method=cok")
        p.check("samples-sumie")
        browser.find_element(By.CSS_SELECTOR, "#samples tbody tr a").click()
        p.check("unit-gold")
        gold = browser.find_element(By.CSS_SELECTOR, 'section.gold[data-kind="facts"]')
        marks = [td.text for td in gold.find_elements(By.CSS_SELECTOR, "tr.fact td:last-child")]
        assert marks and set(marks) <= {"matched", "missed"}
        browser.get(url + f"/run/{runs[view].run_id}/samples")
        outcomes = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "f-steps")).options][3:]
        assert outcomes  # each step outcome of the run is a filter value
        Select(browser.find_element(By.ID, "f-steps")).select_by_value(outcomes[0])
        browser.find_element(By.ID, "apply").click()
        p.check("samples-by-outcome")
        assert browser.find_elements(By.CSS_SELECTOR, "#samples tbody tr")
        assert all(
            outcomes[0] in r.get_attribute("data-outcomes").split(",")
            for r in browser.find_elements(By.CSS_SELECTOR, "#samples tbody tr")
        )
