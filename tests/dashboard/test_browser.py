"""The dashboard in real headless Chromium against a real store: pages load, the charts draw the
series the store holds, the domain page shows the verdict, the browser logs no error, and the
keyboard reaches the navigation."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from ccscope.store import Store
from ccscope.verdict import Verdict
from tests.dashboard.seed import DAYS, VANTAGES


def _open(browser: Any, url: str) -> None:
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(url)


def _no_console_errors(browser: Any) -> None:
    errors = [e for e in browser.get_log("browser") if e.get("level") in ("SEVERE", "ERROR")]
    assert errors == []


def _series(browser: Any, chart_id: str) -> dict[str, str]:
    groups = browser.find_elements(By.CSS_SELECTOR, f"svg#{chart_id} g.series")
    return {g.get_attribute("data-series"): g.get_attribute("data-values") or "" for g in groups}


def test_census_page_draws_our_series_and_the_history(
    browser: Any, server: str, seeded_store: tuple[Store, dict[str, Verdict]]
) -> None:
    _, verdicts = seeded_store
    _open(browser, server + "/")
    assert browser.title.startswith("Census")
    panels = browser.find_elements(By.CSS_SELECTOR, "article.panel")
    assert {p.get_attribute("data-vantage") for p in panels} == set(VANTAGES)
    series = _series(browser, "census-0")
    assert set(series) == {v.label for v in verdicts.values()}
    for values in series.values():  # one share per census day, each drawn as a real path
        assert len(values.split(",")) == len(DAYS)
    cubic = [float(x) for x in series["cubic"].split(",")]
    assert cubic == pytest.approx([2 / 6] * len(DAYS), abs=1e-3)  # 2 of the 6 sites run CUBIC
    paths = browser.find_elements(By.CSS_SELECTOR, "svg#census-0 g.series path")
    assert len(paths) == len(series) and all(p.get_attribute("d").startswith("M") for p in paths)
    hist = _series(browser, "history")
    assert set(hist) == {"loss-aimd", "loss-mimd", "delay-aimd", "delay-mimd", "rate", "other"}
    assert len(hist["rate"].split(",")) == 5 + len(DAYS)  # five published studies + our days
    assert browser.find_elements(By.CSS_SELECTOR, 'svg#history g.marker[data-label="ccscope"]')
    regions = browser.find_element(By.CSS_SELECTOR, "table.regions").text
    assert "ohio" in regions and "paris (tcp)" in regions and "table 6.5" in browser.page_source
    # every chart has its alt text
    for svg in browser.find_elements(By.CSS_SELECTOR, "svg.chart"):
        assert svg.get_attribute("role") == "img"
        assert svg.find_element(By.TAG_NAME, "title").get_attribute("textContent").strip()
    _no_console_errors(browser)


def test_domain_page_shows_the_verdict_and_its_traces(
    browser: Any, server: str, seeded_store: tuple[Store, dict[str, Verdict]]
) -> None:
    _, verdicts = seeded_store
    _open(browser, server + "/domains/bank.example")
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.verdict")
    assert {r.get_attribute("data-vantage") for r in rows} == set(VANTAGES)
    v = verdicts["bank.example"]
    assert v.kind == "unknown"
    assert all(r.get_attribute("data-kind") == "unknown" for r in rows)
    assert v.display in rows[0].text
    assert v.explanation[:60] in browser.find_element(By.CSS_SELECTOR, "article.explanation").text
    traces = browser.find_elements(By.CSS_SELECTOR, 'svg[data-chart="trace"]')
    assert len(traces) == 2 * len(VANTAGES)  # profiles A and B of each latest verdict
    first = traces[0]
    assert {g.get_attribute("data-series") for g in first.find_elements(By.CSS_SELECTOR, "g.series")} == {
        "bif",
        "pipe",
    }
    assert first.find_elements(By.CSS_SELECTOR, "rect.segment")  # the classifier's segments
    assert first.find_elements(By.CSS_SELECTOR, "g.slow-start-end")
    _no_console_errors(browser)


def test_unknown_and_accuracy_pages(browser: Any, server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _open(browser, server + "/unknown")
    fams = browser.find_elements(By.CSS_SELECTOR, "svg#families g.series")
    assert [f.get_attribute("data-series") for f in fams] == ["Vegas-like"]
    _no_console_errors(browser)
    monkeypatch.setenv("CCSCOPE_ROBUSTNESS_JSON", "/nonexistent/robustness.json")
    _open(browser, server + "/accuracy")
    cells = browser.find_elements(By.CSS_SELECTOR, "svg#confusion-0 rect[data-count]")
    assert len(cells) > 100 and sum(int(c.get_attribute("data-count")) for c in cells) > 0
    assert "Not yet measured" in browser.find_element(By.ID, "robustness-missing").text
    _no_console_errors(browser)


def test_keyboard_reaches_the_navigation(browser: Any, server: str) -> None:
    _open(browser, server + "/")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    first = browser.switch_to.active_element
    assert first.get_attribute("class") == "skip"  # the skip link comes first
    in_nav = []
    for _ in range(4):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        el = browser.switch_to.active_element
        in_nav.append(browser.execute_script("return arguments[0].closest('nav') !== null", el))
    assert any(in_nav)
    # the skip link moves focus to the content
    _open(browser, server + "/")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    assert browser.switch_to.active_element.get_attribute("id") == "main"
