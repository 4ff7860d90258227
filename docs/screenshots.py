"""Take the README's screenshots in headless Chromium: upload progress, then an answer
with its cited page open. Uses the default embedded model and a fresh temp store.

    python docs/screenshots.py        # writes docs/upload-progress.png and docs/answer-with-citation.png

It drives the app exactly like tests/test_browser.py does (and borrows its helpers).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from conftest import free_port, wait_until_healthy  # noqa: E402
from test_browser import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402

MISC = REPO.parent / "shared" / "bench" / "misc"
SCAN = MISC / "scan_multipage.pdf"  # six scanned pages: OCR keeps the progress bar up long enough to see
FLYER = MISC / "scan_linn.pdf"
QUESTION = "How many tracks does the LinnSequencer record, and how is it operated?"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {**os.environ, "CHROMA_PERSIST_DIR": f"{tmp}/store", "LOG_FILE": f"{tmp}/app.log", "ENRICH_ENABLED": "false"}
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        try:
            wait_until_healthy(f"http://127.0.0.1:{port}/_stcore/health", server)
            with sync_playwright() as pw:
                browser = pw.chromium.launch_persistent_context(
                    f"{tmp}/profile", executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
                    viewport={"width": 1400, "height": 1100},
                )
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{port}")
                expect(page.get_by_text("Chat with your PDFs").first).to_be_visible(timeout=60_000)
                page.locator('input[type="file"]').set_input_files([str(FLYER), str(SCAN)])
                expect(page.get_by_text(re.compile(r"Reading page [3-5] of 6"))).to_be_visible(timeout=120_000)
                page.screenshot(path=str(DOCS / "upload-progress.png"))
                expect(page.get_by_text("scan_multipage.pdf: searchable")).to_be_visible(timeout=300_000)

                chat = page.get_by_placeholder("Ask about your documents")
                chat.fill(QUESTION)
                chat.press("Enter")
                chip = page.get_by_role("radio", name=re.compile(r"\] scan_linn\.pdf · p\. 1")).first
                expect(chip).to_be_visible(timeout=300_000)
                chip.click()
                image = page.get_by_test_id("stImage").locator("img").last
                expect(image).to_be_visible(timeout=60_000)
                page.get_by_test_id("stChatMessage").nth(-2).evaluate("el => el.scrollIntoView({block: 'start'})")
                page.screenshot(path=str(DOCS / "answer-with-citation.png"), full_page=False)
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
