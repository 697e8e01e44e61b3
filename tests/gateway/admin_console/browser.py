"""Headless Debian chromium driven through chromedriver (both from apt, `make install`), for the console's browser
tests: a fresh profile per browser, nothing fetched from the network."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


@contextlib.contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver_path, "chromium and chromedriver are needed: apt-get install -y chromium chromium-driver"
    with tempfile.TemporaryDirectory(prefix="sg-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            yield driver
        finally:
            driver.quit()
