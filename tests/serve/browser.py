"""Headless Chromium driven through chromedriver (Debian's chromium and chromium-driver) with
selenium, pointed at /usr/bin/chromedriver so that it never downloads a driver."""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
# headless as root in a sandbox with no network: without the last five Chromium keeps dialling
# Google's hosts (update, sync, field trials), each refused
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if CHROMIUM is None:
        return "no chromium: the browser tests need one (apt-get install chromium chromium-driver)"
    if CHROMEDRIVER is None:
        return "no chromedriver beside chromium (apt-get install chromium-driver)"
    return None


def start(profile: Path, width: int = 1280, height: int = 1000):
    """A fresh headless Chromium with its own empty profile folder."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
