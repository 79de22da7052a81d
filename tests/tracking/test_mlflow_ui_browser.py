"""The MLflow UI in a real browser: `mlflow ui` over the session's default sweep (tests/conftest.py), in
headless Chromium.

Skipped where Chromium, its driver (Debian: `apt-get install chromium chromium-driver`) or selenium
(`pip install .[dev]`) is missing. The screenshots stay in the test's temporary folder.
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from helpers.servers import MlflowServer
from trainbench.core.vocab import Tag
from trainbench.models.registry import REGISTRY

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p),
                None)
DRIVER = shutil.which("chromedriver")
_MISSING = ("Chromium is not installed (Debian: apt-get install chromium chromium-driver)" if CHROMIUM is None else
            "chromedriver is not installed (Debian: apt-get install chromium-driver)" if DRIVER is None else
            "selenium is not installed (pip install .[dev])" if importlib.util.find_spec("selenium") is None else
            None)
# skipped before anything is set up (the sweep behind it takes minutes)
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))]
#: What Chromium needs to run headless here: as root (no sandbox), without a GPU or a display, and
#: without reaching anything but the local UI.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1600,1000")


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def ui(default_sweep, tmp_path):
    server = MlflowServer(default_sweep.uri, default_sweep.root / "artifacts", tmp_path / "mlflow-ui.log",
                          workers=1, command="ui")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_sweep_opens_as_training_runs_grouped_under_their_parent_with_the_dataset(default_sweep, ui,
                                                                                        browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from trainbench.tracking.conventions import ui_url

    c, exp_id = default_sweep.client, default_sweep.exp.experiment_id
    (parent,) = c.search_runs([exp_id], "tags.kind = 'sweep'")
    children = c.search_runs([exp_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    train = [r for r in children if r.data.tags.get(Tag.KIND) == "train"]
    assert len(train) == len(REGISTRY.names())  # the session's default sweep: every registered model
    sweep_name = parent.info.run_name
    dataset = train[0].inputs.dataset_inputs[0].dataset

    def grid_text() -> str:
        grids = browser.find_elements(By.CSS_SELECTOR, "[role=grid], [role=treegrid]")
        return "\n".join(g.text for g in grids)

    browser.get(ui_url(ui.uri, exp_id))  # the link the sweep summary prints
    try:
        WebDriverWait(browser, 120).until(lambda d: sweep_name in grid_text())
        browser.save_screenshot(str(tmp_path / "mlflow_ui_runs.png"))
        body = browser.find_element(By.TAG_NAME, "body").text
        # the training-runs view, not the GenAI overview (traces, tokens, "Detect issues")
        assert f"/experiments/{exp_id}/runs" in browser.current_url
        assert "Token Usage" not in body and "Detect Issues" not in body
        assert "Dataset" in grid_text() and "Source" in grid_text()
        # grouped: the sweep is one row; its runs appear only when it is expanded
        assert not any(r.info.run_name in grid_text() for r in train)
        cell = browser.find_element(By.XPATH, f"//*[@role='gridcell'][.//a[normalize-space()='{sweep_name}']]")
        cell.find_element(By.TAG_NAME, "button").click()
        WebDriverWait(browser, 60).until(lambda d: all(r.info.run_name in grid_text() for r in train))
        browser.save_screenshot(str(tmp_path / "mlflow_ui_sweep_expanded.png"))
        text = grid_text()
        assert f"{dataset.name} ({dataset.digest[:8]}" in text  # the Dataset column names the data
        assert text.count("run.py") >= 3  # the Source column: the parent and both jobs
    finally:
        browser.save_screenshot(str(tmp_path / "mlflow_ui_last.png"))
    assert (tmp_path / "mlflow_ui_sweep_expanded.png").stat().st_size > 10_000
