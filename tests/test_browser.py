"""End to end in a real browser: `streamlit run app.py` on a free localhost port, driven
by Playwright in Debian's headless Chromium (upload, ask, open a citation, see the page).

`.ci/run` installs Chromium and sets REQUIRE_BROWSER=1, so there a missing browser
fails the test; on a developer machine without one it is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import write_text_pdf

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not Path(CHROMIUM).exists():
    if os.environ.get("REQUIRE_BROWSER"):
        raise RuntimeError(f"REQUIRE_BROWSER is set but there is no Chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.skip("Chromium is not installed (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402  (only needed when Chromium exists)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(url: str, server: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"streamlit exited early:\n{server.stdout.read()}")
        try:
            if urllib.request.urlopen(url, timeout=2).read() == b"ok":
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"streamlit did not answer {url} within {timeout}s")


@pytest.fixture
def app_url(tmp_path):
    """The real app, served by `streamlit run` with a temp store and the small embedded model."""
    port = free_port()
    env = {
        **os.environ,
        "CHROMA_PERSIST_DIR": str(tmp_path / "store"),
        "LOG_FILE": str(tmp_path / "app.log"),
        "LLM_BACKEND": "embedded",
        "EMBED_BACKEND": "embedded",
        "EMBEDDED_LLM": "qwen2.5-coder-0.5b",
        "ENRICH_ENABLED": "false",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}/_stcore/health", server)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_upload_ask_and_see_the_cited_page_in_a_real_browser(app_url, tmp_path):
    pdf = write_text_pdf(
        tmp_path / "harbour.pdf",
        [
            "The lighthouse keeper of Port Elwin was Margaret Tolland.",
            "The fishing fleet landed mostly cod and haddock.",
            "The railway reached the town in 1889. Trains to the capital took nine hours.",
        ],
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_FLAGS, viewport={"width": 1400, "height": 1000},
        )
        page = browser.new_page()
        try:
            page.goto(app_url)
            expect(page.get_by_text("Chat with your PDFs").first).to_be_visible(timeout=60_000)
            page.locator('input[type="file"]').set_input_files(str(pdf))
            expect(page.get_by_text("harbour.pdf: searchable")).to_be_visible(timeout=120_000)

            chat = page.get_by_placeholder("Ask about your documents")
            chat.fill("When did the railway reach the town?")
            chat.press("Enter")
            chip = page.get_by_role("radio", name=re.compile(r"harbour\.pdf · p\. 3"))  # st.pills are radios
            expect(chip).to_be_visible(timeout=240_000)
            expect(page.get_by_test_id("stChatMessage").last).to_contain_text("1889")

            chip.click()
            image = page.get_by_test_id("stImage").locator("img").last
            expect(image).to_be_visible(timeout=60_000)
            assert image.evaluate("img => img.naturalWidth") > 300  # a real rendered page, not a broken icon
            image.scroll_into_view_if_needed()
            page.screenshot(path=str(tmp_path / "answer-with-citation.png"))
        finally:
            browser.close()
    assert (tmp_path / "answer-with-citation.png").stat().st_size > 10_000
