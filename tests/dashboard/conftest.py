"""A seeded store (real traces, real classifier, the store's own calls) served over real HTTP by
the API app, and headless Chromium from Debian's packages driven by Selenium."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccscope.api.app import create_app
from ccscope.store import Store
from ccscope.verdict import Verdict
from tests.dashboard.seed import seed

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="session")
def seeded_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, Verdict]]]:
    d = tmp_path_factory.mktemp("dash")
    s = Store(f"sqlite:///{d / 'store.db'}", str(d / "traces"))
    s.migrate()
    verdicts = seed(s)
    yield s, verdicts
    s.close()


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return int(sk.getsockname()[1])


@pytest.fixture(scope="session")
def server(seeded_store: tuple[Store, dict[str, Verdict]]) -> Iterator[str]:
    import uvicorn

    store, _ = seeded_store
    port = _free_port()
    cfg = uvicorn.Config(create_app(store, token="t"), host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(cfg)
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        if time.monotonic() > deadline or not th.is_alive():
            raise RuntimeError("the API did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    th.join(timeout=10)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("chromium and chromium-driver are not installed (deploy/install.sh installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium fetch a driver or browser
    profile = tempfile.mkdtemp(prefix="ccscope-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1600",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
